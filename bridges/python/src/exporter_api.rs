//! The DLPack 1.3 C exchange API, producer side: the table behind
//! `rsdlpack.DLPackTensor.__dlpack_c_exchange_api__`, with all five functions.
//!
//! - `managed_tensor_allocator`: a fresh, zeroed, row-major host tensor aligned to 64 bytes
//!   (the copy engine's [`AlignedBuffer`]); its deleter frees the buffer. Host only: device
//!   allocation is refused through `set_error`.
//! - `managed_tensor_from_py_object_no_sync`: our exporter → the versioned managed tensor that
//!   `__dlpack__(max_version=(1, 3))` gives (same memory, flags, owner).
//! - `managed_tensor_to_py_object_no_sync`: takes ownership of any versioned managed tensor and
//!   returns an exporter over it (its deleter runs under the GIL, see [`crate::release`]).
//! - `dltensor_from_py_object_no_sync`: a non-owning `DLTensor` view whose shape and strides
//!   point into the exporter's validated descriptor, valid while the exporter lives. A
//!   `DLTensor` has no flags, so read-only and padded sub-byte tensors are refused here (use the
//!   managed function, which carries them).
//! - `current_work_stream`: NULL (the default stream) for every device. This function is asked
//!   per device, not per tensor, while each exporter of CUDA memory knows the stream its memory
//!   was written on. So both export functions make a CUDA exporter's memory ready on the legacy
//!   default stream (an event recorded on the exporter's stream, waited for by the default
//!   stream: no host wait), and that is the stream reported: a consumer that orders its stream
//!   after it, as the API asks, reads finished data whichever exporters it imported.
//!
//! Errors: the four Python-side functions set a Python exception and return -1; the allocator
//! calls `set_error(error_ctx, kind, message)` and returns -1 (the header's two conventions).
//! Every function catches panics: none crosses the C boundary.

use crate::error::{BridgeError, BridgeResult, panic_message};
use crate::exchange_api::CAPSULE_NAME;
use crate::exporter::Exporter;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use rsdlpack::copy::AlignedBuffer;
use rsdlpack::dlpark::ffi::{
    DLDeviceType, DLManagedTensorVersioned, DLPackExchangeAPI, DLPackExchangeAPIHeader,
    DLPackVersion, DLTensor,
};
use rsdlpack::{
    Device, DeviceKind, ElementType, ImportedTensor, MAX_NDIM, ManagedTensor, TensorDescriptor,
};
use std::ffi::{CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;

/// The table. `DLPackExchangeAPI` holds a raw pointer (`prev_api`), so it is not `Sync` by
/// itself.
#[repr(transparent)]
struct Table(DLPackExchangeAPI);

// SAFETY: the table is immutable: function pointers and a null `prev_api`.
unsafe impl Sync for Table {}

static TABLE: Table = Table(DLPackExchangeAPI {
    header: DLPackExchangeAPIHeader {
        version: DLPackVersion::CURRENT,
        prev_api: std::ptr::null_mut(),
    },
    managed_tensor_allocator: Some(managed_tensor_allocator),
    managed_tensor_from_py_object_no_sync: Some(managed_tensor_from_py_object_no_sync),
    managed_tensor_to_py_object_no_sync: Some(managed_tensor_to_py_object_no_sync),
    dltensor_from_py_object_no_sync: Some(dltensor_from_py_object_no_sync),
    current_work_stream: Some(current_work_stream),
});

/// The capsule "dlpack_exchange_api" over [`TABLE`] (the class attribute's value).
pub fn capsule(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
    let pointer = NonNull::from(&TABLE.0).cast::<c_void>();
    // SAFETY: the table is a static, valid for the capsule's whole life; no destructor is
    // needed; consumers only read it.
    unsafe { PyCapsule::new_with_pointer(py, pointer, CAPSULE_NAME) }
}

/// Runs `body` with the GIL; an error or a panic becomes a Python exception and -1.
fn python_side(body: impl FnOnce(Python<'_>) -> BridgeResult<()>) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        Python::attach(|py| match body(py) {
            Ok(()) => 0,
            Err(error) => {
                PyErr::from(error).restore(py);
                -1
            }
        })
    }));
    outcome.unwrap_or_else(|panic| {
        let what = panic_message(&*panic);
        // Even reporting must not unwind across the boundary.
        let _ = catch_unwind(AssertUnwindSafe(|| {
            Python::attach(|py| {
                PyRuntimeError::new_err(format!(
                    "internal error in RsDLPack's C exchange API (please report): {what}"
                ))
                .restore(py)
            })
        }));
        -1
    })
}

/// `object` as our exporter, or a TypeError naming what it was.
fn exporter<'a, 'py>(
    object: &'a Bound<'py, PyAny>,
    function: &str,
) -> BridgeResult<&'a Bound<'py, Exporter>> {
    object.cast::<Exporter>().map_err(|_| {
        BridgeError::WrongType(format!(
            "rsdlpack.DLPackTensor's {function} was given an object of type {}, not an \
             rsdlpack.DLPackTensor (the exchange API serves only the type it was found on)",
            object
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "?".into())
        ))
    })
}

/// `managed_tensor_from_py_object_no_sync`.
///
/// # Safety
/// Called with the GIL held; `py_object` a live object (or null, refused); `out` writable (or
/// null, refused).
unsafe extern "C" fn managed_tensor_from_py_object_no_sync(
    py_object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    const NAME: &str = "managed_tensor_from_py_object_no_sync";
    python_side(|py| {
        if py_object.is_null() || out.is_null() {
            return Err(BridgeError::Argument(format!(
                "{NAME}: py_object and out must not be null"
            )));
        }
        crate::release::drain(py, crate::release::Wait::No);
        // SAFETY: a live object the caller lends us for the call (contract).
        let object = unsafe { Bound::from_borrowed_ptr(py, py_object.cast()) };
        let tensor = exporter(&object, NAME)?.get().managed_no_sync()?;
        // SAFETY: `out` is writable (checked non-null; contract); ownership passes to the caller.
        unsafe { *out = tensor.into_raw() };
        Ok(())
    })
}

/// `dltensor_from_py_object_no_sync`: a borrowed view, valid while the exporter lives.
///
/// # Safety
/// As [`managed_tensor_from_py_object_no_sync`], with `out` a writable `DLTensor`.
unsafe extern "C" fn dltensor_from_py_object_no_sync(
    py_object: *mut c_void,
    out: *mut DLTensor,
) -> c_int {
    const NAME: &str = "dltensor_from_py_object_no_sync";
    python_side(|py| {
        if py_object.is_null() || out.is_null() {
            return Err(BridgeError::Argument(format!(
                "{NAME}: py_object and out must not be null"
            )));
        }
        // SAFETY: a live object the caller lends us for the call (contract).
        let object = unsafe { Bound::from_borrowed_ptr(py, py_object.cast()) };
        let exporter = exporter(&object, NAME)?.get();
        let d = exporter.descriptor();
        if d.read_only() {
            return Err(BridgeError::Buffer(format!(
                "{NAME}: this tensor is read-only and a DLTensor cannot say so; use \
                 managed_tensor_from_py_object_no_sync, which sets DLPack's READ_ONLY flag"
            )));
        }
        if matches!(d.element(), ElementType::RawBytes { bits, .. } if bits < 8) {
            return Err(BridgeError::Buffer(format!(
                "{NAME}: this tensor stores a sub-byte type one element per byte, which only \
                 the managed tensor's IS_SUBBYTE_TYPE_PADDED flag can say; use \
                 managed_tensor_from_py_object_no_sync"
            )));
        }
        exporter.ready_on_default_stream()?;
        let view = DLTensor {
            data: d.first_element() as *mut c_void,
            device: d.device().to_dlpack(),
            ndim: i32::try_from(d.ndim()).expect("at most MAX_NDIM dims"),
            dtype: d.element().to_dlpack(),
            // The descriptor is boxed inside the exporter's shared source: these addresses
            // stay valid while the exporter lives. Consumers only read through them.
            shape: d.shape().as_ptr().cast_mut(),
            strides: d.strides().as_ptr().cast_mut(),
            byte_offset: 0,
        };
        // SAFETY: `out` is writable (checked non-null; contract).
        unsafe { out.write(view) };
        Ok(())
    })
}

/// `managed_tensor_to_py_object_no_sync`: steals `tensor` (released on error too).
///
/// # Safety
/// Called with the GIL held; `tensor` an owned `DLManagedTensorVersioned*` (or null, refused)
/// whose deleter may be called from any thread holding the GIL; `out_py_object` writable.
unsafe extern "C" fn managed_tensor_to_py_object_no_sync(
    tensor: *mut DLManagedTensorVersioned,
    out_py_object: *mut *mut c_void,
) -> c_int {
    python_side(|py| {
        // Ownership first, so that every error below releases the tensor.
        // SAFETY: ownership passes to us (contract); null is refused by from_versioned_raw.
        let owned = unsafe { ManagedTensor::from_versioned_raw(tensor) }?;
        if out_py_object.is_null() {
            return Err(BridgeError::Argument(
                "managed_tensor_to_py_object_no_sync: out_py_object must not be null".into(),
            ));
        }
        crate::release::drain(py, crate::release::Wait::No);
        // Re-wrapped so that the producer's deleter runs only under the GIL, whichever thread
        // drops the last reference to the memory.
        let imported = crate::release::rewrap_owned(ImportedTensor::new(owned)?)?;
        let object = Py::new(py, Exporter::new(imported, None))
            .map_err(|e| BridgeError::producer("creating the exporter", e))?;
        // SAFETY: `out_py_object` is writable (checked non-null); the new reference passes to
        // the caller.
        unsafe { *out_py_object = object.into_ptr().cast() };
        Ok(())
    })
}

/// `current_work_stream`: NULL for every device this exporter can hold (see the module docs).
///
/// # Safety
/// `out_current_stream` writable (or null, refused).
unsafe extern "C" fn current_work_stream(
    device_type: DLDeviceType,
    _device_id: i32,
    out_current_stream: *mut *mut c_void,
) -> c_int {
    let known = matches!(
        DeviceKind::of(device_type),
        DeviceKind::Cpu | DeviceKind::Cuda | DeviceKind::CudaHost | DeviceKind::CudaManaged
    );
    if known && !out_current_stream.is_null() {
        // SAFETY: writable (checked non-null; contract).
        unsafe { *out_current_stream = std::ptr::null_mut() };
        return 0;
    }
    python_side(|_| {
        Err(if out_current_stream.is_null() {
            BridgeError::Argument("current_work_stream: out_current_stream must not be null".into())
        } else {
            BridgeError::Argument(format!(
                "current_work_stream: rsdlpack.DLPackTensor holds CPU or CUDA memory only, not \
                 device type {}",
                device_type.0
            ))
        })
    })
}

/// Why an allocation was refused: a Python exception kind and a message.
struct Refusal(&'static CStr, String);

use std::ffi::CStr;

/// `managed_tensor_allocator`: a fresh host tensor shaped like `prototype`.
///
/// # Safety
/// `prototype` must be null (refused) or a readable `DLTensor` whose `shape` holds `ndim`
/// values; `out` writable (or null, refused); `set_error`, if not null, callable with
/// `error_ctx`.
unsafe extern "C" fn managed_tensor_allocator(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    set_error: Option<unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char)>,
) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        if out.is_null() {
            return Err(Refusal(c"ValueError", "out must not be null".into()));
        }
        // SAFETY: null or a readable DLTensor (contract).
        let prototype = unsafe { prototype.as_ref() }
            .ok_or_else(|| Refusal(c"ValueError", "prototype must not be null".into()))?;
        // SAFETY: `prototype.shape` holds `ndim` values (contract).
        let tensor = unsafe { allocate(prototype) }?;
        // SAFETY: `out` is writable (checked non-null; contract); ownership passes on.
        unsafe { *out = tensor.into_raw() };
        Ok(())
    }));
    let refusal = match outcome {
        Ok(Ok(())) => return 0,
        Ok(Err(refusal)) => refusal,
        Err(panic) => Refusal(
            c"RuntimeError",
            format!(
                "internal error in RsDLPack's managed_tensor_allocator (please report): {}",
                panic_message(&*panic)
            ),
        ),
    };
    if let Some(set_error) = set_error {
        let message = CString::new(refusal.1.replace('\0', " ")).unwrap_or_default();
        // SAFETY: `set_error` is callable with `error_ctx` (contract); both strings live for
        // the call.
        let _ =
            catch_unwind(|| unsafe { set_error(error_ctx, refusal.0.as_ptr(), message.as_ptr()) });
    }
    -1
}

/// The allocation itself: validates `prototype`'s device, dtype and shape, then exports a
/// zeroed, 64-byte-aligned, row-major buffer owned by the tensor.
///
/// # Safety
/// `prototype.shape` must hold `prototype.ndim` readable values when `ndim > 0`.
unsafe fn allocate(
    prototype: &DLTensor,
) -> Result<rsdlpack::dlpark::Managed<DLManagedTensorVersioned>, Refusal> {
    const NAME: &str = "managed_tensor_allocator";
    let device = Device::from_dlpack(prototype.device);
    if device.kind != DeviceKind::Cpu {
        return Err(Refusal(
            c"BufferError",
            format!("{NAME}: only host (CPU) tensors are allocated here, not {device:?}"),
        ));
    }
    let invalid = |message: String| Refusal(c"ValueError", format!("{NAME}: {message}"));
    let element =
        ElementType::from_dlpack(prototype.dtype, false).map_err(|e| invalid(e.to_string()))?;
    if matches!(element, ElementType::PackedBits { .. }) {
        return Err(invalid(format!(
            "sub-byte element types ({:?}) are not allocated here",
            prototype.dtype
        )));
    }
    let ndim = usize::try_from(prototype.ndim)
        .ok()
        .filter(|&n| n <= MAX_NDIM)
        .ok_or_else(|| invalid(format!("ndim {} is not in 0..={MAX_NDIM}", prototype.ndim)))?;
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else if prototype.shape.is_null() {
        return Err(invalid(format!("ndim is {ndim} but shape is null")));
    } else {
        // SAFETY: non-null and holding `ndim` values (contract).
        unsafe { std::slice::from_raw_parts(prototype.shape, ndim) }
    };
    // The core's count, as validation makes it (an empty shape holds no bytes however large
    // its other dimensions).
    let bytes = rsdlpack::descriptor::compact_byte_size(element, shape).map_err(|e| match e {
        rsdlpack::Error::ExtentOverflow { .. } => invalid(format!(
            "shape {shape:?} of {element:?} overflows isize bytes"
        )),
        other => invalid(other.to_string()),
    })?;
    let buffer = AlignedBuffer::try_zeroed(bytes)
        .map_err(|e| Refusal(c"MemoryError", format!("{NAME}: {e}")))?;
    let described =
        TensorDescriptor::compact(buffer.as_ptr() as usize, Device::CPU, element, shape, true)
            .map_err(|e| invalid(e.to_string()))?;
    rsdlpack::export::export_versioned(&described, buffer, DLPackVersion::CURRENT.minor)
        .map_err(|e| invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsdlpack::dlpark::ffi::{DLDataType, DLDataTypeCode, DLDevice};

    fn prototype(shape: &mut [i64]) -> DLTensor {
        DLTensor {
            data: std::ptr::null_mut(),
            device: DLDevice {
                device_type: DLDeviceType::CPU,
                device_id: 0,
            },
            ndim: shape.len() as i32,
            dtype: DLDataType::scalar(DLDataTypeCode::FLOAT, 32),
            shape: shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        }
    }

    /// Found by `fuzz/fuzz_targets/exchange_api.rs`: an empty prototype whose other dimensions
    /// overflow before its zero, `[i64::MAX, 0, 0]` of f32, was refused as "overflows isize
    /// bytes" although it holds none (and is a valid DLPack tensor).
    #[test]
    fn an_empty_prototype_is_allocated_however_large_its_other_dimensions() {
        for mut shape in [
            vec![i64::MAX, 0, 0],
            vec![1 << 62, 1 << 62, 0],
            vec![0, i64::MAX],
        ] {
            let mut proto = prototype(&mut shape);
            let mut out = std::ptr::null_mut();
            // SAFETY: the prototype's shape holds ndim values; `out` is writable.
            let status = unsafe {
                managed_tensor_allocator(&mut proto, &mut out, std::ptr::null_mut(), None)
            };
            assert_eq!(status, 0, "{shape:?}");
            // SAFETY: on success `out` is an owned tensor.
            let managed = unsafe { ManagedTensor::from_versioned_raw(out) }.unwrap();
            let imported = ImportedTensor::new(managed).unwrap();
            let d = imported.descriptor();
            assert_eq!(d.shape(), &shape[..]);
            assert_eq!(d.element_count(), 0);
        }
        // Not empty: still refused.
        let mut shape = vec![i64::MAX, 2];
        let mut proto = prototype(&mut shape);
        let mut out = std::ptr::null_mut();
        // SAFETY: as above.
        let status =
            unsafe { managed_tensor_allocator(&mut proto, &mut out, std::ptr::null_mut(), None) };
        assert_eq!(status, -1);
    }
}
