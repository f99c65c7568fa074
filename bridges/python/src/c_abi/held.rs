//! Imported tensors that Julia holds through a handle (a view or a copy from
//! `rsdlpack_py_import_plan`), and the functions that release them.
//!
//! A handle is released exactly once, by one of:
//! - [`rsdlpack_imported_copy_into`] (copies, then releases);
//! - [`rsdlpack_imported_release`] (an explicit release: the deleter runs now when this thread
//!   holds the GIL);
//! - [`rsdlpack_imported_release_after`] (the same, ordered after the caller's CUDA stream too,
//!   and reporting what failed: Julia's `unsafe_free!`);
//! - [`rsdlpack_imported_release_later`] (for garbage-collector finalizers: it only queues, so
//!   no Python code ever runs inside a finalizer; the next call into this library holding the
//!   GIL, or `rsdlpack_py_flush_releases`, runs the deleter).
//!
//! The caller guarantees "exactly once" (Julia swaps the handle out of its owner atomically);
//! each function consumes the handle. [`rsdlpack_imported_keep_stream_alive`] does not: it
//! gives the held tensor what keeps its import's stream alive until that release.
//!
//! A CUDA tensor's release is ordered after its consumer's GPU work (see
//! [`rsdlpack::release`]): after the stream the import named (`import_options`), and for
//! [`rsdlpack_imported_release_after`] the caller's stream too. The explicit releases wait for
//! that work on the calling thread before the deleter runs; the queued one records events on
//! those streams when it is called (it does not wait), and the queue runs the deleter once
//! they have completed.

use super::border::{entry_point, quietly};
use crate::error::{BridgeError, BridgeResult};
use crate::export::roots::JuliaRoot;
use crate::protocol::request::StreamRequest;
use crate::python::release;
use rsdlpack::layout::IndexOrder;
use rsdlpack::{ImportedTensor, PendingRelease, StreamKeeper};
use std::ffi::c_char;

/// An imported tensor the caller holds through a handle: its producer's memory and the index
/// order it was planned in (which a copy needs). The handle is the tensor's own allocation
/// ([`ImportedTensor::into_raw`], 8-aligned) with the order in the address's lowest bit, so
/// that holding a tensor allocates nothing more.
pub(crate) struct Held {
    pub(crate) tensor: ImportedTensor,
    pub(crate) order: IndexOrder,
}

impl Held {
    const REVERSED: usize = 1;

    pub(crate) fn into_handle(self) -> *mut std::ffi::c_void {
        let tag = match self.order {
            IndexOrder::Producer => 0,
            IndexOrder::Reversed => Self::REVERSED,
        };
        self.tensor
            .into_raw()
            .as_ptr()
            .map_addr(|address| address | tag)
    }

    /// # Safety
    /// `handle` must come from [`Self::into_handle`] (through [`rsdlpack_py_import_plan`]) and
    /// not have been consumed.
    unsafe fn take(handle: *mut std::ffi::c_void) -> Option<Self> {
        let order = match handle.addr() & Self::REVERSED {
            0 => IndexOrder::Producer,
            _ => IndexOrder::Reversed,
        };
        let raw = std::ptr::NonNull::new(handle.map_addr(|address| address & !Self::REVERSED))?;
        // SAFETY: the caller's contract: an unconsumed handle, i.e. `into_raw`'s pointer.
        let tensor = unsafe { ImportedTensor::from_raw(raw) };
        Some(Self { tensor, order })
    }
}

/// Copies the tensor behind `handle` into `bytes` bytes at `address` (a column-major array of
/// the plan's dims and element type, which the caller allocated), then releases the tensor,
/// even on error. The handle is consumed.
///
/// # Safety
/// `handle` must be an unconsumed handle from [`rsdlpack_py_import_plan`]; `address` writable
/// for `bytes` bytes (not overlapping the tensor); `error_out` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_imported_copy_into(
    handle: *mut std::ffi::c_void,
    address: *mut u8,
    bytes: usize,
    error_out: *mut *mut c_char,
) -> i32 {
    let body = || -> BridgeResult<()> {
        // The error made only on failure (see `share::describe`).
        // SAFETY: an unconsumed handle (this entry point's contract); consumed here.
        let Some(held) = (unsafe { Held::take(handle) }) else {
            return Err(BridgeError::NullHandle {
                function: "rsdlpack_imported_copy_into",
                what: "handle",
            });
        };
        let Held { tensor, order } = held;
        let copied = if address.is_null() && bytes != 0 {
            Err(BridgeError::NullHandle {
                function: "rsdlpack_imported_copy_into",
                what: "destination",
            })
        } else {
            let destination: &mut [u8] = if bytes == 0 {
                &mut []
            } else {
                // SAFETY: writable for `bytes` bytes and disjoint from the tensor (contract).
                unsafe { std::slice::from_raw_parts_mut(address, bytes) }
            };
            // SAFETY: `tensor` owns its memory until released below; copy_into refuses memory
            // the host cannot read, and nothing writes through a DLPack import during a copy.
            unsafe { rsdlpack::copy::copy_into(tensor.descriptor(), order, destination) }
                .map_err(BridgeError::from)
        };
        // Host memory (copy_into refuses any other): nothing to wait for.
        let released = release::release_imported_here_or_defer(tensor);
        copied.and(released.map_err(BridgeError::from))
    };
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    unsafe { entry_point(error_out, body) }
}

/// Releases the tensor behind `handle` now: its producer's deleter runs at once when this
/// thread holds the GIL, else at the next call that does. A CUDA tensor's deleter runs after
/// the work enqueued so far on the stream its import named: this thread waits for it when it
/// holds the GIL. Null is ignored. For explicit releases (`unsafe_free!`, error paths), not for
/// finalizers; `rsdlpack_imported_release_after` also orders after the caller's stream and
/// reports failures.
///
/// # Safety
/// `handle` must be null or an unconsumed handle from [`rsdlpack_py_import_plan`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_imported_release(handle: *mut std::ffi::c_void) {
    quietly((), || {
        // SAFETY: null or an unconsumed handle (this entry point's contract); consumed here.
        if let Some(held) = unsafe { Held::take(handle) } {
            // Nobody to tell of a failure: the deleter has run regardless.
            let _ = release::release_imported_here_or_defer(held.tensor);
        }
    })
}

/// As [`rsdlpack_imported_release`], for a caller that used the tensor on the CUDA stream
/// `stream` too (a DLPack stream value: 1 legacy default, 2 per-thread default, a handle, or
/// -1 for none): a CUDA tensor's deleter runs after the work enqueued so far on both the
/// stream its import named and `stream`; `stream` is ignored for host memory. Null is ignored.
///
/// The handle is consumed and the tensor released whatever happens; the return code (0, or an
/// error code with a message) says whether the release could be ordered as asked: `stream=0`
/// is refused (code 1; the release is still ordered after the import's stream), and a driver
/// call that failed (no driver: code 2; a destroyed stream: code 1) leaves the deleter run
/// after whatever could be waited for.
///
/// # Safety
/// `handle` must be null or an unconsumed handle from [`rsdlpack_py_import_plan`]; `stream`
/// -1, 1, 2 or a live `CUstream` of the tensor's device; `error_out` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_imported_release_after(
    handle: *mut std::ffi::c_void,
    stream: i64,
    error_out: *mut *mut c_char,
) -> i32 {
    let body = || -> BridgeResult<()> {
        // SAFETY: null or an unconsumed handle (this entry point's contract); consumed here.
        let Some(held) = (unsafe { Held::take(handle) }) else {
            return Ok(());
        };
        // SAFETY: forwarded from this entry point's contract.
        let (release, refused) = unsafe { release_after(held.tensor, stream) };
        let released = release::release_here_or_defer(release);
        match refused {
            Some(error) => Err(error.into()),
            None => Ok(released?),
        }
    };
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    unsafe { entry_point(error_out, body) }
}

/// As [`rsdlpack_imported_release_after`], for a caller whose `stream` may be destroyed before
/// the release has recorded its event there (a graph capture of `stream` defers that record
/// past this call): root `root_id` (for Julia: a root of the calling task's `CuStream`) comes
/// back through `rsdlpack_py_take_released_roots` once the event is recorded on `stream`, and
/// never before; at once when nothing is recorded there (host memory, `stream` -1 or refused,
/// a null handle).
///
/// # Safety
/// As [`rsdlpack_imported_release_after`]; `stream` stays live while `root_id` is rooted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_imported_release_after_kept(
    handle: *mut std::ffi::c_void,
    stream: i64,
    root_id: u64,
    error_out: *mut *mut c_char,
) -> i32 {
    let keeper = StreamKeeper::new(root_id, give_back_root);
    let body = || -> BridgeResult<()> {
        // SAFETY: null or an unconsumed handle (this entry point's contract); consumed here.
        let Some(held) = (unsafe { Held::take(handle) }) else {
            return Ok(());
        };
        // SAFETY: forwarded from this entry point's contract.
        let (release, refused) = unsafe { release_after_kept(held.tensor, stream, Some(keeper)) };
        let released = release::release_here_or_defer(release);
        match refused {
            Some(error) => Err(error.into()),
            None => Ok(released?),
        }
    };
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    unsafe { entry_point(error_out, body) }
}

/// `tensor`'s release, ordered after the caller's `stream` where it names a CUDA stream, and
/// the refusal of a `stream` value that names none (the release is made all the same).
///
/// # Safety
/// `stream` must be -1, 1, 2 or a live `CUstream` of the tensor's device.
unsafe fn release_after(
    tensor: ImportedTensor,
    stream: i64,
) -> (PendingRelease, Option<rsdlpack::Error>) {
    // SAFETY: forwarded from this function's contract.
    unsafe { release_after_kept(tensor, stream, None) }
}

/// [`release_after`], with what keeps the caller's stream alive until its event is recorded
/// (dropped at once where no event is recorded there).
///
/// # Safety
/// As [`release_after`].
unsafe fn release_after_kept(
    tensor: ImportedTensor,
    stream: i64,
    keeper: Option<StreamKeeper>,
) -> (PendingRelease, Option<rsdlpack::Error>) {
    match StreamRequest::from_value(stream) {
        Ok(request) => match (request.cuda_handle(), keeper) {
            // SAFETY: 1, 2 or a live stream of the tensor's device (this function's contract),
            // kept alive by `keeper` until recorded.
            (Some(caller), Some(keeper)) => (
                unsafe { tensor.into_release_after_kept(caller, keeper) },
                None,
            ),
            // SAFETY: as above.
            (Some(caller), None) => (unsafe { tensor.into_release_after(caller) }, None),
            (None, _) => (tensor.into_release(), None),
        },
        Err(error) => (tensor.into_release(), Some(error)),
    }
}

/// Keeps the stream the tensor behind `handle` was imported on alive for its release: root
/// `root_id` (for Julia: a root of the `CuStream` object, whose finalizer would destroy the
/// stream) is returned through `rsdlpack_py_take_released_roots` right after
/// the tensor's release, whichever function makes it, has recorded its event on that stream,
/// and never before (see [`rsdlpack::release`]). Returned at once when there is nothing to
/// record: a null handle, host memory, an import with `stream=-1`. The handle is not consumed.
/// Call it before anything may release the handle (before the finalizer is attached).
///
/// # Safety
/// `handle` must be null or an unconsumed handle from [`rsdlpack_py_import_plan`] that no
/// other thread uses during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_imported_keep_stream_alive(
    handle: *mut std::ffi::c_void,
    root_id: u64,
) {
    quietly((), || {
        let keeper = StreamKeeper::new(root_id, give_back_root);
        // SAFETY: null or an unconsumed handle used by no one else meanwhile (this entry
        // point's contract); handed back unchanged below.
        if let Some(mut held) = unsafe { Held::take(handle) } {
            held.tensor.keep_consumer_stream(keeper);
            let again = held.into_handle();
            debug_assert_eq!(again, handle, "the same allocation and order tag");
        }
    })
}

/// A [`StreamKeeper`]'s token is a Julia root id: giving it back queues it for Julia to unroot.
fn give_back_root(id: u64) {
    drop(JuliaRoot(id));
}

/// Queues the tensor behind `handle` for release: runs no Python code and waits for neither the
/// GIL nor the GPU, so a finalizer may call it on any thread. A CUDA tensor gets an event
/// recorded on the stream its import named (a driver call that does not wait). The next call
/// into this library that holds the GIL runs the producer's deleter once that event has
/// completed (`rsdlpack_py_flush_releases` waits for it). Null is ignored.
///
/// # Safety
/// `handle` must be null or an unconsumed handle from [`rsdlpack_py_import_plan`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_imported_release_later(handle: *mut std::ffi::c_void) {
    quietly((), || {
        // SAFETY: null or an unconsumed handle (this entry point's contract); consumed here.
        if let Some(held) = unsafe { Held::take(handle) } {
            release::defer(held.tensor.into_release());
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::require_no_driver;
    use pyo3::Python;
    use rsdlpack::{Device, DeviceKind, ElementType, ManagedTensor, TensorDescriptor};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts its drops: the producer's deleter ran.
    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A handle to 4 Float32 at a fake address on `device` (nothing reads them), remembering
    /// `stream` as its consumer's, and its release count.
    fn handle_on(
        device: Device,
        stream: StreamRequest,
    ) -> (*mut std::ffi::c_void, Arc<AtomicUsize>) {
        let spec =
            TensorDescriptor::compact(0x1000, device, ElementType::Float32, &[4], true).unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let managed =
            rsdlpack::export::export_versioned(&spec, Counted(Arc::clone(&count)), 3).unwrap();
        let mut tensor = ImportedTensor::new(ManagedTensor::Versioned(managed)).unwrap();
        // SAFETY: the tests that name a stream handle run without a driver, which never
        // dereferences it.
        unsafe { tensor.set_consumer_stream(stream) };
        let held = Held {
            tensor,
            order: IndexOrder::Producer,
        };
        (held.into_handle(), count)
    }

    const CUDA0: Device = Device {
        kind: DeviceKind::Cuda,
        id: 0,
    };

    /// `rsdlpack_imported_release_after`'s code and message.
    fn release_after(handle: *mut std::ffi::c_void, stream: i64) -> (i32, String) {
        let mut message: *mut c_char = std::ptr::null_mut();
        // SAFETY: an unconsumed handle (or null); `message` is writable.
        let code = unsafe { rsdlpack_imported_release_after(handle, stream, &mut message) };
        if message.is_null() {
            return (code, String::new());
        }
        // SAFETY: a message the entry point wrote, freed once.
        let text = unsafe { std::ffi::CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: as above.
        unsafe { super::super::border::rsdlpack_error_free(message) };
        (code, text)
    }

    /// Holds with and without a driver: a host tensor's release never calls the driver.
    #[test]
    fn release_after_releases_a_host_tensor_whatever_the_stream_and_refuses_zero() {
        Python::attach(|_py| {
            let host = Device::CPU;
            let (handle, count) = handle_on(host, StreamRequest::Handle(0x1230));
            assert_eq!(release_after(handle, 0x4560), (0, String::new()));
            assert_eq!(
                count.load(Ordering::SeqCst),
                1,
                "released now (the GIL is held)"
            );
            let (handle, count) = handle_on(host, StreamRequest::Omitted);
            assert_eq!(release_after(handle, -1), (0, String::new()));
            assert_eq!(count.load(Ordering::SeqCst), 1);
            let (handle, count) = handle_on(host, StreamRequest::Omitted);
            let (code, message) = release_after(handle, 0);
            assert_eq!(code, 1, "{message}");
            assert!(message.contains("stream=0 is disallowed"), "{message}");
            assert_eq!(
                count.load(Ordering::SeqCst),
                1,
                "released despite the refusal"
            );
            assert_eq!(
                release_after(std::ptr::null_mut(), 0x4560),
                (0, String::new())
            );
        });
    }

    /// Asserts what happens without a driver (CI); skipped by scripts/test.sh where one exists
    /// (test/gpu/check_gpu.py covers these entry points there).
    #[test]
    fn without_a_driver_device_releases_run_the_deleter_and_the_explicit_one_says_why() {
        require_no_driver();
        Python::attach(|py| {
            let (handle, count) = handle_on(CUDA0, StreamRequest::Handle(0x1230));
            let (code, message) = release_after(handle, 0x4560);
            assert_eq!(code, 2, "{message}");
            assert!(message.starts_with("no CUDA driver"), "{message}");
            assert_eq!(count.load(Ordering::SeqCst), 1);

            let (handle, count) = handle_on(CUDA0, StreamRequest::Handle(0x1230));
            // SAFETY: an unconsumed handle.
            unsafe { rsdlpack_imported_release(handle) };
            assert_eq!(count.load(Ordering::SeqCst), 1);

            // Queued: nothing could be recorded, so nothing holds it in the queue.
            let (handle, count) = handle_on(CUDA0, StreamRequest::LegacyDefault);
            // SAFETY: an unconsumed handle.
            unsafe { rsdlpack_imported_release_later(handle) };
            assert_eq!(count.load(Ordering::SeqCst), 0, "only queued");
            assert!(release::pending() >= 1);
            release::drain(py, release::Wait::No);
            assert_eq!(count.load(Ordering::SeqCst), 1);
        });
    }

    /// The released roots among `ids` (the queue is process-wide: see `QUEUE_TESTS`).
    fn taken_of(ids: &[u64]) -> Vec<u64> {
        let mut batch = [0u64; 64];
        let n = crate::export::roots::take_released(&mut batch);
        let mut taken: Vec<u64> = batch[..n]
            .iter()
            .copied()
            .filter(|id| ids.contains(id))
            .collect();
        taken.sort_unstable();
        taken
    }

    /// Asserts what happens without a driver (CI): the stream's root comes back once the
    /// release is made (its event recorded, or tried), by each of the releasing functions, and
    /// not before; the handle itself is unchanged.
    #[test]
    fn without_a_driver_the_streams_root_comes_back_with_the_release() {
        require_no_driver();
        let ids = [9001, 9002, 9003, 9004, 9005];
        let _queue = crate::export::roots::QUEUE_TESTS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        Python::attach(|py| {
            let kept = |id| {
                let (handle, count) = handle_on(CUDA0, StreamRequest::Handle(0x1230));
                // SAFETY: an unconsumed handle, used by nothing else meanwhile.
                unsafe { rsdlpack_imported_keep_stream_alive(handle, id) };
                (handle, count)
            };
            let (later, later_count) = kept(ids[0]);
            let (now, _) = kept(ids[1]);
            let (after, _) = kept(ids[2]);
            assert_eq!(
                taken_of(&ids),
                Vec::<u64>::new(),
                "held while the tensors are"
            );
            // SAFETY: unconsumed handles, each consumed once.
            unsafe { rsdlpack_imported_release_later(later) };
            assert_eq!(
                taken_of(&ids),
                [ids[0]],
                "at the queued release, before the deleter"
            );
            assert_eq!(later_count.load(Ordering::SeqCst), 0);
            // SAFETY: as above.
            unsafe { rsdlpack_imported_release(now) };
            assert_eq!(release_after(after, 0x4560).0, 2, "no driver");
            assert_eq!(taken_of(&ids), [ids[1], ids[2]]);
            release::drain(py, release::Wait::No);
            assert_eq!(later_count.load(Ordering::SeqCst), 1);

            // Nothing to record, so back at once: host memory, and a null handle.
            let (host, _) = handle_on(Device::CPU, StreamRequest::Handle(0x1230));
            // SAFETY: an unconsumed handle; then null.
            unsafe {
                rsdlpack_imported_keep_stream_alive(host, ids[3]);
                rsdlpack_imported_keep_stream_alive(std::ptr::null_mut(), ids[4]);
            }
            assert_eq!(taken_of(&ids), [ids[3], ids[4]]);
            // The handle still works after the call.
            assert_eq!(release_after(host, -1), (0, String::new()));
        });
    }

    /// `rsdlpack_imported_release_after_kept`'s code.
    fn release_after_kept(handle: *mut std::ffi::c_void, stream: i64, root_id: u64) -> i32 {
        let mut message: *mut c_char = std::ptr::null_mut();
        // SAFETY: an unconsumed handle (or null); `message` is writable.
        let code =
            unsafe { rsdlpack_imported_release_after_kept(handle, stream, root_id, &mut message) };
        if !message.is_null() {
            // SAFETY: a message the entry point wrote, freed once.
            unsafe { super::super::border::rsdlpack_error_free(message) };
        }
        code
    }

    /// Asserts what happens without a driver (CI): the caller's stream's root comes back with
    /// the release (its event recorded, or tried), as the import's does, and at once where
    /// nothing is recorded on it: host memory, `stream=-1`, a refused stream, a null handle.
    #[test]
    fn without_a_driver_the_callers_stream_root_comes_back_with_the_release() {
        require_no_driver();
        let ids = [9101, 9102, 9103, 9104, 9105, 9106];
        let _queue = crate::export::roots::QUEUE_TESTS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        Python::attach(|_py| {
            let (handle, count) = handle_on(CUDA0, StreamRequest::Handle(0x1230));
            // SAFETY: an unconsumed handle, used by nothing else meanwhile.
            unsafe { rsdlpack_imported_keep_stream_alive(handle, ids[0]) };
            assert_eq!(release_after_kept(handle, 0x4560, ids[1]), 2, "no driver");
            assert_eq!(taken_of(&ids), [ids[0], ids[1]], "both streams' roots");
            assert_eq!(count.load(Ordering::SeqCst), 1);

            let (host, _) = handle_on(Device::CPU, StreamRequest::Omitted);
            assert_eq!(release_after_kept(host, 0x4560, ids[2]), 0);
            let (device, _) = handle_on(CUDA0, StreamRequest::Handle(0x1230));
            assert_eq!(release_after_kept(device, -1, ids[3]), 2, "no driver");
            let (refused, _) = handle_on(Device::CPU, StreamRequest::Omitted);
            assert_eq!(release_after_kept(refused, 0, ids[4]), 1, "stream=0");
            assert_eq!(release_after_kept(std::ptr::null_mut(), 0x4560, ids[5]), 0);
            assert_eq!(taken_of(&ids), [ids[2], ids[3], ids[4], ids[5]]);
        });
    }

    fn held_tensor(data: &'static [f32; 6]) -> ImportedTensor {
        let spec = TensorDescriptor::compact(
            data.as_ptr() as usize,
            Device::CPU,
            ElementType::Float32,
            &[2, 3],
            true,
        )
        .unwrap();
        let managed = rsdlpack::export::export_versioned(&spec, (), 3).unwrap();
        ImportedTensor::new(ManagedTensor::Versioned(managed)).unwrap()
    }

    #[test]
    fn a_handle_gives_back_its_tensor_and_index_order() {
        static DATA: [f32; 6] = [0.0; 6];
        for order in [IndexOrder::Producer, IndexOrder::Reversed] {
            let handle = Held {
                tensor: held_tensor(&DATA),
                order,
            }
            .into_handle();
            assert!(!handle.is_null());
            // SAFETY: the handle was just made and is taken once.
            let held = unsafe { Held::take(handle) }.expect("a non-null handle");
            assert_eq!(held.order, order);
            assert_eq!(held.tensor.descriptor().shape(), [2, 3]);
            assert_eq!(
                held.tensor.descriptor().first_element(),
                DATA.as_ptr() as usize
            );
        }
        // SAFETY: null is no handle.
        assert!(unsafe { Held::take(std::ptr::null_mut()) }.is_none());
    }
}
