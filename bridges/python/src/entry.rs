//! The C entry points: what Julia's `ccall` (and Python's ctypes) call.
//!
//! Each one runs through [`trampoline`], which catches panics and turns every error into a
//! return code ([`ErrorCode`], 0 on success) plus a message the caller frees with
//! `rsdlpack_error_free`. Each attaches to the interpreter (taking the GIL if the caller
//! released it) and first drains the queue of deferred releases (see [`crate::release`]).

use crate::abi::RsdlCopy;
use crate::error::{BridgeError, BridgeResult, ErrorCode};
use crate::exporter::Exporter;
use crate::import::{ImportRequest, import};
use crate::release;
use crate::request::StreamRequest;
use pyo3::prelude::*;
use pyo3::{Bound, PyAny, Python, ffi};
use rsdlpack::cuda::stream_info::StreamDescription;
use rsdlpack::dlpark::Managed;
use rsdlpack::dlpark::ffi::{DLDevice, DLDeviceType, DLManagedTensorVersioned};
use rsdlpack::{Device, ImportedTensor, ManagedTensor};
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Import options as C passes them. `has_*` fields say whether the next field carries a request.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RsdlImportOptions {
    pub has_stream: i32,
    /// A DLPack stream value: -1, 1, 2 or a handle (0 is refused).
    pub stream: i64,
    pub has_device: i32,
    pub device_type: u32,
    pub device_id: i32,
    /// An `RsdlCopy`: -1 no preference (`copy=None`), 0 never copy, 1 always copy.
    pub copy: i32,
}

impl RsdlImportOptions {
    // Inlined: returned through memory, the request is reloaded wider than it was stored, and
    // the store-to-load forwarding stall showed in the import loop's profile.
    #[inline]
    pub(crate) fn parse(&self) -> BridgeResult<ImportRequest> {
        let stream = if self.has_stream != 0 {
            StreamRequest::from_value(self.stream)?
        } else {
            StreamRequest::Omitted
        };
        let device = (self.has_device != 0).then(|| {
            Device::from_dlpack(DLDevice {
                device_type: DLDeviceType(self.device_type),
                device_id: self.device_id,
            })
        });
        let copy = match self.copy {
            c if c == RsdlCopy::IfNeeded as i32 => None,
            c if c == RsdlCopy::Never as i32 => Some(false),
            c if c == RsdlCopy::Always as i32 => Some(true),
            other => {
                return Err(BridgeError::Argument(format!(
                    "copy must be -1, 0 or 1, got {other}"
                )));
            }
        };
        Ok(ImportRequest {
            stream,
            device,
            copy,
            ..ImportRequest::default()
        })
    }
}

/// Where an entry point writes its error message: a `char**` the caller lent, or nowhere.
#[derive(Clone, Copy)]
pub(crate) struct ErrorOut(*mut *mut c_char);

impl ErrorOut {
    /// # Safety
    /// `pointer` must be null or writable for the rest of the entry point's call.
    pub(crate) unsafe fn new(pointer: *mut *mut c_char) -> Self {
        Self(pointer)
    }

    fn write(self, message: String) {
        if self.0.is_null() {
            return;
        }
        let message = CString::new(message.replace('\0', " ")).expect("NULs were replaced");
        // SAFETY: non-null, and writable by the contract of `ErrorOut::new`.
        unsafe { *self.0 = message.into_raw() };
    }
}

/// Runs `body`, catching panics; returns 0 or an [`ErrorCode`] with its message written.
pub(crate) fn trampoline(error_out: ErrorOut, body: impl FnOnce() -> BridgeResult<()>) -> i32 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err(error)) => {
            error_out.write(error.to_string());
            error.code() as i32
        }
        Err(panic) => {
            let what = crate::error::panic_message(&*panic);
            error_out.write(format!(
                "internal error in RsDLPack (please report): {what}"
            ));
            ErrorCode::Internal as i32
        }
    }
}

pub(crate) fn with_python<T>(
    body: impl for<'py> FnOnce(Python<'py>) -> BridgeResult<T>,
) -> BridgeResult<T> {
    if release::this_thread_holds_the_gil() {
        // The common case (Julia's PyCall and PythonCall call with the GIL held): no
        // `PyGILState_Ensure`/`Release` pair and no pyo3 bookkeeping, ~20 ns of each call
        // from C. pyo3 does not count this thread as attached, so a `Py` dropped here would
        // be decref'd only at pyo3's next attach: see `crate::attach` for how none is left.
        // SAFETY: this thread holds the GIL of the running interpreter (just checked; the
        // check is exact with one interpreter, the only setup pyo3 and the GILState API
        // support, see `this_thread_holds_the_gil`).
        let py = unsafe { Python::assume_attached() };
        release::drain(py, release::Wait::No);
        let result = body(py);
        if result.is_err() {
            // Error paths drop exceptions (and their tracebacks) wherever they arise.
            crate::attach::drain_deferred();
        }
        return result;
    }
    Python::try_attach(|py| {
        release::drain(py, release::Wait::No);
        body(py)
    })
    .unwrap_or_else(|| {
        Err(BridgeError::Argument(
            "the Python interpreter is not running".into(),
        ))
    })
}

/// Imports a Python object (anything with `__dlpack__`, or a DLPack capsule) and stores in
/// `*out` an owned versioned managed tensor over the same memory. Release it with
/// `rsdlpack_tensor_release` (or hand it to another owner); its deleter may be called from any
/// thread. `options` may be null (no stream, device or copy request). If the producer is too
/// old to be asked for a copy, none is made here: the caller's layout plan copies instead.
/// A CUDA tensor remembers the stream `options` names (the legacy default stream when none; no
/// stream for -1): its release waits for the work enqueued there.
///
/// # Safety
/// `object` must be a live `PyObject*`; `out` a writable pointer; `error_out` null or writable;
/// a stream handle in `options` must be a live `CUstream` of the tensor's device until the
/// tensor is released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_py_import(
    object: *mut ffi::PyObject,
    options: *const RsdlImportOptions,
    out: *mut *mut DLManagedTensorVersioned,
    error_out: *mut *mut c_char,
) -> i32 {
    // SAFETY: forwarded contract; no flags.
    unsafe { rsdlpack_py_import_with_flags(object, options, 0, out, error_out) }
}

/// `flags` bit for [`rsdlpack_py_import_with_flags`]: take tensors whose device type DLPack
/// does not define (0 included) instead of refusing them with `RSDL_ERROR_CODE_BUFFER`.
pub const RSDLPACK_IMPORT_ACCEPT_UNKNOWN_DEVICE_TYPES: u32 = 1;

/// As `rsdlpack_py_import`, with `flags` (a bitwise or of `RSDLPACK_IMPORT_*`; unknown bits
/// are refused with `RSDL_ERROR_CODE_INVALID`). A separate entry point, so that
/// `RsdlImportOptions` keeps its layout for existing callers.
///
/// # Safety
/// As `rsdlpack_py_import`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_py_import_with_flags(
    object: *mut ffi::PyObject,
    options: *const RsdlImportOptions,
    flags: u32,
    out: *mut *mut DLManagedTensorVersioned,
    error_out: *mut *mut c_char,
) -> i32 {
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    let error_out = unsafe { ErrorOut::new(error_out) };
    trampoline(error_out, || {
        if object.is_null() || out.is_null() {
            return Err(BridgeError::Argument(
                "rsdlpack_py_import: object and out must not be null".into(),
            ));
        }
        let unknown = flags & !RSDLPACK_IMPORT_ACCEPT_UNKNOWN_DEVICE_TYPES;
        if unknown != 0 {
            return Err(BridgeError::Argument(format!(
                "rsdlpack_py_import_with_flags: unknown flag bits {unknown:#x}"
            )));
        }
        // SAFETY: `options` is null or points to an options struct (caller's contract).
        let mut request = unsafe { options.as_ref() }
            .copied()
            .unwrap_or(RsdlImportOptions {
                copy: RsdlCopy::IfNeeded as i32,
                ..Default::default()
            })
            .parse()?;
        request.accept_unknown_device_types =
            flags & RSDLPACK_IMPORT_ACCEPT_UNKNOWN_DEVICE_TYPES != 0;
        let managed = with_python(|py| {
            // SAFETY: `object` is a live object the caller lends us for the call.
            let object: Bound<'_, PyAny> = unsafe { Bound::from_borrowed_ptr(py, object) };
            Ok(release::rewrap(import(&object, &request)?)?)
        })?;
        // SAFETY: `out` is writable (checked non-null; caller's contract).
        unsafe { *out = managed.into_raw() };
        Ok(())
    })
}

/// Takes ownership of a versioned managed tensor (even on error, when it is released) and
/// stores in `*out` a new reference to a Python object that offers it through `__dlpack__`.
///
/// # Safety
/// `tensor` must be an owned `DLManagedTensorVersioned*` (its deleter callable from any
/// thread); `out` writable; `error_out` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_py_export(
    tensor: *mut DLManagedTensorVersioned,
    out: *mut *mut ffi::PyObject,
    error_out: *mut *mut c_char,
) -> i32 {
    // SAFETY: forwarded contract; no producer stream (host memory, or device memory whose
    // writes are complete).
    unsafe { rsdlpack_py_export_with_stream(tensor, 0, out, error_out) }
}

/// As `rsdlpack_py_export`, for device memory written on the CUDA stream `stream` (0: none
/// known, treated as the legacy default stream): each consumer's stream is made to wait for
/// it with an event.
///
/// # Safety
/// As `rsdlpack_py_export`; `stream` must be 0 or a live `CUstream` of the tensor's device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_py_export_with_stream(
    tensor: *mut DLManagedTensorVersioned,
    stream: usize,
    out: *mut *mut ffi::PyObject,
    error_out: *mut *mut c_char,
) -> i32 {
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    let error_out = unsafe { ErrorOut::new(error_out) };
    trampoline(error_out, || {
        // SAFETY: ownership of `tensor` passes to us (caller's contract).
        let owned = ImportedTensor::new(unsafe { ManagedTensor::from_versioned_raw(tensor) }?)?;
        if out.is_null() {
            return Err(BridgeError::Argument(
                "rsdlpack_py_export: out must not be null".into(),
            ));
        }
        let stream = (stream != 0).then_some(stream);
        let object = with_python(|py| {
            Py::new(py, Exporter::new(owned, stream))
                .map_err(|e| BridgeError::producer("creating the exporter", e))
        })?;
        // SAFETY: `out` is writable; the new reference passes to the caller.
        unsafe { *out = object.into_ptr() };
        Ok(())
    })
}

/// 1 when a CUDA driver can be used in this process, else 0.
#[unsafe(no_mangle)]
pub extern "C" fn rsdlpack_cuda_driver_available() -> i32 {
    catch_unwind(rsdlpack::cuda::driver_available).map_or(0, i32::from)
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
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    let error_out = unsafe { ErrorOut::new(error_out) };
    trampoline(error_out, || {
        if out.is_null() {
            return Err(BridgeError::Argument(
                "rsdlpack_cuda_describe_stream: out must not be null".into(),
            ));
        }
        // SAFETY: `handle` is 0, 1, 2 or a live stream (this entry point's contract).
        let description = unsafe { rsdlpack::cuda::stream_info::describe_stream(handle) }?;
        // SAFETY: `out` is writable (checked non-null; caller's contract).
        unsafe { *out = description };
        Ok(())
    })
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
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    let error_out = unsafe { ErrorOut::new(error_out) };
    trampoline(error_out, || {
        // SAFETY: forwarded from this entry point's contract.
        Ok(unsafe { rsdlpack::cuda::order::order_streams(device, producer, consumer) }?)
    })
}

/// Releases a managed tensor now (its deleter runs; a Python producer's is deferred to a
/// thread holding the GIL). A tensor from `rsdlpack_py_import` of CUDA memory is released after
/// the work enqueued so far on the stream its import named: at once, the calling thread waits
/// for it when it holds the GIL; otherwise the queued release waits (see
/// `rsdlpack_py_flush_releases`). Null is ignored.
///
/// # Safety
/// `tensor` must be null or an owned `DLManagedTensorVersioned*` that is not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_tensor_release(tensor: *mut DLManagedTensorVersioned) {
    if tensor.is_null() {
        return;
    }
    let _ = catch_unwind(|| {
        // SAFETY: ownership passes to us (caller's contract); dropping runs the deleter once.
        drop(unsafe { Managed::from_raw(tensor) });
    });
}

/// Releases every Python-produced tensor whose release was deferred; returns how many. Takes
/// the GIL (blocks until it is available) and waits for the GPU work that queued CUDA tensors'
/// consumers enqueued on them (ordinary calls release only those whose work has completed):
/// call it from a thread that may wait for Python and the GPU.
#[unsafe(no_mangle)]
pub extern "C" fn rsdlpack_py_flush_releases() -> usize {
    catch_unwind(|| Python::try_attach(|py| release::drain(py, release::Wait::Yes)).unwrap_or(0))
        .unwrap_or(0)
}

/// How many released tensors wait for a thread that holds the GIL.
#[unsafe(no_mangle)]
pub extern "C" fn rsdlpack_py_pending_releases() -> usize {
    catch_unwind(release::pending).unwrap_or(0)
}

/// Frees a message written by an entry point. Null is ignored.
///
/// # Safety
/// `message` must be null or a message from this library, not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_error_free(message: *mut c_char) {
    if !message.is_null() {
        // SAFETY: it came from `CString::into_raw` in `write_error`.
        drop(unsafe { CString::from_raw(message) });
    }
}
