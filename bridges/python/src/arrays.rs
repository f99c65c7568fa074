//! The one-crossing entry points behind Julia's `from_dlpack` and `share`: one call imports,
//! validates once and plans (or exports and wraps), and answers with everything the caller
//! needs in one struct.
//!
//! An imported tensor that the caller wraps (a view) or copies comes with an owned handle. It
//! is released exactly once, by one of:
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
//! each function consumes the handle.
//!
//! A CUDA tensor's release is ordered after its consumer's GPU work (see
//! [`rsdlpack::release`]): after the stream the import named (`import_options`), and for
//! [`rsdlpack_imported_release_after`] the caller's stream too. The explicit releases wait for
//! that work on the calling thread before the deleter runs; the queued one records events on
//! those streams when it is called (it does not wait), and the queue runs the deleter once
//! they have completed.

use crate::entry::{ErrorOut, RsdlImportOptions, trampoline, with_python};
use crate::error::{BridgeError, BridgeResult};
use crate::exporter::Exporter;
use crate::import::import;
use crate::release;
use crate::request::StreamRequest;
use crate::roots::{self, JuliaRoot};
use pyo3::prelude::*;
use pyo3::{Bound, PyAny, ffi};
use rsdlpack::dlpark::ffi::{DLDevice, DLDeviceType};
use rsdlpack::layout::{
    Access, ArrayPlan, ArrayRequest, CopyPolicy, Decision, IndexOrder, Target, decide,
};
use rsdlpack::{Device, ElementType, ImportedTensor, TensorDescriptor};
use std::ffi::c_char;

/// What the caller wants the tensor to become (see `rsdlpack::layout::ArrayRequest`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RsdlPlanOptions {
    /// -1: any element type; else the `ElementType::code` the caller names.
    pub element_code: i64,
    /// -1: any rank; else the rank the caller names.
    pub ndims: i64,
    /// 0: a host array; 1: a CUDA array.
    pub target: u32,
    /// 0: the producer's index order; 1: reversed.
    pub order: u32,
    /// -1: copy when needed (`copy=nothing`); 0: never; 1: always.
    pub copy: i32,
    /// 1: a view of read-only memory is acceptable (the caller wraps it read-only).
    pub readonly: u32,
    /// 1: only a plain dense array will do (the typed forms); other layouts are copied.
    pub dense: u32,
    pub reserved: u32,
}

impl RsdlPlanOptions {
    // Inlined, as `RsdlImportOptions::parse`: its `Result` would come back through memory.
    #[inline]
    fn parse(&self) -> BridgeResult<ArrayRequest> {
        let bad = |what: &str, value: i64| {
            BridgeError::Argument(format!("plan options: {what} cannot be {value}"))
        };
        let target = match self.target {
            0 => Target::HostArray,
            1 => Target::CudaArray,
            other => return Err(bad("target (0 host, 1 CUDA)", other.into())),
        };
        let order = index_order(self.order)?;
        let policy = match self.copy {
            -1 => CopyPolicy::IfNeeded,
            0 => CopyPolicy::Never,
            1 => CopyPolicy::Always,
            other => return Err(bad("copy (-1, 0 or 1)", other.into())),
        };
        let element = match self.element_code {
            -1 => None,
            code => Some(
                u32::try_from(code)
                    .ok()
                    .and_then(ElementType::from_code)
                    .ok_or_else(|| bad("element_code", code))?,
            ),
        };
        let ndim = match self.ndims {
            -1 => None,
            n => Some(usize::try_from(n).map_err(|_| bad("ndims", n))?),
        };
        Ok(ArrayRequest {
            target,
            order,
            policy,
            access: if self.readonly != 0 {
                Access::ReadOnly
            } else {
                Access::Writable
            },
            dense: self.dense != 0,
            element,
            ndim,
        })
    }
}

/// The index order a C caller names: 0 the producer's, 1 reversed.
fn index_order(code: u32) -> BridgeResult<IndexOrder> {
    match code {
        0 => Ok(IndexOrder::Producer),
        1 => Ok(IndexOrder::Reversed),
        other => Err(BridgeError::Argument(format!(
            "order must be 0 (producer) or 1 (reversed), got {other}"
        ))),
    }
}

/// The most dims a tensor has here (`rsdlpack::MAX_NDIM`): the length of `RsdlArrayPlan`'s
/// per-dimension arrays.
// Repeated here for include/rsdlpack.h: cbindgen emits only this crate's constants.
pub const RSDLPACK_MAX_NDIM: usize = 32;
const _: () = assert!(RSDLPACK_MAX_NDIM == rsdlpack::MAX_NDIM);

/// The answer of [`rsdlpack_py_import_plan`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RsdlImportResult {
    pub plan: ArrayPlan,
    /// How many Julia arrays that `share` exported were released since the caller last took
    /// them (`rsdlpack_py_take_released_roots`); 0 means there is nothing to take.
    pub released_roots: u64,
}

/// An imported tensor the caller holds through a handle: its producer's memory and the index
/// order it was planned in (which a copy needs). The handle is the tensor's own allocation
/// ([`ImportedTensor::into_raw`], 8-aligned) with the order in the address's lowest bit, so
/// that holding a tensor allocates nothing more.
struct Held {
    tensor: ImportedTensor,
    order: IndexOrder,
}

impl Held {
    const REVERSED: usize = 1;

    fn into_handle(self) -> *mut std::ffi::c_void {
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

/// Imports `object` (anything with `__dlpack__`, or a capsule), validates it once and plans the
/// array `plan_options` describes, all in one call, and writes the whole answer to `*out`.
///
/// When `out->plan.kind` is 0 (a view) or 2 (a copy), `out->plan.tensor` is an owned handle
/// for the release functions of this module; for 1 (empty) it is null and nothing is held. On
/// error nothing is held either (the producer's deleter has run) and `*out` means nothing.
/// `import_options` may be null (no stream, device or copy request to the producer). A CUDA
/// tensor remembers the stream `import_options` names (the legacy default stream when none; no
/// stream for -1): its release waits for the work enqueued there.
///
/// # Safety
/// `object` must be a live `PyObject*`; `plan_options` readable; `out` writable; `error_out`
/// null or writable; a stream handle in `import_options` must be a live `CUstream` of the
/// tensor's device until the tensor is released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_py_import_plan(
    object: *mut ffi::PyObject,
    import_options: *const RsdlImportOptions,
    plan_options: *const RsdlPlanOptions,
    out: *mut RsdlImportResult,
    error_out: *mut *mut c_char,
) -> i32 {
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    let error_out = unsafe { ErrorOut::new(error_out) };
    trampoline(error_out, || {
        if object.is_null() || plan_options.is_null() || out.is_null() {
            return Err(BridgeError::Argument(
                "rsdlpack_py_import_plan: object, plan_options and out must not be null".into(),
            ));
        }
        // SAFETY: `plan_options` is readable (checked non-null; caller's contract).
        let request = unsafe { *plan_options }.parse()?;
        // SAFETY: `import_options` is null or readable (caller's contract).
        let import_request = unsafe { import_options.as_ref() }
            .copied()
            .unwrap_or(RsdlImportOptions {
                copy: -1,
                ..Default::default()
            })
            .parse()?;
        with_python(|py| {
            // SAFETY: `object` is a live object the caller lends us for the call.
            let object: Bound<'_, PyAny> = unsafe { Bound::from_borrowed_ptr(py, object) };
            let tensor = import(&object, &import_request)?;
            // On error `tensor` drops here, under the GIL: its deleter runs now.
            // SAFETY: `out` is writable (checked non-null; caller's contract). The plan is
            // written in place: the struct is 1.6 KB.
            let out = unsafe { &mut *out };
            let decision = decide(tensor.descriptor(), &request, &mut out.plan)?;
            out.released_roots = roots::released_count() as u64;
            if decision != Decision::Empty {
                let held = Held {
                    tensor,
                    order: request.order,
                };
                out.plan.tensor = held.into_handle();
            }
            Ok(())
        })
    })
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
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    let error_out = unsafe { ErrorOut::new(error_out) };
    trampoline(error_out, || {
        // SAFETY: an unconsumed handle (this entry point's contract); consumed here.
        let held = unsafe { Held::take(handle) }.ok_or_else(|| {
            BridgeError::Argument("rsdlpack_imported_copy_into: the handle is null".into())
        })?;
        let Held { tensor, order } = held;
        let copied = if address.is_null() && bytes != 0 {
            Err(BridgeError::Argument(
                "rsdlpack_imported_copy_into: the destination is null".into(),
            ))
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
        let released = release::release_here_or_defer(tensor.into_release());
        copied.and(released.map_err(BridgeError::from))
    })
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
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: null or an unconsumed handle (this entry point's contract); consumed here.
        if let Some(held) = unsafe { Held::take(handle) } {
            // Nobody to tell of a failure: the deleter has run regardless.
            let _ = release::release_here_or_defer(held.tensor.into_release());
        }
    });
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
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    let error_out = unsafe { ErrorOut::new(error_out) };
    trampoline(error_out, || {
        // SAFETY: null or an unconsumed handle (this entry point's contract); consumed here.
        let Some(held) = (unsafe { Held::take(handle) }) else {
            return Ok(());
        };
        let (release, refused) = match StreamRequest::from_value(stream) {
            Ok(request) => match request.cuda_handle() {
                // SAFETY: 1, 2 or a live stream of the tensor's device (this entry point's
                // contract).
                Some(caller) => (unsafe { held.tensor.into_release_after(caller) }, None),
                None => (held.tensor.into_release(), None),
            },
            Err(error) => (held.tensor.into_release(), Some(error)),
        };
        let released = release::release_here_or_defer(release);
        match refused {
            Some(error) => Err(error.into()),
            None => Ok(released?),
        }
    })
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
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: null or an unconsumed handle (this entry point's contract); consumed here.
        if let Some(held) = unsafe { Held::take(handle) } {
            release::defer(held.tensor.into_release());
        }
    });
}

/// A Julia array to share, as `size` and `strides` describe it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RsdlArrayExport {
    /// Address of the array's first element.
    pub address: usize,
    /// `ndims` dims and strides (in elements), Julia's `size` and `strides`.
    pub dims: *const i64,
    pub strides: *const i64,
    pub ndims: i64,
    /// The id under which Julia roots the array until the consumer releases it.
    pub root_id: u64,
    /// For device memory: the CUDA stream its writes were enqueued on (0: none known).
    pub stream: usize,
    /// `ElementType::code` of the array's element type.
    pub element_code: u32,
    /// 0: keep Julia's index order; 1: hand out the reversed dims.
    pub order: u32,
    pub device_type: u32,
    pub device_id: i32,
    /// 1: exported with DLPack's READ_ONLY flag.
    pub read_only: u32,
    pub reserved: u32,
}

/// The answer of [`rsdlpack_py_share`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RsdlShareResult {
    /// A new reference to an object with `__dlpack__` over the array.
    pub exporter: *mut ffi::PyObject,
    /// As in [`RsdlImportResult`].
    pub released_roots: u64,
}

/// Describes a Julia array as a DLPack tensor owned by root `root_id` and wraps it in a new
/// exporter object, in one call. On error nothing refers to the root (Julia unroots it when it
/// next takes the released roots).
///
/// # Safety
/// `array` readable, its `dims`/`strides` readable for `ndims` entries when `ndims > 0`; the
/// array's memory must stay valid until root `root_id` is released; `out` writable;
/// `error_out` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_py_share(
    array: *const RsdlArrayExport,
    out: *mut RsdlShareResult,
    error_out: *mut *mut c_char,
) -> i32 {
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    let error_out = unsafe { ErrorOut::new(error_out) };
    trampoline(error_out, || {
        if array.is_null() || out.is_null() {
            return Err(BridgeError::Argument(
                "rsdlpack_py_share: array and out must not be null".into(),
            ));
        }
        // SAFETY: readable (checked non-null; caller's contract).
        let array = unsafe { &*array };
        let root = JuliaRoot(array.root_id);
        // SAFETY: forwarded from this entry point's contract.
        let spec = unsafe { spec_of(array) }?;
        let stream = (array.stream != 0).then_some(array.stream);
        let exporter = with_python(|py| {
            Py::new(py, Exporter::of_julia_array(spec, root, stream))
                .map_err(|e| BridgeError::producer("creating the exporter", e))
        })?;
        let result = RsdlShareResult {
            exporter: exporter.into_ptr(),
            released_roots: roots::released_count() as u64,
        };
        // SAFETY: `out` is writable (checked non-null; caller's contract).
        unsafe { out.write(result) };
        Ok(())
    })
}

/// As [`rsdlpack_py_share`], but `*out`'s object is one of `type`, made by `type`'s DLPack C
/// exchange API (`__dlpack_c_exchange_api__`'s `managed_tensor_to_py_object_no_sync`, e.g.
/// `torch.Tensor`'s) with no Python call. Refused (nothing then refers to the root): a type
/// without such an API, a read-only array, and an API that makes objects of another type.
/// CUDA memory is ordered after `array.stream` on the consumer's current work stream.
///
/// # Safety
/// As [`rsdlpack_py_share`]; `type` a live `PyObject*`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_py_share_into(
    array: *const RsdlArrayExport,
    r#type: *mut ffi::PyObject,
    out: *mut RsdlShareResult,
    error_out: *mut *mut c_char,
) -> i32 {
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    let error_out = unsafe { ErrorOut::new(error_out) };
    trampoline(error_out, || {
        if array.is_null() || r#type.is_null() || out.is_null() {
            return Err(BridgeError::Argument(
                "rsdlpack_py_share_into: array, type and out must not be null".into(),
            ));
        }
        // SAFETY: readable (checked non-null; caller's contract).
        let array = unsafe { &*array };
        let root = JuliaRoot(array.root_id);
        // SAFETY: forwarded from this entry point's contract.
        let spec = unsafe { spec_of(array) }?;
        let stream = (array.stream != 0).then_some(array.stream);
        let object = with_python(|py| {
            // SAFETY: a live object (caller's contract), borrowed for the call.
            let ty = unsafe { Bound::from_borrowed_ptr(py, r#type) };
            let ty = ty.cast_into::<pyo3::types::PyType>().map_err(|e| {
                BridgeError::Argument(format!(
                    "rsdlpack_py_share_into: type must be a Python type, got {}",
                    e.into_inner()
                ))
            })?;
            Ok(crate::share_into::share_into(&ty, &spec, root, stream)?.unbind())
        })?;
        let result = RsdlShareResult {
            exporter: object.into_ptr(),
            released_roots: roots::released_count() as u64,
        };
        // SAFETY: `out` is writable (checked non-null; caller's contract).
        unsafe { out.write(result) };
        Ok(())
    })
}

/// # Safety
/// As [`rsdlpack_py_share`]'s contract for `array`.
unsafe fn spec_of(array: &RsdlArrayExport) -> BridgeResult<Box<TensorDescriptor>> {
    let element = ElementType::from_code(array.element_code).ok_or_else(|| {
        BridgeError::Argument(format!("unknown element code {}", array.element_code))
    })?;
    let ndims = usize::try_from(array.ndims).map_err(|_| {
        BridgeError::Argument(format!("ndims must be non-negative, got {}", array.ndims))
    })?;
    if ndims > rsdlpack::descriptor::MAX_NDIM {
        return Err(BridgeError::Buffer(format!(
            "a {ndims}-dimensional array has no DLPack export here (at most {} dims)",
            rsdlpack::descriptor::MAX_NDIM
        )));
    }
    if ndims > 0 && (array.dims.is_null() || array.strides.is_null()) {
        return Err(BridgeError::Argument(
            "rsdlpack_py_share: dims and strides must not be null".into(),
        ));
    }
    // Julia's `Int`s are read in place as the `usize` dims and `isize` strides the core takes:
    // the same 64 bits, and a non-negative `i64` means the same as a `usize`.
    const _: () = assert!(size_of::<usize>() == size_of::<i64>());
    let read = |at: *const i64| -> &[i64] {
        if ndims == 0 {
            &[]
        } else {
            // SAFETY: readable for `ndims` entries during the call (this function's contract).
            unsafe { std::slice::from_raw_parts(at, ndims) }
        }
    };
    let (dims, strides) = (read(array.dims), read(array.strides));
    if dims.iter().fold(false, |negative, &d| negative | (d < 0)) {
        return Err(BridgeError::Argument(
            "rsdlpack_py_share: a dim is negative".into(),
        ));
    }
    // SAFETY: `usize` and `isize` have the size and alignment of `i64` (asserted above), every
    // bit pattern is valid for both, and the dims are non-negative (checked above).
    let (dims, strides) = unsafe {
        (
            std::slice::from_raw_parts(dims.as_ptr().cast::<usize>(), ndims),
            std::slice::from_raw_parts(strides.as_ptr().cast::<isize>(), ndims),
        )
    };
    let order = index_order(array.order)?;
    let device = Device::from_dlpack(DLDevice {
        device_type: DLDeviceType(array.device_type),
        device_id: array.device_id,
    });
    let mut described = TensorDescriptor::boxed_from_julia_layout(
        array.address,
        device,
        element,
        dims,
        strides,
        order,
    )?;
    described.set_read_only(array.read_only != 0);
    Ok(described)
}

/// Moves up to `capacity` ids of released shared arrays into `out`; returns how many. Julia
/// unroots them; call again while it returns `capacity`.
///
/// # Safety
/// `out` writable for `capacity` entries (or `capacity` 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_py_take_released_roots(out: *mut u64, capacity: usize) -> usize {
    if out.is_null() || capacity == 0 {
        return 0;
    }
    std::panic::catch_unwind(|| {
        // SAFETY: writable for `capacity` entries (this entry point's contract).
        let out = unsafe { std::slice::from_raw_parts_mut(out, capacity) };
        roots::take_released(out)
    })
    .unwrap_or(0)
}

/// The size in bytes of the C structs callers mirror, by number: 0 `RsdlImportOptions`,
/// 1 `RsdlPlanOptions`, 2 `RsdlImportResult`, 3 `RsdlArrayExport`, 4 `RsdlShareResult`; 0 for
/// any other number. Julia checks its mirrors against these when it loads the library.
#[unsafe(no_mangle)]
pub extern "C" fn rsdlpack_struct_size(which: u32) -> usize {
    match which {
        0 => size_of::<RsdlImportOptions>(),
        1 => size_of::<RsdlPlanOptions>(),
        2 => size_of::<RsdlImportResult>(),
        3 => size_of::<RsdlArrayExport>(),
        4 => size_of::<RsdlShareResult>(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsdlpack::{Device, DeviceKind, ManagedTensor};
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
        unsafe { crate::entry::rsdlpack_error_free(message) };
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
        assert!(
            !rsdlpack::cuda::driver_available(),
            "asserts the no-driver behaviour"
        );
        let cuda = Device {
            kind: DeviceKind::Cuda,
            id: 0,
        };
        Python::attach(|py| {
            let (handle, count) = handle_on(cuda, StreamRequest::Handle(0x1230));
            let (code, message) = release_after(handle, 0x4560);
            assert_eq!(code, 2, "{message}");
            assert!(message.starts_with("no CUDA driver"), "{message}");
            assert_eq!(count.load(Ordering::SeqCst), 1);

            let (handle, count) = handle_on(cuda, StreamRequest::Handle(0x1230));
            // SAFETY: an unconsumed handle.
            unsafe { rsdlpack_imported_release(handle) };
            assert_eq!(count.load(Ordering::SeqCst), 1);

            // Queued: nothing could be recorded, so nothing holds it in the queue.
            let (handle, count) = handle_on(cuda, StreamRequest::LegacyDefault);
            // SAFETY: an unconsumed handle.
            unsafe { rsdlpack_imported_release_later(handle) };
            assert_eq!(count.load(Ordering::SeqCst), 0, "only queued");
            assert!(release::pending() >= 1);
            release::drain(py, release::Wait::No);
            assert_eq!(count.load(Ordering::SeqCst), 1);
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
