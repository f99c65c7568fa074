//! Where an object's tensor lives, asked before importing it: a converter that picks its
//! array type by device (Julia's `pyconvert(Any, x)`: a host `Array` or a `CuArray`) needs the
//! answer before it can name the import's target, stream and device. The same call tells it
//! whether the object is a tensor at all, so that with `RSDLPACK_CALL_DECLINE_REFUSALS` a
//! class, a capsule, an object without `__dlpack__` or one whose `__dlpack_device__` raises is
//! declined here, and nothing of Python's is called on the converter's side.
//!
//! Not on the import's path: `from_dlpack` never asks (the import finds the device itself).

use super::border::{attach_for, entry_point, with_object_as};
use super::import_plan::refusal;
use super::values::{RSDLPACK_CALL_DECLINE_REFUSALS, RSDLPACK_CALL_REFUSE_WITHOUT_GIL};
use crate::error::{BridgeError, BridgeResult, refuse_null};
use crate::import::{producer_device, type_info};
use crate::protocol::capsule;
use crate::python::names;
use pyo3::prelude::*;
use pyo3::types::PyType;
use pyo3::{Bound, PyAny, ffi};
use rsdlpack::Device;
use std::ffi::c_char;

/// The device `object`'s `__dlpack__` would export from: `type(object)`'s own (NumPy arrays
/// live on the host, with no Python call), else its `__dlpack_device__()`, else, for a
/// producer that has `__dlpack__` but predates `__dlpack_device__`, the host (the import
/// checks the tensor's actual device against what it asked for). Refuses a type object, a
/// bare capsule and an object without `__dlpack__`.
fn device_of(object: &Bound<'_, PyAny>) -> BridgeResult<Device> {
    if let Ok(ty) = object.cast::<PyType>() {
        return Err(BridgeError::TypeObject {
            type_name: names::with_module(ty, false),
        });
    }
    if capsule::is_capsule(object) {
        return Err(BridgeError::CapsuleDevice);
    }
    if type_info::type_info(object)?.host_memory {
        return Ok(Device::CPU);
    }
    // An object without `__dlpack_device__` drops an `AttributeError` on the way to `None`:
    // released now (see `crate::python::attach`).
    crate::python::attach::releasing(|| match producer_device(object)? {
        Some(device) => Ok(device),
        None if object
            .hasattr(pyo3::intern!(object.py(), "__dlpack__"))
            .unwrap_or(false) =>
        {
            Ok(Device::CPU)
        }
        None => Err(BridgeError::NotDlpack {
            type_name: names::of_object(object),
        }),
    })
}

/// Writes the DLPack device (`device_type`, `device_id`) that `object`'s tensor lives on: what
/// its `__dlpack_device__()` answers (no Python call for NumPy arrays; the host for a
/// producer with `__dlpack__` but no `__dlpack_device__`, whose import then checks it).
/// Refuses (`RSDL_ERROR_CODE_NOT_DLPACK`) a Python type object (`torch.Tensor` itself), a bare
/// capsule and an object without `__dlpack__`; a producer's exception is
/// `RSDL_ERROR_CODE_PRODUCER`. `flags`: a bitwise or of `RSDLPACK_CALL_REFUSE_WITHOUT_GIL` and
/// `RSDLPACK_CALL_DECLINE_REFUSALS` (then those refusals answer `RSDL_ERROR_CODE_DECLINED`);
/// other bits are refused with `RSDL_ERROR_CODE_INVALID`. On error the outputs mean nothing.
///
/// # Safety
/// `object` must be a live `PyObject*`; `device_type` and `device_id` writable; `error_out`
/// null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_py_tensor_device(
    object: *mut ffi::PyObject,
    flags: u32,
    device_type: *mut u32,
    device_id: *mut i32,
    error_out: *mut *mut c_char,
) -> i32 {
    let body = || -> BridgeResult<()> {
        refuse_null!(
            "rsdlpack_py_tensor_device",
            "object, device_type and device_id",
            object,
            device_type,
            device_id,
        );
        let attach = attach_for(
            "rsdlpack_py_tensor_device",
            flags,
            RSDLPACK_CALL_REFUSE_WITHOUT_GIL | RSDLPACK_CALL_DECLINE_REFUSALS,
        )?;
        // SAFETY: `object` is a live object the caller lends us for the call (contract).
        let device = unsafe {
            with_object_as(attach, object, |object| {
                device_of(object).map_err(|e| refusal(object, flags, e))
            })
        }?;
        let dl = device.to_dlpack();
        // SAFETY: both outputs are writable (checked non-null; this function's contract).
        unsafe {
            *device_type = dl.device_type.0;
            *device_id = dl.device_id;
        }
        Ok(())
    };
    // SAFETY: `error_out` is null or writable (this function's contract).
    unsafe { entry_point(error_out, body) }
}
