//! Stream ordering by events: the consumer's stream waits for what the producer's stream has
//! enqueued so far. The host never blocks and no device-wide synchronisation happens.

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
