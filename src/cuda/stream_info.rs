//! What a raw `CUstream` belongs to: the plain description beneath CUDA.jl's `CuStream`
//! (the Julia bridge builds that object from it), testable without Julia.

use super::call;
use crate::error::{Error, Result};
use cudarc::driver::sys;

/// A stream's context, device, flags (`CU_STREAM_*`) and priority. C layout: the Python
/// bridge returns it to ctypes callers as is.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamDescription {
    pub context: usize,
    pub device: i32,
    pub flags: u32,
    pub priority: i32,
}

/// Describes the stream `handle` (a real `CUstream`, not the special values 0, 1, 2, which
/// mean "whatever context is current" and have no context of their own).
///
/// # Safety
/// `handle` must be 0, 1, 2 (refused) or a live `CUstream`: the driver dereferences it and does
/// not validate arbitrary values.
pub unsafe fn describe_stream(handle: usize) -> Result<StreamDescription> {
    // An argument error, decided before (and whether or not) a driver is there.
    if handle <= 2 {
        return Err(Error::DefaultStreamAlias { handle });
    }
    super::driver()?;
    let stream = handle as sys::CUstream;
    let mut context: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: out-pointer valid; `stream` is live (function contract).
    let status = unsafe { sys::cuStreamGetCtx(stream, &mut context) };
    call(status, "cuStreamGetCtx")?;
    // SAFETY: `context` came from the driver; popped right after.
    let status = unsafe { sys::cuCtxPushCurrent_v2(context) };
    call(status, "cuCtxPushCurrent")?;
    let mut device: sys::CUdevice = 0;
    // SAFETY: out-pointer valid; a context is current.
    let status = unsafe { sys::cuCtxGetDevice(&mut device) };
    let got_device = call(status, "cuCtxGetDevice");
    let mut popped: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: pops what we pushed.
    let _ = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
    got_device?;
    let mut flags: u32 = 0;
    // SAFETY: out-pointer valid; `stream` is live (function contract).
    let status = unsafe { sys::cuStreamGetFlags(stream, &mut flags) };
    call(status, "cuStreamGetFlags")?;
    let mut priority: i32 = 0;
    // SAFETY: out-pointer valid; `stream` is live (function contract).
    let status = unsafe { sys::cuStreamGetPriority(stream, &mut priority) };
    call(status, "cuStreamGetPriority")?;
    Ok(StreamDescription {
        context: context as usize,
        device,
        flags,
        priority,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs everywhere: the aliases are refused before the driver is consulted, so this holds
    /// with and without one.
    #[test]
    fn default_stream_aliases_are_refused_with_advice() {
        for alias in [0, 1, 2] {
            // SAFETY: aliases are refused before any driver call.
            let err = unsafe { describe_stream(alias) }.unwrap_err();
            assert!(
                matches!(err, Error::DefaultStreamAlias { handle } if handle == alias),
                "{err:?}"
            );
            assert!(err.to_string().contains("default-stream alias"), "{err}");
        }
    }
}
