//! One managed tensor in, one out: Python objects imported as owned
//! `DLManagedTensorVersioned*` ([`rsdlpack_py_import`]) and managed tensors exported as Python
//! objects with `__dlpack__` ([`rsdlpack_py_export`]).

use super::border::{attach_for, entry_point, with_object_as, with_python};
use super::values::{RSDLPACK_CALL_REFUSE_WITHOUT_GIL, RsdlCopy};
use crate::error::refuse_null;
use crate::error::{BridgeError, BridgeResult};
use crate::export::Exporter;
use crate::import::{ImportRequest, import};
use crate::protocol::request::StreamRequest;
use crate::python::release;
use pyo3::{IntoPyObject, ffi};
use rsdlpack::dlpark::ffi::{DLDevice, DLDeviceType, DLManagedTensorVersioned};
use rsdlpack::{Device, ManagedTensor};
use std::ffi::c_char;

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
    /// What C callers mean by null options: no stream, device or copy request.
    pub(crate) const NONE: Self = Self {
        has_stream: 0,
        stream: 0,
        has_device: 0,
        device_type: 0,
        device_id: 0,
        copy: RsdlCopy::IfNeeded as i32,
    };

    /// `options`, or [`Self::NONE`] for null, parsed.
    ///
    /// # Safety
    /// `options` must be null or readable.
    // Inlined, always (two callers would keep it a call): returned through memory, the
    // request would be reloaded wider than it was stored, a store-to-load forwarding stall
    // on the import path (BENCHMARKS.md).
    #[inline(always)]
    pub(crate) unsafe fn read(options: *const Self) -> BridgeResult<ImportRequest> {
        // SAFETY: null or readable (this function's contract).
        unsafe { options.as_ref() }
            .copied()
            .unwrap_or(Self::NONE)
            .parse()
    }

    // Inlined, as `read`.
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
        let copy = match RsdlCopy::from_field(self.copy) {
            Some(RsdlCopy::IfNeeded) => None,
            Some(RsdlCopy::Never) => Some(false),
            Some(RsdlCopy::Always) => Some(true),
            None => {
                return Err(BridgeError::BadValue {
                    name: "copy",
                    expected: "-1, 0 or 1",
                    got: self.copy.to_string(),
                });
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

/// As `rsdlpack_py_import`, with `flags` (a bitwise or of `RSDLPACK_IMPORT_*` and
/// `RSDLPACK_CALL_REFUSE_WITHOUT_GIL`; unknown bits are refused with
/// `RSDL_ERROR_CODE_INVALID`). A separate entry point, so that
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
    let body = || -> BridgeResult<()> {
        refuse_null!("rsdlpack_py_import", "object and out", object, out);
        let attach = attach_for(
            "rsdlpack_py_import_with_flags",
            flags,
            RSDLPACK_IMPORT_ACCEPT_UNKNOWN_DEVICE_TYPES | RSDLPACK_CALL_REFUSE_WITHOUT_GIL,
        )?;
        // SAFETY: `options` is null or points to an options struct (caller's contract).
        let mut request = unsafe { RsdlImportOptions::read(options) }?;
        request.accept_unknown_device_types =
            flags & RSDLPACK_IMPORT_ACCEPT_UNKNOWN_DEVICE_TYPES != 0;
        // SAFETY: `object` is a live object the caller lends us for the call.
        let managed = unsafe {
            with_object_as(attach, object, |object| {
                Ok(release::forward(import(object, &request)?)?)
            })
        }?;
        // SAFETY: `out` is writable (checked non-null; caller's contract).
        unsafe { *out = managed.into_raw() };
        Ok(())
    };
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    unsafe { entry_point(error_out, body) }
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
    let body = || -> BridgeResult<()> {
        // SAFETY: ownership of `tensor` passes to us (caller's contract).
        let owned = unsafe { ManagedTensor::from_versioned_raw(tensor) }?;
        let exporter = Exporter::of_tensor(owned, (stream != 0).then_some(stream))?;
        refuse_null!("rsdlpack_py_export", "out", out);
        let object = with_python(|py| {
            Ok(exporter
                .into_pyobject(py)
                .map_err(|e| BridgeError::producer("creating the exporter", e))?
                .unbind())
        })?;
        // SAFETY: `out` is writable; the new reference passes to the caller.
        unsafe { *out = object.into_ptr() };
        Ok(())
    };
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    unsafe { entry_point(error_out, body) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_options_read_copy_as_the_enum_names_it() {
        let parse = |copy: i32| {
            RsdlImportOptions {
                copy,
                ..Default::default()
            }
            .parse()
            .map(|request| request.copy)
        };
        assert_eq!(parse(RsdlCopy::IfNeeded as i32).unwrap(), None);
        assert_eq!(parse(RsdlCopy::Never as i32).unwrap(), Some(false));
        assert_eq!(parse(RsdlCopy::Always as i32).unwrap(), Some(true));
        for other in [-2, 2, i32::MIN, i32::MAX] {
            assert!(parse(other).is_err(), "copy={other}");
        }
    }
}
