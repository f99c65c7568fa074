//! Stream ordering by events: the consumer's stream waits for what the producer's stream has
//! enqueued so far ([`order_streams`], at once), or had enqueued when its memory was handed
//! over ([`ReadyEvent`], for exports that outlive the call). The host never blocks and no
//! device-wide synchronisation happens.

use super::context::HeldContext;
use super::{DeviceContext, call};
use crate::error::Result;
use cudarc::driver::sys;

/// Records an event on `producer` and makes `consumer` wait for it. Both are `CUstream`
/// handles (1 = legacy default, 2 = per-thread default) on device `ordinal`. Equal streams
/// need nothing.
///
/// # Safety
/// `producer` and `consumer` must be 1, 2 or live `CUstream`s of device `ordinal`: the driver
/// dereferences them and does not validate arbitrary values.
pub unsafe fn order_streams(ordinal: i32, producer: usize, consumer: usize) -> Result<()> {
    let _context = DeviceContext::enter(ordinal)?;
    if producer == consumer {
        return Ok(());
    }
    let mut event: sys::CUevent = std::ptr::null_mut();
    let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
    // SAFETY: `event` is a valid out-pointer; the primary context is current.
    let status = unsafe { sys::cuEventCreate(&mut event, flags) };
    call(status, "cuEventCreate")?;
    // SAFETY: `event` was just created; the streams are live (function contract).
    let status = unsafe { sys::cuEventRecord(event, producer as sys::CUstream) };
    let recorded = call(status, "cuEventRecord").and_then(|()| {
        // SAFETY: as above.
        let status = unsafe { sys::cuStreamWaitEvent(consumer as sys::CUstream, event, 0) };
        call(status, "cuStreamWaitEvent")
    });
    // Destroying an event whose wait is enqueued is allowed: the driver frees it once done.
    // SAFETY: `event` is ours and used no further.
    let status = unsafe { sys::cuEventDestroy_v2(event) };
    let destroyed = call(status, "cuEventDestroy");
    recorded.and(destroyed)
}

/// The point in a producer's stream after which its memory is ready: an event recorded there
/// once, when the memory is handed over, that every later consumer's stream waits for. The
/// producer's stream itself is not touched again, so it may be destroyed meanwhile (a Julia
/// task's stream is, once the task's stream object is collected).
pub struct ReadyEvent {
    context: HeldContext,
    event: sys::CUevent,
    /// The device whose primary context consumer aliases (1, 2) are waited in.
    ordinal: i32,
}

// SAFETY: an event is a process-wide driver handle that any thread may wait for or destroy,
// with its context pushed (every call here does); nothing mutates it through `&self`.
unsafe impl Send for ReadyEvent {}
// SAFETY: as above.
unsafe impl Sync for ReadyEvent {}

impl ReadyEvent {
    /// Records the event on `producer` (1, 2 or a handle), for memory of device `ordinal`. An
    /// alias means the stream of the context current now, or of `ordinal`'s primary context.
    ///
    /// # Safety
    /// `producer` must be 1, 2 or a live `CUstream`.
    pub unsafe fn record(ordinal: i32, producer: usize) -> Result<Self> {
        let context = if producer > 2 {
            // SAFETY: live (contract).
            unsafe { HeldContext::of_stream(producer) }?
        } else {
            match HeldContext::current()? {
                Some(current) => current,
                None => HeldContext::primary(ordinal)?,
            }
        };
        let _current = context.enter()?;
        let mut event: sys::CUevent = std::ptr::null_mut();
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        // SAFETY: `event` is a valid out-pointer; the producer's context is current.
        let status = unsafe { sys::cuEventCreate(&mut event, flags) };
        call(status, "cuEventCreate")?;
        // SAFETY: the event was just created in the stream's context; the stream is live.
        let status = unsafe { sys::cuEventRecord(event, producer as sys::CUstream) };
        let recorded = call(status, "cuEventRecord");
        if let Err(error) = recorded {
            // SAFETY: our event, recorded nowhere, destroyed once.
            let _ = unsafe { sys::cuEventDestroy_v2(event) };
            return Err(error);
        }
        drop(_current);
        Ok(Self {
            context,
            event,
            ordinal,
        })
    }

    /// Makes `consumer` (1, 2 or a handle; an alias in the memory device's primary context)
    /// wait for the event: no host wait. Events may be waited for from streams of other
    /// contexts and devices.
    ///
    /// # Safety
    /// `consumer` must be 1, 2 or a live `CUstream`.
    pub unsafe fn order_before(&self, consumer: usize) -> Result<()> {
        let _context = DeviceContext::enter(self.ordinal)?;
        // SAFETY: a live event of ours; `consumer` is live (contract).
        let status = unsafe { sys::cuStreamWaitEvent(consumer as sys::CUstream, self.event, 0) };
        call(status, "cuStreamWaitEvent")
    }

    /// Blocks the calling thread until the event has completed (for host copies).
    pub fn wait_on_host(&self) -> Result<()> {
        let _current = self.context.enter()?;
        // SAFETY: a live event of ours; its context is current.
        let status = unsafe { sys::cuEventSynchronize(self.event) };
        call(status, "cuEventSynchronize")
    }
}

impl Drop for ReadyEvent {
    fn drop(&mut self) {
        if let Ok(_current) = self.context.enter() {
            // SAFETY: our event, destroyed once; waits already enqueued on it still complete
            // (the driver frees it once they are done). Errors are ignored in Drop.
            let _ = unsafe { sys::cuEventDestroy_v2(self.event) };
        }
    }
}
