//! Releases of managed tensors, now or queued for a thread that holds the GIL (see
//! [`crate::python::release`]).

use super::border::{Attach, attach_for, attached, entry_point, quietly};
use super::values::RSDLPACK_CALL_REFUSE_WITHOUT_GIL;
use crate::error::BridgeResult;
use crate::python::release;
use rsdlpack::dlpark::Managed;
use rsdlpack::dlpark::ffi::DLManagedTensorVersioned;
use std::ffi::c_char;

/// Releases a managed tensor now (its deleter runs; a Python producer's is deferred to a
/// thread holding the GIL). A tensor from `rsdlpack_py_import` of CUDA memory is released after
/// the work enqueued so far on the stream its import named: at once when that work is complete
/// and the calling thread holds the GIL, else queued (nothing waits with the GIL held; see
/// `rsdlpack_py_flush_releases`). Null is ignored.
///
/// # Safety
/// `tensor` must be null or an owned `DLManagedTensorVersioned*` that is not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_tensor_release(tensor: *mut DLManagedTensorVersioned) {
    if tensor.is_null() {
        return;
    }
    quietly((), || {
        // SAFETY: ownership passes to us (caller's contract); dropping runs the deleter once.
        drop(unsafe { Managed::from_raw(tensor) });
    })
}

/// Releases every Python-produced tensor whose release was deferred; returns how many. Takes
/// the GIL (blocks until it is available) and waits for the GPU work that queued CUDA tensors'
/// consumers enqueued on them (ordinary calls release only those whose work has completed):
/// call it from a thread that may wait for Python and the GPU.
#[unsafe(no_mangle)]
pub extern "C" fn rsdlpack_py_flush_releases() -> usize {
    quietly(0, || {
        // As every entry point: a thread that cannot safely take the GIL is refused (0).
        attached(Attach::Wait, |py| {
            Ok(release::drain(py, release::Wait::Yes))
        })
        .unwrap_or(0)
    })
}

/// As [`rsdlpack_py_flush_releases`], with `flags` (`RSDLPACK_CALL_REFUSE_WITHOUT_GIL` or 0;
/// other bits are refused with `RSDL_ERROR_CODE_INVALID`) and a return code: how many releases
/// ran is written to `*released_out` (when not null).
///
/// # Safety
/// `released_out` and `error_out` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_py_flush_releases_with_flags(
    flags: u32,
    released_out: *mut usize,
    error_out: *mut *mut c_char,
) -> i32 {
    let body = || -> BridgeResult<()> {
        let attach = attach_for(
            "rsdlpack_py_flush_releases_with_flags",
            flags,
            RSDLPACK_CALL_REFUSE_WITHOUT_GIL,
        )?;
        let released = attached(attach, |py| Ok(release::drain(py, release::Wait::Yes)))?;
        if !released_out.is_null() {
            // SAFETY: non-null, and writable by this entry point's contract.
            unsafe { released_out.write(released) };
        }
        Ok(())
    };
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    unsafe { entry_point(error_out, body) }
}

/// How many released tensors wait for a thread that holds the GIL.
#[unsafe(no_mangle)]
pub extern "C" fn rsdlpack_py_pending_releases() -> usize {
    quietly(0, release::pending)
}
