//! CUDA through cudarc's driver API, loaded at run time.
//!
//! Nothing here may run before [`driver`] has answered `Ok`: cudarc panics when `libcuda` is
//! missing, and [`driver`] checks `is_culib_present()` before any other call, so on machines
//! without a driver every function returns [`Error::NoCudaDriver`] instead.
//!
//! cudarc's safe layer owns contexts and streams; ours are all borrowed (a tensor's memory, a
//! consumer's stream), so this module works one layer down, on cudarc's checked `result`
//! functions, and on `sys` where `result` lacks the call (pointer attributes, stream queries,
//! context push/pop). Each such call is wrapped once, in [`call`].
//!
//! - [`context`]: the context a stream's work belongs to, held while our events live in it,
//!   and graph captures left undisturbed by our queries;
//! - [`pointer`]: does a CUDA tensor's pointer really live where its DLPack device says?
//! - [`order`]: make a consumer's stream wait for a producer's, with an event (never a
//!   device-wide synchronisation);
//! - [`fence`]: events on a consumer's streams that an imported tensor's release waits for
//!   before the producer's deleter runs (see [`crate::release`]);
//! - [`stream_info`]: what a raw `CUstream` belongs to (context, device, flags, priority);
//! - [`to_host`]: a device tensor copied to host memory (for `dl_device=(CPU, 0)`).

pub mod context;
pub mod fence;
pub mod order;
pub mod pointer;
pub mod stream_info;
pub mod to_host;

use crate::device::DeviceKind;
use crate::error::{Error, Result};
use cudarc::driver::{result, sys};
use std::sync::OnceLock;

/// Checks once that a CUDA driver can be loaded and initialised.
pub fn driver() -> Result<()> {
    static STATE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    let state = STATE.get_or_init(|| {
        // Miri runs no foreign code (dlopen included): under it there is never a driver, so
        // that scripts/miri.sh runs the release tests as a machine without one does.
        if cfg!(miri) {
            return Err(String::new());
        }
        // SAFETY: only tries to dlopen libcuda; no driver call is made.
        if !unsafe { sys::is_culib_present() } {
            return Err(String::new());
        }
        result::init().map_err(|e| format!("{e:?}"))
    });
    match state {
        Ok(()) => Ok(()),
        Err(message) if message.is_empty() => Err(Error::NoCudaDriver),
        Err(message) => Err(Error::CudaInit {
            message: message.clone(),
        }),
    }
}

/// Whether a CUDA driver is usable here.
pub fn driver_available() -> bool {
    driver().is_ok()
}

/// The device whose contexts order and check memory of DLPack device (`kind`, `id`), or `None`
/// for memory no CUDA device works on. `current`: the device of the context current on the
/// calling thread, if any. Device and managed memory name their device. Pinned host memory
/// (`kDLCUDAHost`, id 0 whatever device the process uses) belongs to none: the device the
/// caller works on now is the one meant, and device 0 only where no context is current — so a
/// process that uses only GPU 1 never creates a context on GPU 0 for it.
pub fn device_of_memory(kind: DeviceKind, id: i32, current: Option<i32>) -> Option<i32> {
    match kind {
        DeviceKind::Cuda | DeviceKind::CudaManaged => Some(id),
        DeviceKind::CudaHost => Some(current.unwrap_or(0)),
        _ => None,
    }
}

/// The device of the context current on the calling thread, if any (nothing is retained).
pub fn current_device() -> Option<i32> {
    driver().ok()?;
    let mut device: sys::CUdevice = 0;
    // SAFETY: out-pointer valid; without a current context the call fails, which is the answer.
    let status = unsafe { sys::cuCtxGetDevice(&mut device) };
    (status == sys::CUresult::CUDA_SUCCESS).then_some(device)
}

/// Turns a raw driver status into our error.
pub(crate) fn call(status: sys::CUresult, what: &'static str) -> Result<()> {
    status
        .result()
        .map_err(|e| driver_error(what, e, String::new()))
}

/// A failed driver call as our error; `context` (may be empty) prefixes the driver's words.
fn driver_error(call: &'static str, e: cudarc::driver::DriverError, context: String) -> Error {
    Error::Cuda {
        call,
        status: e.0 as u32,
        message: format!("{context}{e:?}"),
    }
}

/// The primary context of a device, pushed as current for the guard's lifetime.
pub(crate) struct DeviceContext {
    device: sys::CUdevice,
    /// Pushed on this thread's context stack: must be popped on the same thread.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl DeviceContext {
    pub(crate) fn enter(ordinal: i32) -> Result<Self> {
        driver()?;
        let device = result::device::get(ordinal)
            .map_err(|e| driver_error("cuDeviceGet", e, format!("device {ordinal}: ")))?;
        // SAFETY: `device` is a valid device handle; the retain is paired with the release in
        // Drop.
        let context = unsafe { result::primary_ctx::retain(device) }
            .map_err(|e| driver_error("cuDevicePrimaryCtxRetain", e, String::new()))?;
        // SAFETY: `context` was just retained; popped in Drop.
        let status = unsafe { sys::cuCtxPushCurrent_v2(context) };
        if let Err(e) = call(status, "cuCtxPushCurrent") {
            // SAFETY: undo the retain above.
            let _ = unsafe { result::primary_ctx::release(device) };
            return Err(e);
        }
        Ok(Self {
            device,
            _not_send: std::marker::PhantomData,
        })
    }
}

impl Drop for DeviceContext {
    fn drop(&mut self) {
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: we pushed this context in `enter`; errors are ignored (Drop never panics and
        // there is no caller to tell).
        unsafe {
            let _ = sys::cuCtxPopCurrent_v2(&mut popped);
            let _ = result::primary_ctx::release(self.device);
        }
    }
}

#[cfg(test)]
mod tests_gpu;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_memory_is_ordered_on_the_device_in_use_and_device_memory_on_its_own() {
        use DeviceKind::*;
        assert_eq!(device_of_memory(Cuda, 1, Some(0)), Some(1));
        assert_eq!(device_of_memory(CudaManaged, 1, None), Some(1));
        assert_eq!(
            device_of_memory(CudaHost, 0, Some(1)),
            Some(1),
            "a process on GPU 1 only: no context on GPU 0"
        );
        assert_eq!(device_of_memory(CudaHost, 0, None), Some(0));
        assert_eq!(device_of_memory(Cpu, 0, Some(1)), None);
    }

    /// This test asserts what happens where no driver library can be loaded (CI). Rust's test
    /// harness has no run-time skip, so where a driver is present it fails here, saying why,
    /// instead of passing having asserted nothing. The GPU run (test/gpu/run.sh) runs only the
    /// `--ignored` tests, which leaves this one out; its counterparts are in `tests_gpu`.
    #[test]
    fn without_a_driver_every_entry_answers_no_cuda_driver() {
        let here = driver();
        assert!(
            matches!(here, Err(Error::NoCudaDriver)),
            "asserts the no-driver behaviour, but this machine answers {here:?}: scripts/test.sh \
             skips without_a_driver_* tests where a driver exists; run the GPU tests with \
             `cargo test -- --ignored` instead"
        );
        assert!(!driver_available());
        assert!(matches!(DeviceContext::enter(0), Err(Error::NoCudaDriver)));
        // SAFETY: without a driver both return before any handle is used.
        let (described, ordered) = unsafe {
            (
                stream_info::describe_stream(0x1234),
                order::order_streams(0, 0x1234, 0x5678),
            )
        };
        assert!(matches!(described, Err(Error::NoCudaDriver)));
        assert!(matches!(ordered, Err(Error::NoCudaDriver)));
        // SAFETY: without a driver it returns before the handle is used.
        let ready = unsafe { order::ReadyEvent::record(0, 0x1234) };
        assert!(matches!(ready, Err(Error::NoCudaDriver)));
        let streams = vec![fence::FenceStream {
            handle: 0x1234,
            alias_context: None,
        }];
        // SAFETY: without a driver it returns before any handle is used.
        let (mut fence, recorded) = unsafe { fence::ReleaseFence::record(0, streams) };
        assert!(matches!(recorded, Err(Error::NoCudaDriver)));
        assert!(
            fence.is_complete(),
            "a fence that recorded nothing waits for nothing"
        );
        fence.wait().unwrap();
        let cuda = crate::Device {
            kind: crate::DeviceKind::Cuda,
            id: 0,
        };
        let on_device =
            crate::test_support::descriptor_on(cuda, 4096, &[4], &[1], crate::ElementType::Float32);
        // The cause leads: without a driver nothing can be said about the pointer, so the
        // answer is "no driver", not "the driver does not know this address".
        let checked = pointer::check_pointer(&on_device);
        assert!(matches!(&checked, Err(Error::NoCudaDriver)), "{checked:?}");
        let message = checked.unwrap_err().to_string();
        assert!(message.starts_with("no CUDA driver"), "{message}");
        // SAFETY: without a driver it returns before the memory is used.
        let copied = unsafe { to_host::copy_to_host(&on_device, None) };
        assert!(matches!(copied, Err(Error::NoCudaDriver)));
        let message = Error::NoCudaDriver.to_string();
        assert!(message.contains("dl_device=(CPU, 0)"), "{message}");
    }
}
