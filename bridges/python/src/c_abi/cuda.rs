//! The CUDA driver's services to Julia: whether a driver is there, what a stream is, and
//! ordering one stream after another.

use super::border::{entry_point, quietly};
use crate::error::BridgeResult;
use crate::error::refuse_null;
use rsdlpack::cuda::stream_info::StreamDescription;
use std::ffi::c_char;

/// 1 when a CUDA driver can be used in this process, else 0.
#[unsafe(no_mangle)]
pub extern "C" fn rsdlpack_cuda_driver_available() -> i32 {
    quietly(0, || i32::from(rsdlpack::cuda::driver_available()))
}

/// Describes the CUDA stream `handle` (context, device, flags, priority) into `*out`.
///
/// # Safety
/// `handle` must be 0, 1, 2 (refused) or a live `CUstream`; `out` writable; `error_out` null
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_cuda_describe_stream(
    handle: usize,
    out: *mut StreamDescription,
    error_out: *mut *mut c_char,
) -> i32 {
    let body = || -> BridgeResult<()> {
        refuse_null!("rsdlpack_cuda_describe_stream", "out", out);
        // SAFETY: `handle` is 0, 1, 2 or a live stream (this entry point's contract).
        let description = unsafe { rsdlpack::cuda::stream_info::describe_stream(handle) }?;
        // SAFETY: `out` is writable (checked non-null; caller's contract).
        unsafe { *out = description };
        Ok(())
    };
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    unsafe { entry_point(error_out, body) }
}

/// Makes the CUDA stream `consumer` wait (with an event) for the work enqueued so far on
/// `producer`, on device `device`. The host does not wait.
///
/// # Safety
/// `producer` and `consumer` must be 1, 2 or live `CUstream`s of `device`; `error_out` null
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_cuda_order_streams(
    device: i32,
    producer: usize,
    consumer: usize,
    error_out: *mut *mut c_char,
) -> i32 {
    let body = || -> BridgeResult<()> {
        // SAFETY: forwarded from this entry point's contract.
        Ok(unsafe { rsdlpack::cuda::order::order_streams(device, producer, consumer) }?)
    };
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    unsafe { entry_point(error_out, body) }
}
