//! The one-crossing export behind Julia's `share`: a Julia array described as a DLPack tensor
//! and wrapped in an exporter object ([`rsdlpack_py_share`]) or in an object of a consumer's
//! type ([`rsdlpack_py_share_into`]), in one call, with the ids of the Julia arrays whose
//! consumers are done with them ([`rsdlpack_py_take_released_roots`]).

use super::border::{attach_for, entry_point, quietly, with_object_as, with_python_as};
use super::import_plan::index_order;
use super::values::{
    RSDLPACK_CALL_REFUSE_WITHOUT_GIL, RSDLPACK_SHARE_EXPORTER_FOR_NON_TYPES,
    RSDLPACK_SHARE_STREAM_KEPT, RsdlAccess,
};
use crate::error::refuse_null;
use crate::error::{BridgeError, BridgeResult};
use crate::export::Exporter;
use crate::export::roots::{self, JuliaRoot};
use crate::export::share_into::share_into;
use pyo3::{Bound, IntoPyObject, ffi};
use rsdlpack::dlpark::ffi::{DLDevice, DLDeviceType};
use rsdlpack::export::plan::ProducerReady;
use rsdlpack::{Device, ElementType, TensorDescriptor};
use std::ffi::c_char;

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
    // SAFETY: forwarded contract; no flags.
    unsafe { rsdlpack_py_share_with_flags(array, 0, out, error_out) }
}

/// As [`rsdlpack_py_share`], with `flags` (`RSDLPACK_CALL_REFUSE_WITHOUT_GIL`,
/// `RSDLPACK_SHARE_STREAM_KEPT`, or 0; other bits are refused with `RSDL_ERROR_CODE_INVALID`,
/// and nothing then refers to the root).
///
/// # Safety
/// As [`rsdlpack_py_share`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_py_share_with_flags(
    array: *const RsdlArrayExport,
    flags: u32,
    out: *mut RsdlShareResult,
    error_out: *mut *mut c_char,
) -> i32 {
    let body = || -> BridgeResult<()> {
        refuse_null!("rsdlpack_py_share", "array and out", array, out);
        let attach = attach_for(
            "rsdlpack_py_share_with_flags",
            flags,
            RSDLPACK_CALL_REFUSE_WITHOUT_GIL | RSDLPACK_SHARE_STREAM_KEPT,
        )?;
        // SAFETY: readable (checked non-null; caller's contract).
        let array = unsafe { &*array };
        let (root, stream) = root_and_stream(array);
        // SAFETY: forwarded from this entry point's contract.
        let describe = |descriptor: &mut _| unsafe { describe(array, descriptor) };
        let exporter = Exporter::of_julia_array(root, stream, describe)?;
        // SAFETY: the root keeps the stream alive (the flag's contract).
        let exporter = unsafe { kept_stream(exporter, flags, stream) };
        let exporter = with_python_as(attach, |py| {
            Ok(exporter
                .into_pyobject(py)
                .map_err(|e| BridgeError::producer("creating the exporter", e))?
                .unbind())
        })?;
        // SAFETY: `out` is writable (checked non-null; caller's contract).
        unsafe { out.write(share_result(exporter.into_ptr())) };
        Ok(())
    };
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    unsafe { entry_point(error_out, body) }
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
    // SAFETY: forwarded contract; no flags.
    unsafe { rsdlpack_py_share_into_with_flags(array, r#type, 0, out, error_out) }
}

/// As [`rsdlpack_py_share_into`], with `flags` as [`rsdlpack_py_share_with_flags`] takes them,
/// and `RSDLPACK_SHARE_EXPORTER_FOR_NON_TYPES`: then a `type` that is not a Python type gets
/// an exporter object, as from [`rsdlpack_py_share`] (instead of a refusal).
///
/// # Safety
/// As [`rsdlpack_py_share_into`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_py_share_into_with_flags(
    array: *const RsdlArrayExport,
    r#type: *mut ffi::PyObject,
    flags: u32,
    out: *mut RsdlShareResult,
    error_out: *mut *mut c_char,
) -> i32 {
    let body = || -> BridgeResult<()> {
        refuse_null!(
            "rsdlpack_py_share_into",
            "array, type and out",
            array,
            r#type,
            out,
        );
        let attach = attach_for(
            "rsdlpack_py_share_into_with_flags",
            flags,
            RSDLPACK_CALL_REFUSE_WITHOUT_GIL
                | RSDLPACK_SHARE_EXPORTER_FOR_NON_TYPES
                | RSDLPACK_SHARE_STREAM_KEPT,
        )?;
        let exporter_for_non_types = flags & RSDLPACK_SHARE_EXPORTER_FOR_NON_TYPES != 0;
        // SAFETY: readable (checked non-null; caller's contract).
        let array = unsafe { &*array };
        let (root, stream) = root_and_stream(array);
        let mut described = TensorDescriptor::empty();
        // SAFETY: forwarded from this entry point's contract.
        unsafe { describe(array, &mut described) }?;
        // SAFETY: a live object (caller's contract), borrowed for the call; with
        // `RSDLPACK_SHARE_STREAM_KEPT` the root keeps the stream alive (`kept_stream`'s need).
        let object = unsafe {
            with_object_as(attach, r#type, |object| {
                match object.cast::<pyo3::types::PyType>() {
                    Ok(ty) => Ok(share_into(ty, &described, root, stream)?.unbind()),
                    Err(_) if exporter_for_non_types => {
                        let exporter = Exporter::of_julia_array(root, stream, |descriptor| {
                            *descriptor = described;
                            Ok(())
                        })?;
                        // Inside the unsafe block above: the root keeps the stream alive (the
                        // flag's contract), as `kept_stream` requires.
                        kept_stream(exporter, flags, stream)
                            .into_pyobject(object.py())
                            .map(Bound::unbind)
                            .map_err(|e| BridgeError::producer("creating the exporter", e))
                    }
                    Err(_) => Err(BridgeError::NotAType {
                        got: object.to_string(),
                    }),
                }
            })
        }?;
        // SAFETY: `out` is writable (checked non-null; caller's contract).
        unsafe { out.write(share_result(object.into_ptr())) };
        Ok(())
    };
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    unsafe { entry_point(error_out, body) }
}

/// `exporter`, recording at each export on `stream` when `flags` say the root keeps it alive
/// (`RSDLPACK_SHARE_STREAM_KEPT`; see [`rsdlpack::export::plan::producer_ready`]).
///
/// # Safety
/// With the flag, `stream` stays live while the exporter's root is held.
unsafe fn kept_stream(exporter: Exporter, flags: u32, stream: Option<usize>) -> Exporter {
    let kept = flags & RSDLPACK_SHARE_STREAM_KEPT != 0;
    match rsdlpack::export::plan::producer_ready(stream, kept) {
        // SAFETY: forwarded from this function's contract.
        ProducerReady::AtEachExport(stream) => unsafe { exporter.ready_at_each_export(stream) },
        ProducerReady::AtShare => exporter,
    }
}

/// The answer of both share entry points around `object`, a new reference.
fn share_result(object: *mut ffi::PyObject) -> RsdlShareResult {
    RsdlShareResult {
        exporter: object,
        released_roots: roots::released_count() as u64,
    }
}

/// The root that keeps `array` alive (dropped, i.e. queued as released, on any error from
/// here on) and the stream it was written on.
fn root_and_stream(array: &RsdlArrayExport) -> (JuliaRoot, Option<usize>) {
    let stream = (array.stream != 0).then_some(array.stream);
    (JuliaRoot(array.root_id), stream)
}

/// Describes `array` over `descriptor`, where the caller keeps it: its element type, rank,
/// dims and strides checked ([`TensorDescriptor::julia_layout_into`]). Each field goes
/// straight from the caller's struct into the descriptor: gathered into a struct of its own
/// first, the narrow fields would be stored one by one and loaded back as a whole, stalling.
///
/// # Safety
/// As [`rsdlpack_py_share`]'s contract for `array`.
#[inline]
unsafe fn describe(array: &RsdlArrayExport, descriptor: &mut TensorDescriptor) -> BridgeResult<()> {
    // The error made only on failure: `ok_or`'s, made first, is dropped on every success
    // through a call.
    let Some(element) = ElementType::from_code(array.element_code) else {
        return Err(BridgeError::UnknownElementCode {
            code: array.element_code,
        });
    };
    let ndims = usize::try_from(array.ndims).map_err(|_| BridgeError::BadValue {
        name: "ndims",
        expected: "non-negative",
        got: array.ndims.to_string(),
    })?;
    if ndims > rsdlpack::descriptor::MAX_NDIM {
        return Err(BridgeError::TooManyDims { ndims });
    }
    if ndims > 0 {
        refuse_null!(
            "rsdlpack_py_share",
            "dims and strides",
            array.dims,
            array.strides,
        );
    }
    // SAFETY: forwarded from this function's contract.
    let (dims, strides) = unsafe { dims_and_strides(array, ndims) }?;
    let device = Device::from_dlpack(DLDevice {
        device_type: DLDeviceType(array.device_type),
        device_id: array.device_id,
    });
    let order = index_order(array.order)?;
    descriptor.julia_layout_into(array.address, device, element, dims, strides, order)?;
    descriptor.set_read_only(RsdlAccess::from_field(array.read_only) == RsdlAccess::ReadOnly);
    Ok(())
}

/// Julia's `Int` dims and strides, read in place, the dims checked to be non-negative.
///
/// # Safety
/// `array.dims` and `array.strides` readable for `ndims` entries during the call (non-null
/// when `ndims > 0`).
unsafe fn dims_and_strides(
    array: &RsdlArrayExport,
    ndims: usize,
) -> BridgeResult<(&[i64], &[i64])> {
    let read = |at: *const i64| -> &[i64] {
        if ndims == 0 {
            &[]
        } else {
            // SAFETY: readable for `ndims` entries during the call (this function's contract).
            unsafe { std::slice::from_raw_parts(at, ndims) }
        }
    };
    let (dims, strides) = (read(array.dims), read(array.strides));
    if dims.iter().any(|&d| d < 0) {
        return Err(BridgeError::NegativeDim);
    }
    Ok((dims, strides))
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
    quietly(0, || {
        // SAFETY: writable for `capacity` entries (this entry point's contract).
        let out = unsafe { std::slice::from_raw_parts_mut(out, capacity) };
        roots::take_released(out)
    })
}
