//! Import: any Python object that speaks DLPack (or a bare capsule) becomes an owned,
//! validated [`ImportedTensor`].
//!
//! Negotiation follows the Python specification: ask `__dlpack_device__`, then call
//! `__dlpack__(stream=…, max_version=(1, 3), dl_device=…, copy=…)` with only the arguments that
//! carry a request, and retry without `max_version`, `dl_device` and `copy` when a producer
//! that predates them raises `TypeError`. What such a producer could not be asked for is
//! checked afterwards (device) or left to the core (a copy is then made on our side).
//!
//! dlpark has a Python importer, but it does not retry on `TypeError` and it would tie this
//! crate to its PyO3 feature set; the protocol steps are few, so they live here.

use crate::capsule;
use crate::error::{BridgeError, BridgeResult};
use crate::request::StreamRequest;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use rsdlpack::dlpark::ffi::DLPackVersion;
use rsdlpack::{Device, DeviceKind, ImportedTensor};

/// What the consumer asks of the producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportRequest {
    pub stream: StreamRequest,
    pub device: Option<Device>,
    pub copy: Option<bool>,
}

impl Default for ImportRequest {
    fn default() -> Self {
        Self {
            stream: StreamRequest::Omitted,
            device: None,
            copy: None,
        }
    }
}

/// Imports `object`. The producer's deleter runs exactly once: when the result is dropped, or
/// before an error is returned.
pub fn import(object: &Bound<'_, PyAny>, request: &ImportRequest) -> BridgeResult<ImportedTensor> {
    if capsule::is_capsule(object) {
        // A capsule was made before we could ask for anything: check what it holds instead.
        let tensor = ImportedTensor::new(capsule::consume(object)?)?;
        let on_device = !tensor.descriptor().device.kind.host_accessible();
        if on_device && request.stream != StreamRequest::Omitted {
            return Err(BridgeError::Buffer(
                "a bare DLPack capsule cannot order its data on the consumer's stream; pass the \
                 tensor object itself so that __dlpack__(stream=...) can"
                    .into(),
            ));
        }
        return check_result(tensor, "the capsule", request.device, request.copy);
    }
    let type_name = object
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    if !object.hasattr("__dlpack__").unwrap_or(false) {
        return Err(BridgeError::NotDlpack { type_name });
    }
    let producer_device = device_of(object, &type_name)?;
    let wanted_device = request.device.or(producer_device);

    let tensor_capsule = call_dlpack(object, &type_name, request, producer_device)?;
    let tensor = ImportedTensor::new(capsule::consume(&tensor_capsule)?)?;
    check_result(
        tensor,
        &format!("{type_name}.__dlpack__"),
        wanted_device,
        request.copy,
    )
}

/// What the producer could not be asked (or ignored) is checked on the result; on error the
/// tensor is dropped here, so its deleter runs.
fn check_result(
    tensor: ImportedTensor,
    source: &str,
    wanted_device: Option<Device>,
    copy: Option<bool>,
) -> BridgeResult<ImportedTensor> {
    let found = tensor.descriptor().device;
    if let Some(wanted) = wanted_device.filter(|&w| w != found) {
        return Err(BridgeError::Buffer(format!(
            "{source} holds a tensor on device {found:?}, not the requested {wanted:?}"
        )));
    }
    if copy == Some(false) && tensor.descriptor().is_copied {
        return Err(BridgeError::Buffer(format!(
            "copy=false was requested but {source} holds a copy (IS_COPIED)"
        )));
    }
    // An empty tensor may carry any pointer (torch: null); there is nothing to check.
    if found.kind.is_cuda() && tensor.descriptor().element_count() > 0 {
        rsdlpack::cuda::pointer::check_pointer(tensor.descriptor())?;
    }
    Ok(tensor)
}

/// `__dlpack_device__()`, when the object has it.
fn device_of(object: &Bound<'_, PyAny>, type_name: &str) -> BridgeResult<Option<Device>> {
    if !object.hasattr("__dlpack_device__").unwrap_or(false) {
        return Ok(None);
    }
    let what = format!("{type_name}.__dlpack_device__");
    let answer = object
        .call_method0("__dlpack_device__")
        .map_err(|e| BridgeError::producer(&what, e))?;
    crate::request::device_from_python(Some(&answer)).map_err(|_| {
        BridgeError::Argument(format!(
            "{what} returned {answer}, not a (device_type, device_id) tuple"
        ))
    })
}

/// Calls `__dlpack__` with the requested arguments, retrying without the newer ones on
/// `TypeError`.
fn call_dlpack<'py>(
    object: &Bound<'py, PyAny>,
    type_name: &str,
    request: &ImportRequest,
    producer_device: Option<Device>,
) -> BridgeResult<Bound<'py, PyAny>> {
    let py = object.py();
    let what = format!("{type_name}.__dlpack__");
    let on_cpu = producer_device.is_some_and(|d| d.kind == DeviceKind::Cpu);
    let stream = if on_cpu {
        None
    } else {
        request.stream.to_value()
    };

    let full = PyDict::new(py);
    let legacy = PyDict::new(py);
    let add = |dict: &Bound<'py, PyDict>, key: &str, value: Bound<'py, PyAny>| {
        dict.set_item(key, value)
            .map_err(|e| BridgeError::producer("dict.__setitem__", e))
    };
    if let Some(stream) = stream {
        add(
            &full,
            "stream",
            stream.into_pyobject(py).expect("int").into_any(),
        )?;
        add(
            &legacy,
            "stream",
            stream.into_pyobject(py).expect("int").into_any(),
        )?;
    }
    let max_version = (DLPackVersion::CURRENT.major, DLPackVersion::CURRENT.minor);
    add(
        &full,
        "max_version",
        PyTuple::new(py, [max_version.0, max_version.1])
            .expect("tuple")
            .into_any(),
    )?;
    if let Some(device) = request.device {
        let dl = device.to_dlpack();
        let tuple =
            PyTuple::new(py, [dl.device_type.0 as i64, dl.device_id as i64]).expect("tuple");
        add(&full, "dl_device", tuple.into_any())?;
    }
    if let Some(copy) = request.copy {
        add(
            &full,
            "copy",
            pyo3::types::PyBool::new(py, copy).to_owned().into_any(),
        )?;
    }

    match object.call_method("__dlpack__", (), Some(&full)) {
        Ok(capsule) => Ok(capsule),
        Err(err) if err.is_instance_of::<PyTypeError>(py) => object
            .call_method("__dlpack__", (), Some(&legacy))
            .map_err(|retry| {
                BridgeError::producer(
                    format!("{what} (also without max_version, after: {err})"),
                    retry,
                )
            }),
        Err(err) => Err(BridgeError::producer(what, err)),
    }
}
