//! The DLPack 1.3 C exchange API, producer side: the table behind
//! `rsdlpack.DLPackTensor.__dlpack_c_exchange_api__`, with all five functions.
//!
//! - `managed_tensor_allocator`: a fresh, zeroed, row-major host tensor aligned to 64 bytes
//!   (the copy engine's `AlignedBuffer`); its deleter frees the buffer. Host only: device
//!   allocation is refused through `set_error` (see [`super::allocator`]).
//! - `managed_tensor_from_py_object_no_sync`: our exporter → the versioned managed tensor that
//!   `__dlpack__(max_version=(1, 3))` gives (same memory, flags, owner).
//! - `managed_tensor_to_py_object_no_sync`: takes ownership of any versioned managed tensor and
//!   returns an exporter over it (its deleter runs under the GIL, see [`crate::python::release`]).
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

use super::allocator::managed_tensor_allocator;
use super::exporter::{Exporter, ExporterObject, ExporterRef};
use crate::error::{BridgeError, BridgeResult, refuse_null};
use crate::import::exchange_api::CAPSULE_NAME;
use crate::python::names;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use rsdlpack::dlpark::ffi::{
    DLDeviceType, DLManagedTensorVersioned, DLPackExchangeAPI, DLPackExchangeAPIHeader,
    DLPackVersion, DLTensor,
};
use rsdlpack::{DeviceKind, ElementType, ImportedTensor, ManagedTensor};
use std::ffi::{c_int, c_void};
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
        let error = BridgeError::panic("'s C exchange API", &*panic);
        // Even reporting must not unwind across the boundary.
        let _ = catch_unwind(AssertUnwindSafe(|| {
            Python::attach(|py| PyErr::from(error).restore(py))
        }));
        -1
    })
}

/// `object` as our exporter, or a TypeError naming what it was.
fn exporter<'a>(
    object: &'a Bound<'_, PyAny>,
    function: &'static str,
) -> BridgeResult<ExporterRef<'a>> {
    ExporterObject::of_object(object).ok_or_else(|| BridgeError::NotOurExporter {
        function,
        type_name: names::of_object(object),
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
        refuse_null!(NAME, "py_object and out", py_object, out);
        crate::python::release::drain(py, crate::python::release::Wait::No);
        // SAFETY: a live object the caller lends us for the call (contract).
        let object = unsafe { Bound::from_borrowed_ptr(py, py_object.cast()) };
        let tensor = exporter(&object, NAME)?.managed_no_sync()?;
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
        refuse_null!(NAME, "py_object and out", py_object, out);
        // SAFETY: a live object the caller lends us for the call (contract).
        let object = unsafe { Bound::from_borrowed_ptr(py, py_object.cast()) };
        let exporter = exporter(&object, NAME)?;
        let d = exporter.descriptor();
        if d.read_only() {
            return Err(BridgeError::ReadOnlyDLTensor);
        }
        if matches!(d.element(), ElementType::RawBytes { bits, .. } if bits < 8) {
            return Err(BridgeError::PaddedDLTensor);
        }
        exporter.ready_on_default_stream()?;
        let view = DLTensor {
            data: d.first_element() as *mut c_void,
            device: d.device().to_dlpack(),
            ndim: i32::try_from(d.ndim()).expect("at most MAX_NDIM dims"),
            dtype: d.element().to_dlpack(),
            // The descriptor lies in the exporter's shared source (its `Arc`): these addresses
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
        refuse_null!(
            "managed_tensor_to_py_object_no_sync",
            "out_py_object",
            out_py_object
        );
        crate::python::release::drain(py, crate::python::release::Wait::No);
        // Re-wrapped so that the producer's deleter runs only under the GIL, whichever thread
        // drops the last reference to the memory.
        let imported = crate::python::release::forward_owned(ImportedTensor::new(owned)?)?;
        let object = Exporter::new(imported, None)?
            .into_object_of_built_type(py)
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
            BridgeError::NullArguments {
                function: "current_work_stream",
                names: "out_current_stream",
            }
        } else {
            BridgeError::WorkStreamDevice {
                device_type: device_type.0,
            }
        })
    })
}
