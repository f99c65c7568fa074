//! Release fences: events recorded on the streams a consumer used an imported tensor on, which
//! its release waits for before the producer's deleter runs (see [`crate::release`]).
//!
//! The wait is on the host (`cuEventSynchronize` on these events only: never a stream, device
//! or context synchronisation), not a `cuStreamWaitEvent` on the producer's stream, because
//! the deleter hands the memory to an allocator whose reuse we cannot see. torch's caching
//! allocator gives a freed block at once to the next allocation on the stream the block was
//! *allocated* on, which need not be torch's current work stream (the only stream the DLPack
//! C exchange API names), and a producer without that API names no stream at all. A wait
//! enqueued on another stream than the one that reuses the memory orders nothing; a host wait
//! is right whichever stream reuses it. It costs time only when the consumer's kernels on the
//! memory are still running at the release, and queued releases need not wait at all: they
//! ask [`ReleaseFence::is_complete`] and stay queued until it says yes.

use super::{DeviceContext, call};
use crate::error::Result;
use cudarc::driver::sys;

/// The driver's value for the legacy default stream (`CU_STREAM_LEGACY`).
const LEGACY_DEFAULT: usize = 1;
/// The driver's value for the calling thread's per-thread default stream (`CU_STREAM_PER_THREAD`).
const PER_THREAD_DEFAULT: usize = 2;

#[cfg(test)]
thread_local! {
    /// How many fences this thread has tried to record: lets tests without a driver see what
    /// happens before and after the recording.
    pub(crate) static RECORDS_TRIED_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Events recorded on up to two streams of one device, destroyed when the fence is.
pub struct ReleaseFence {
    device: i32,
    events: [sys::CUevent; 2],
    len: usize,
}

// SAFETY: CUDA events are process-wide driver handles that any thread may query, wait for or
// destroy; a fence owns its events, and every call on them pushes the device's primary context
// on the calling thread first.
unsafe impl Send for ReleaseFence {}

impl ReleaseFence {
    /// Records an event on `first`, and on `second` when it is another stream, on device
    /// `device`. Streams are `CUstream` values: 1 the legacy default stream, 2 the per-thread
    /// default stream, or a handle. Returns the fence, holding every event that could be
    /// recorded, with the first failure.
    ///
    /// A per-thread default stream (2) is recorded as the legacy default stream (1): the
    /// release may run on another thread than the one whose per-thread stream the consumer
    /// used, and an event on the legacy default stream completes only after the work enqueued
    /// before it on every blocking stream of the context, per-thread default streams included.
    ///
    /// # Safety
    /// `first` and `second` must be 1, 2 or live `CUstream`s of device `device`: the driver
    /// dereferences them and does not validate arbitrary values.
    pub unsafe fn record(device: i32, first: usize, second: Option<usize>) -> (Self, Result<()>) {
        #[cfg(test)]
        RECORDS_TRIED_HERE.set(RECORDS_TRIED_HERE.get() + 1);
        let mut fence = Self {
            device,
            events: [std::ptr::null_mut(); 2],
            len: 0,
        };
        let context = match DeviceContext::enter(device) {
            Ok(context) => context,
            Err(error) => return (fence, Err(error)),
        };
        let as_recorded = |stream| match stream {
            PER_THREAD_DEFAULT => LEGACY_DEFAULT,
            other => other,
        };
        let first = as_recorded(first);
        let second = second.map(as_recorded).filter(|&s| s != first);
        let mut outcome = Ok(());
        for stream in std::iter::once(first).chain(second) {
            // SAFETY: a stream of this function's contract; the device's context is current.
            match unsafe { record_on(stream) } {
                Ok(event) => {
                    fence.events[fence.len] = event;
                    fence.len += 1;
                }
                Err(error) => outcome = outcome.and(Err(error)),
            }
        }
        drop(context);
        (fence, outcome)
    }

    /// Whether every event has completed. A query that fails counts as complete: the failure
    /// is the driver's answer for good, and [`Self::wait`] reports it.
    pub fn is_complete(&self) -> bool {
        if self.len == 0 {
            return true;
        }
        let Ok(_context) = DeviceContext::enter(self.device) else {
            return true;
        };
        self.events[..self.len].iter().all(|&event| {
            // SAFETY: a live event this fence created; the device's context is current.
            let status = unsafe { sys::cuEventQuery(event) };
            status != sys::CUresult::CUDA_ERROR_NOT_READY
        })
    }

    /// Blocks the calling thread until every event has completed (each was created with
    /// `CU_EVENT_BLOCKING_SYNC`, so the thread sleeps rather than spins), then destroys them.
    /// Returns the first failure; every event is waited for regardless.
    pub fn wait(mut self) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        let _context = DeviceContext::enter(self.device)?;
        let mut outcome = Ok(());
        for &event in &self.events[..self.len] {
            // SAFETY: a live event this fence created; the device's context is current.
            let status = unsafe { sys::cuEventSynchronize(event) };
            outcome = outcome.and(call(status, "cuEventSynchronize"));
        }
        outcome.and(self.destroy())
    }

    /// Destroys the events (with the device's context current); returns the first failure.
    fn destroy(&mut self) -> Result<()> {
        let mut outcome = Ok(());
        for &event in &self.events[..self.len] {
            // SAFETY: a live event this fence created, destroyed once (`len` is reset below).
            let status = unsafe { sys::cuEventDestroy_v2(event) };
            outcome = outcome.and(call(status, "cuEventDestroy"));
        }
        self.len = 0;
        outcome
    }
}

impl Drop for ReleaseFence {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        // Errors are ignored: Drop never panics and has no caller to tell.
        if let Ok(_context) = DeviceContext::enter(self.device) {
            let _ = self.destroy();
        }
    }
}

/// Creates an event and records it on `stream`.
///
/// # Safety
/// `stream` must be 1, 2 or a live `CUstream` of the current context's device.
unsafe fn record_on(stream: usize) -> Result<sys::CUevent> {
    let mut event: sys::CUevent = std::ptr::null_mut();
    let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32
        | sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
    // SAFETY: `event` is a valid out-pointer; a context is current (caller's contract).
    let status = unsafe { sys::cuEventCreate(&mut event, flags) };
    call(status, "cuEventCreate")?;
    // SAFETY: `event` was just created; `stream` is live (this function's contract).
    let status = unsafe { sys::cuEventRecord(event, stream as sys::CUstream) };
    let recorded = call(status, "cuEventRecord");
    if let Err(error) = recorded {
        // SAFETY: our event, recorded nowhere, destroyed once.
        let _ = unsafe { sys::cuEventDestroy_v2(event) };
        return Err(error);
    }
    Ok(event)
}
