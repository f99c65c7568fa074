//! The Python protocol's calls on a producer: `__dlpack_device__()`, and `__dlpack__` with the
//! keyword arguments that carry a request, retried without the newer ones when a producer that
//! predates them raises `TypeError`.

use super::ImportRequest;
use crate::error::{BridgeError, BridgeResult};
use crate::python::call::call_method;
use crate::python::names;
use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyInt, PyString, PyTuple};
use rsdlpack::dlpark::ffi::DLPackVersion;
use rsdlpack::{Device, DeviceKind};

/// `__dlpack_device__()`, which must answer a `(device_type, device_id)` tuple; `None` for an
/// object without the method (the `__dlpack__` call then tells whether it speaks DLPack).
pub(crate) fn device_of(object: &Bound<'_, PyAny>) -> BridgeResult<Option<Device>> {
    let py = object.py();
    let method = "__dlpack_device__";
    let answer = match call_method(
        object,
        pyo3::intern!(py, "__dlpack_device__"),
        &[],
        &[],
        None,
    ) {
        Ok(answer) => answer,
        Err(err) => {
            return match not_dlpack_or(object, err, method) {
                BridgeError::NotDlpack { .. } => Ok(None),
                raised => Err(raised),
            };
        }
    };
    match crate::protocol::request::answered_device_from_python(&answer) {
        Some(device) => Ok(Some(device)),
        None => Err(BridgeError::BadDeviceAnswer {
            method: format!("{}.{method}", names::of_object(object)),
            answer: answer.to_string(),
        }),
    }
}

/// Classifies an error from calling `method`: the object does not have it at all (not a DLPack
/// producer), or the producer raised.
fn not_dlpack_or(object: &Bound<'_, PyAny>, err: PyErr, method: &str) -> BridgeError {
    let py = object.py();
    if err.is_instance_of::<PyAttributeError>(py) && !object.hasattr(method).unwrap_or(true) {
        return BridgeError::NotDlpack {
            type_name: names::of_object(object),
        };
    }
    BridgeError::producer(format!("{}.{method}", names::of_object(object)), err)
}

/// Keyword arguments of one `__dlpack__` call, in the order their names are cached. Borrowed:
/// the values live in the caller or in process-wide caches, so a call takes no references.
#[derive(Clone, Copy)]
struct Keywords<'a, 'py> {
    stream: Option<&'a Bound<'py, PyAny>>,
    max_version: Option<&'a Bound<'py, PyAny>>,
    dl_device: Option<&'a Bound<'py, PyAny>>,
    copy: Option<&'a Bound<'py, PyAny>>,
}

impl<'py> Keywords<'_, 'py> {
    /// Calls `object.__dlpack__(**self)`.
    fn call(self, object: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        const NAMES: [&str; 4] = ["stream", "max_version", "dl_device", "copy"];
        /// The names tuple for each subset of `NAMES` (bit k set: `NAMES[k]` present).
        static TUPLES: [PyOnceLock<Py<PyTuple>>; 16] = [const { PyOnceLock::new() }; 16];
        let py = object.py();
        let slots = [self.stream, self.max_version, self.dl_device, self.copy];
        let mut values = [object; 4];
        let mut count = 0;
        let mut mask = 0;
        for (k, value) in slots.into_iter().enumerate() {
            if let Some(value) = value {
                values[count] = value;
                count += 1;
                mask |= 1 << k;
            }
        }
        let names = (mask != 0).then(|| {
            TUPLES[mask]
                .get_or_init(py, || {
                    // Interned, as producers' argument parsers compare names by identity first.
                    let present: Vec<_> = (0..4)
                        .filter(|k| mask & (1 << k) != 0)
                        .map(|k| PyString::intern(py, NAMES[k]))
                        .collect();
                    PyTuple::new(py, present)
                        .expect("a tuple of strings")
                        .unbind()
                })
                .bind(py)
        });
        call_method(
            object,
            pyo3::intern!(py, "__dlpack__"),
            &[],
            &values[..count],
            names,
        )
    }
}

/// `(1, 3)`: the newest DLPack version this library speaks, built once.
fn max_version(py: Python<'_>) -> &Bound<'_, PyAny> {
    static MAX_VERSION: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let current = DLPackVersion::CURRENT;
    MAX_VERSION
        .get_or_init(py, || {
            PyTuple::new(py, [current.major, current.minor])
                .expect("a tuple of ints")
                .into_any()
                .unbind()
        })
        .bind(py)
}

/// Calls `__dlpack__` with the requested arguments, retrying without the newer ones on
/// `TypeError`.
pub(super) fn call_dlpack<'py>(
    object: &Bound<'py, PyAny>,
    request: &ImportRequest,
    producer_device: Option<Device>,
) -> BridgeResult<Bound<'py, PyAny>> {
    let py = object.py();
    let on_cpu = producer_device.is_some_and(|d| d.kind == DeviceKind::Cpu);
    let stream = request
        .stream
        .to_value()
        .filter(|_| !on_cpu)
        .map(|value| PyInt::new(py, value).into_any());
    let other_device = request
        .device
        .filter(|&device| device != Device::CPU)
        .map(|device| device_tuple(py, device));
    let dl_device = match request.device {
        Some(Device::CPU) => Some(cpu_tuple(py)),
        _ => other_device.as_ref(),
    };
    let copy = request
        .copy
        .map(|copy| PyBool::new(py, copy).to_owned().into_any());
    let full = Keywords {
        stream: stream.as_ref(),
        max_version: Some(max_version(py)),
        dl_device,
        copy: copy.as_ref(),
    };
    match full.call(object) {
        Ok(capsule) => Ok(capsule),
        // An old producer: the `TypeError` is dropped on this success path, so released at
        // once (see `crate::python::attach`).
        Err(err) if err.is_instance_of::<PyTypeError>(py) => {
            crate::python::attach::releasing(move || retry_legacy(object, stream.as_ref(), err))
        }
        Err(err) => Err(not_dlpack_or(object, err, "__dlpack__")),
    }
}

/// `__dlpack__(stream=…)` alone, for a producer that refused the newer arguments with `err`.
fn retry_legacy<'py>(
    object: &Bound<'py, PyAny>,
    stream: Option<&Bound<'py, PyAny>>,
    err: PyErr,
) -> BridgeResult<Bound<'py, PyAny>> {
    let legacy = Keywords {
        stream,
        max_version: None,
        dl_device: None,
        copy: None,
    };
    legacy.call(object).map_err(|retry| {
        BridgeError::producer(
            format!(
                "{}.__dlpack__ (also without max_version, after: {err})",
                names::of_object(object)
            ),
            retry,
        )
    })
}

/// `(device_type, device_id)` for `dl_device=`.
fn device_tuple(py: Python<'_>, device: Device) -> Bound<'_, PyAny> {
    let dl = device.to_dlpack();
    PyTuple::new(py, [i64::from(dl.device_type.0), i64::from(dl.device_id)])
        .expect("a tuple of ints")
        .into_any()
}

/// `(1, 0)`, what every host import asks for, built once.
fn cpu_tuple(py: Python<'_>) -> &Bound<'_, PyAny> {
    static CPU: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    CPU.get_or_init(py, || device_tuple(py, Device::CPU).unbind())
        .bind(py)
}
