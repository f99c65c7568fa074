//! The CUDA context a piece of work belongs to, held for as long as our events live in it.
//!
//! An event must be created in, and recorded from, the context of the stream it is recorded on
//! (`cuEventRecord` refuses an event and a stream of different contexts). A stream handle names
//! its context (`cuStreamGetCtx`); the aliases 1 and 2 mean "the legacy / per-thread default
//! stream of whatever context is current", so for them the context current when the stream was
//! named is the one meant ([`HeldContext::current`]).
//!
//! A primary context lives while someone retains it: an event created in it dangles once the
//! last retain is released and the driver resets it. So a [`HeldContext`] of a primary context
//! retains it until dropped. A user or green context cannot be retained (the driver has no call
//! for it); its creator must keep it alive until the work that used it is released, as it must
//! keep the memory and the stream alive.
//!
//! Every call here runs under [`RelaxedCapture`]: the queries and waits a release makes are
//! "unsafe" calls to a global-mode graph capture on any thread of the process, which they would
//! invalidate.

use super::call;
use crate::error::Result;
use cudarc::driver::sys;

/// A context, retained when it is a primary one (see the module docs).
pub struct HeldContext {
    context: sys::CUcontext,
    /// The device whose primary context `context` is, retained by us; `None` for a user context.
    retained_primary_of: Option<sys::CUdevice>,
}

// SAFETY: a `CUcontext` is a process-wide driver handle that any thread may push; the retain
// is released by whichever thread drops the hold, which the driver allows.
unsafe impl Send for HeldContext {}
// SAFETY: nothing mutates a hold through `&self`; pushing the context (`enter`) is allowed from
// any number of threads at once.
unsafe impl Sync for HeldContext {}

impl std::fmt::Debug for HeldContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldContext")
            .field("context", &(self.context as usize))
            .field("retained_primary_of", &self.retained_primary_of)
            .finish()
    }
}

impl HeldContext {
    /// The primary context of device `ordinal`, retained.
    pub fn primary(ordinal: i32) -> Result<Self> {
        super::driver()?;
        let _relaxed = RelaxedCapture::enter();
        let device = cudarc::driver::result::device::get(ordinal)
            .map_err(|e| super::driver_error("cuDeviceGet", e, format!("device {ordinal}: ")))?;
        // SAFETY: `device` is a valid device handle; released in Drop.
        let context = unsafe { cudarc::driver::result::primary_ctx::retain(device) }
            .map_err(|e| super::driver_error("cuDevicePrimaryCtxRetain", e, String::new()))?;
        Ok(Self {
            context,
            retained_primary_of: Some(device),
        })
    }

    /// The context stream `handle` (> 2) belongs to.
    ///
    /// # Safety
    /// `handle` must be a live `CUstream`: the driver dereferences it.
    pub unsafe fn of_stream(handle: usize) -> Result<Self> {
        super::driver()?;
        let _relaxed = RelaxedCapture::enter();
        let mut context: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer valid; `handle` is live (function contract).
        let status = unsafe { sys::cuStreamGetCtx(handle as sys::CUstream, &mut context) };
        call(status, "cuStreamGetCtx")?;
        // SAFETY: the driver just named this context as the live stream's.
        unsafe { Self::holding(context) }
    }

    /// The context current on the calling thread, or `None` when there is none.
    pub fn current() -> Result<Option<Self>> {
        super::driver()?;
        let _relaxed = RelaxedCapture::enter();
        let mut context: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer valid.
        let status = unsafe { sys::cuCtxGetCurrent(&mut context) };
        call(status, "cuCtxGetCurrent")?;
        if context.is_null() {
            return Ok(None);
        }
        // SAFETY: the current context is live.
        unsafe { Self::holding(context) }.map(Some)
    }

    /// Holds `context`, retaining it when it is its device's primary context.
    ///
    /// # Safety
    /// `context` must be live.
    unsafe fn holding(context: sys::CUcontext) -> Result<Self> {
        let device = {
            // SAFETY: `context` is live (contract); popped when `_current` drops.
            let _current = unsafe { Current::push(context) }?;
            let mut device: sys::CUdevice = 0;
            // SAFETY: out-pointer valid; a context is current.
            let status = unsafe { sys::cuCtxGetDevice(&mut device) };
            call(status, "cuCtxGetDevice")?;
            device
        };
        // SAFETY: a valid device handle; the retain is kept (a primary context) or undone now.
        let primary = unsafe { cudarc::driver::result::primary_ctx::retain(device) }
            .map_err(|e| super::driver_error("cuDevicePrimaryCtxRetain", e, String::new()))?;
        if is_primary(context, primary) {
            Ok(Self {
                context,
                retained_primary_of: Some(device),
            })
        } else {
            // SAFETY: undoes the retain just made.
            let _ = unsafe { cudarc::driver::result::primary_ctx::release(device) };
            Ok(Self {
                context,
                retained_primary_of: None,
            })
        }
    }

    /// Another hold on the same context (a second retain of a primary one).
    pub fn duplicate(&self) -> Result<Self> {
        match self.retained_primary_of {
            Some(device) => {
                let _relaxed = RelaxedCapture::enter();
                // SAFETY: a valid device handle; released in the new hold's Drop.
                unsafe { cudarc::driver::result::primary_ctx::retain(device) }.map_err(|e| {
                    super::driver_error("cuDevicePrimaryCtxRetain", e, String::new())
                })?;
                Ok(Self {
                    context: self.context,
                    retained_primary_of: Some(device),
                })
            }
            None => Ok(Self {
                context: self.context,
                retained_primary_of: None,
            }),
        }
    }

    /// Whether this is a primary context that the hold retains.
    pub fn is_retained_primary(&self) -> bool {
        self.retained_primary_of.is_some()
    }

    /// The context, made current on this thread (and captures relaxed) until the guard drops.
    pub(crate) fn enter(&self) -> Result<Current> {
        // SAFETY: held (retained, or kept alive by its creator: see the module docs).
        unsafe { Current::push(self.context) }
    }
}

impl Drop for HeldContext {
    fn drop(&mut self) {
        if let Some(device) = self.retained_primary_of {
            let _relaxed = RelaxedCapture::enter();
            // SAFETY: releases our retain, once; errors are ignored (Drop never panics).
            let _ = unsafe { cudarc::driver::result::primary_ctx::release(device) };
        }
    }
}

/// Whether `context` is the primary context `primary` (what `cuDevicePrimaryCtxRetain` on its
/// device returned).
fn is_primary(context: sys::CUcontext, primary: sys::CUcontext) -> bool {
    context == primary
}

/// A context pushed on this thread's stack, popped on drop (on the same thread), with the
/// thread's capture mode relaxed meanwhile.
pub(crate) struct Current {
    _relaxed: RelaxedCapture,
}

impl Current {
    /// # Safety
    /// `context` must be live.
    unsafe fn push(context: sys::CUcontext) -> Result<Self> {
        let relaxed = RelaxedCapture::enter();
        // SAFETY: live (contract); popped in Drop.
        let status = unsafe { sys::cuCtxPushCurrent_v2(context) };
        call(status, "cuCtxPushCurrent")?;
        Ok(Self { _relaxed: relaxed })
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: pops what `push` pushed on this thread; errors are ignored (Drop never panics).
        let _ = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
    }
}

/// This thread's stream-capture mode set to relaxed until dropped, then restored: a graph
/// capture in global mode on any thread is invalidated by "unsafe" calls (event queries and
/// synchronisations among them) from every thread not in relaxed mode.
pub(crate) struct RelaxedCapture {
    previous: Option<sys::CUstreamCaptureMode>,
    /// The mode is per thread: restored on the thread that set it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl RelaxedCapture {
    /// Never fails: a driver without the call (or without a driver) leaves the mode as it is.
    pub(crate) fn enter() -> Self {
        let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        let previous = super::driver().ok().and_then(|()| {
            // SAFETY: `mode` is a valid in/out pointer; the call only swaps this thread's mode.
            let status = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
            call(status, "cuThreadExchangeStreamCaptureMode")
                .ok()
                .map(|()| mode)
        });
        Self {
            previous,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for RelaxedCapture {
    fn drop(&mut self) {
        if let Some(mut previous) = self.previous {
            // SAFETY: restores the mode `enter` swapped out, on the same thread.
            let _ = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut previous) };
        }
    }
}

/// Whether the work on `stream` is being captured into a graph (an active or an invalidated
/// capture) rather than run: an event recorded there would become a graph node.
///
/// # Safety
/// `stream` must be 1, 2 or a live `CUstream`; a context must be current (for 1 and 2, the one
/// they alias).
pub(crate) unsafe fn is_capturing(stream: usize) -> Result<bool> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: out-pointer valid; `stream` is live (contract).
    let result = unsafe { sys::cuStreamIsCapturing(stream as sys::CUstream, &mut status) };
    call(result, "cuStreamIsCapturing")?;
    Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_is_primary_only_when_it_is_the_devices_primary() {
        let a = 0x1000 as sys::CUcontext;
        let b = 0x2000 as sys::CUcontext;
        assert!(is_primary(a, a));
        assert!(!is_primary(a, b));
    }

    #[test]
    fn without_a_driver_no_context_can_be_held_and_captures_are_left_alone() {
        let here = super::super::driver();
        assert!(
            matches!(here, Err(crate::Error::NoCudaDriver)),
            "asserts the no-driver behaviour, but this machine answers {here:?}"
        );
        assert!(matches!(
            HeldContext::primary(0),
            Err(crate::Error::NoCudaDriver)
        ));
        // SAFETY: without a driver it returns before the handle is used.
        let of_stream = unsafe { HeldContext::of_stream(0x1234) };
        assert!(matches!(of_stream, Err(crate::Error::NoCudaDriver)));
        assert!(matches!(
            HeldContext::current(),
            Err(crate::Error::NoCudaDriver)
        ));
        let relaxed = RelaxedCapture::enter();
        assert!(relaxed.previous.is_none(), "no driver: nothing was swapped");
    }
}
