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
    /// The device the context belongs to.
    device: sys::CUdevice,
    /// Whether `context` is `device`'s primary context, retained by us (`false`: a user or
    /// green context).
    retained_primary: bool,
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
            .field("device", &self.device)
            .field("retained_primary", &self.retained_primary)
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
            device,
            retained_primary: true,
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

    /// Holds `context`, retaining it when it is its device's primary context. Whether it is
    /// primary is asked without retaining anything first where the device's primary context is
    /// inactive (then it is not this live one): retaining it there would initialise a primary
    /// context (device memory, a long wait) only to tear it down again.
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
        let (mut flags, mut active) = (0u32, 0i32);
        // SAFETY: a valid device handle and out-pointers; the query retains nothing.
        let status = unsafe { sys::cuDevicePrimaryCtxGetState(device, &mut flags, &mut active) };
        call(status, "cuDevicePrimaryCtxGetState")?;
        let not_primary = Self {
            context,
            device,
            retained_primary: false,
        };
        if !may_be_primary(active != 0) {
            return Ok(not_primary);
        }
        // SAFETY: a valid device handle; the retain is kept (a primary context) or undone now.
        let primary = unsafe { cudarc::driver::result::primary_ctx::retain(device) }
            .map_err(|e| super::driver_error("cuDevicePrimaryCtxRetain", e, String::new()))?;
        if is_primary(context, primary) {
            Ok(Self {
                retained_primary: true,
                ..not_primary
            })
        } else {
            // SAFETY: undoes the retain just made.
            let _ = unsafe { cudarc::driver::result::primary_ctx::release(device) };
            Ok(not_primary)
        }
    }

    /// The device the context belongs to (its ordinal: the driver's device handles are the
    /// ordinals `cuDeviceGet` maps them from).
    pub fn device(&self) -> i32 {
        self.device
    }

    /// The raw context, to tell two holds apart (a fence's events are keyed by it).
    pub fn raw(&self) -> usize {
        self.context as usize
    }

    /// The context, made current on this thread (and captures relaxed) until the guard drops,
    /// which cannot outlive the hold.
    pub(crate) fn enter(&self) -> Result<Current<'_>> {
        // SAFETY: held (retained, or kept alive by its creator: see the module docs) for as
        // long as the guard borrows it.
        unsafe { Current::push(self.context) }
    }
}

impl Drop for HeldContext {
    fn drop(&mut self) {
        if self.retained_primary {
            let _relaxed = RelaxedCapture::enter();
            // SAFETY: releases our retain, once; errors are ignored (Drop never panics).
            let _ = unsafe { cudarc::driver::result::primary_ctx::release(self.device) };
        }
    }
}

/// Whether `context` is the primary context `primary` (what `cuDevicePrimaryCtxRetain` on its
/// device returned).
fn is_primary(context: sys::CUcontext, primary: sys::CUcontext) -> bool {
    context == primary
}

/// Whether a live context of a device may be its primary context, given whether that primary
/// context is active (`cuDevicePrimaryCtxGetState`): a live primary context is an active one,
/// so where it is inactive the context is a user or green context, and nothing is retained to
/// compare.
fn may_be_primary(primary_active: bool) -> bool {
    primary_active
}

/// A context pushed on this thread's stack, popped on drop (on the same thread), with the
/// thread's capture mode relaxed meanwhile. It borrows what keeps the context alive (a
/// [`HeldContext`]: [`HeldContext::enter`]), so it cannot outlive that hold.
pub(crate) struct Current<'a> {
    _relaxed: RelaxedCapture,
    _held: std::marker::PhantomData<&'a HeldContext>,
}

impl Current<'_> {
    /// # Safety
    /// `context` must be live for as long as the guard is.
    unsafe fn push(context: sys::CUcontext) -> Result<Self> {
        let relaxed = RelaxedCapture::enter();
        // SAFETY: live (contract); popped in Drop.
        let status = unsafe { sys::cuCtxPushCurrent_v2(context) };
        call(status, "cuCtxPushCurrent")?;
        Ok(Self {
            _relaxed: relaxed,
            _held: std::marker::PhantomData,
        })
    }
}

impl Drop for Current<'_> {
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

/// A stream's part in graph captures, as the driver answers (`cuStreamGetCaptureInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// Its work runs.
    Idle,
    /// Its work is being captured into a graph: `Some(id)` for an active capture (the id is
    /// unique over the process's life), `None` for an invalidated one (still to be ended).
    Capturing(Option<u64>),
    /// The legacy default stream while a blocking stream of its context captures (CUDA.jl's
    /// task streams are blocking): "in an unusable state" until that capture ends; anything
    /// recorded, waited for or synchronised there would join the capture.
    Implicit,
}

impl Capture {
    /// Whether work or waits put on the stream now would not simply run.
    pub fn is_capturing(self) -> bool {
        self != Self::Idle
    }
}

/// The stream's [`Capture`] state.
///
/// # Safety
/// `stream` must be 1, 2 or a live `CUstream`; a context must be current (for 1 and 2, the one
/// they alias).
pub(crate) unsafe fn capture_of(stream: usize) -> Result<Capture> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id: sys::cuuint64_t = 0;
    // SAFETY: out-pointers valid (the three optional ones null, as the documentation allows);
    // `stream` is live (contract).
    let result = unsafe {
        sys::cuStreamGetCaptureInfo_v2(
            stream as sys::CUstream,
            &mut status,
            &mut id,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    match capture_answer(result, status, id) {
        Some(capture) => Ok(capture),
        None => call(result, "cuStreamGetCaptureInfo").map(|()| Capture::Idle),
    }
}

/// Whether the work on `stream` is being captured into a graph (an active or an invalidated
/// capture, or implicitly: [`Capture`]) rather than run: an event recorded there would become
/// a graph node, and a wait or a synchronisation there would join or break the capture.
///
/// # Safety
/// As [`capture_of`].
pub(crate) unsafe fn is_capturing(stream: usize) -> Result<bool> {
    // SAFETY: forwarded from this function's contract.
    unsafe { capture_of(stream) }.map(Capture::is_capturing)
}

/// What `cuStreamGetCaptureInfo` answered: the [`Capture`], or `None` for a failed call.
/// `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT` is an answer, not a failure: it is what the legacy
/// default stream says while a blocking stream of its context captures (the driver's
/// `cuStreamIsCapturing` and `cuStreamGetCaptureInfo` documentation).
pub(crate) fn capture_answer(
    result: sys::CUresult,
    status: sys::CUstreamCaptureStatus,
    id: u64,
) -> Option<Capture> {
    use sys::CUresult as R;
    use sys::CUstreamCaptureStatus as S;
    match (result, status) {
        (R::CUDA_SUCCESS, S::CU_STREAM_CAPTURE_STATUS_NONE) => Some(Capture::Idle),
        (R::CUDA_SUCCESS, S::CU_STREAM_CAPTURE_STATUS_ACTIVE) => Some(Capture::Capturing(Some(id))),
        (R::CUDA_SUCCESS, _) => Some(Capture::Capturing(None)),
        (R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, _) => Some(Capture::Implicit),
        _ => None,
    }
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
        assert!(
            !may_be_primary(false),
            "an inactive primary context is not retained to be compared"
        );
        assert!(may_be_primary(true));
    }

    #[test]
    fn an_implicit_capture_of_the_legacy_stream_counts_as_capturing() {
        use sys::CUresult as R;
        use sys::CUstreamCaptureStatus as S;
        let none = S::CU_STREAM_CAPTURE_STATUS_NONE;
        assert_eq!(
            capture_answer(R::CUDA_SUCCESS, none, 7),
            Some(Capture::Idle)
        );
        assert_eq!(
            capture_answer(R::CUDA_SUCCESS, S::CU_STREAM_CAPTURE_STATUS_ACTIVE, 7),
            Some(Capture::Capturing(Some(7)))
        );
        assert_eq!(
            capture_answer(R::CUDA_SUCCESS, S::CU_STREAM_CAPTURE_STATUS_INVALIDATED, 7),
            Some(Capture::Capturing(None)),
            "an invalidated capture's id means nothing"
        );
        let implicit = capture_answer(R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, none, 0);
        assert_eq!(
            implicit,
            Some(Capture::Implicit),
            "a blocking stream captures: the legacy stream is unusable, not broken"
        );
        assert!(implicit.unwrap().is_capturing());
        assert!(!Capture::Idle.is_capturing());
        assert_eq!(capture_answer(R::CUDA_ERROR_INVALID_HANDLE, none, 0), None);
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
