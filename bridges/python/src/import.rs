//! Import: any Python object that speaks DLPack (or a bare capsule) becomes an owned,
//! validated [`ImportedTensor`].
//!
//! Negotiation follows the Python specification: ask `__dlpack_device__`, then call
//! `__dlpack__(stream=…, max_version=(1, 3), dl_device=…, copy=…)` with only the arguments that
//! carry a request, and retry without `max_version`, `dl_device` and `copy` when a producer
//! that predates them raises `TypeError`. What such a producer could not be asked for is
//! checked afterwards (device) or left to the core (a copy is then made on our side).
//!
//! The tensor's device type is checked first of all, at this border: 0 (never valid in DLPack)
//! and types DLPack does not define are refused, naming the number, unless the caller opted in
//! ([`ImportRequest::accept_unknown_device_types`]), for producers it knows to use a newer or
//! private device type.
//! Before that, `numpy.ndarray` itself is read through NumPy's C ABI, with no Python call (see
//! [`crate::numpy`]), where nothing about the request needs NumPy's own answer; and a type
//! that offers the DLPack 1.3 C exchange API (`__dlpack_c_exchange_api__`,
//! torch) is imported through it (see [`crate::exchange_api`]): one C call instead of Python
//! code, the streams ordered by us. torch tensors are checked for what DLPack cannot carry
//! (see [`crate::torch`]) on either path.
//!
//! dlpark has a Python importer, but it does not retry on `TypeError` and it would tie this
//! crate to its PyO3 feature set; the protocol steps are few, so they live here.

use crate::call::call_method;
use crate::capsule;
use crate::error::{BridgeError, BridgeResult};
use crate::exchange_api::{self, ExchangeApi};
use crate::request::StreamRequest;
use crate::torch::TorchKind;
use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyInt, PyString, PyTuple};
use rsdlpack::dlpark::ffi::DLPackVersion;
use rsdlpack::{Device, DeviceKind, ImportedTensor};

/// What the consumer asks of the producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportRequest {
    pub stream: StreamRequest,
    pub device: Option<Device>,
    pub copy: Option<bool>,
    /// Take tensors whose device type DLPack does not define (0 included) instead of refusing
    /// them. Off by default.
    pub accept_unknown_device_types: bool,
}

impl Default for ImportRequest {
    fn default() -> Self {
        Self {
            stream: StreamRequest::Omitted,
            device: None,
            copy: None,
            accept_unknown_device_types: false,
        }
    }
}

/// Imports `object`. The producer's deleter runs exactly once: when the result is dropped, or
/// before an error is returned.
///
/// The success path makes one or two Python calls and formats nothing: `__dlpack_device__` is
/// asked only when a stream is requested (NumPy refuses any stream on CPU, and torch answers
/// it in Python code, ~2 µs), since the capsule itself says where the tensor lives; names and
/// keyword tuples are interned once per process; messages are built only on error.
///
/// A CUDA tensor remembers the request's stream as its consumer's (see
/// [`ImportedTensor::set_consumer_stream`]): its release waits for the work enqueued there.
pub fn import(object: &Bound<'_, PyAny>, request: &ImportRequest) -> BridgeResult<ImportedTensor> {
    let mut tensor = negotiate(object, request)?;
    // SAFETY: a stream handle in a request is the caller's promise (the import entry points'
    // contract): a live stream of the tensor's device until the tensor is released.
    unsafe { tensor.set_consumer_stream(request.stream) };
    Ok(tensor)
}

/// [`import`] up to the validated tensor.
fn negotiate(object: &Bound<'_, PyAny>, request: &ImportRequest) -> BridgeResult<ImportedTensor> {
    if capsule::is_capsule(object) {
        // A capsule was made before we could ask for anything: check what it holds instead.
        let tensor = ImportedTensor::new(capsule::consume(object)?)?;
        let on_device = !tensor.descriptor().device().kind.host_accessible();
        if on_device && request.stream != StreamRequest::Omitted {
            return Err(BridgeError::Buffer(
                "a bare DLPack capsule cannot order its data on the consumer's stream; pass the \
                 tensor object itself so that __dlpack__(stream=...) can"
                    .into(),
            ));
        }
        check_result(&tensor, || "the capsule".into(), request, request.device)?;
        return Ok(tensor);
    }
    let info = exchange_api::type_info(object)?;
    if info.numpy_fields
        && request.stream == StreamRequest::Omitted
        && request.copy != Some(true)
        && request.device.is_none_or(|wanted| wanted == Device::CPU)
        // SAFETY: `numpy_fields` says the object's type is one `fields_are_readable` accepted.
        && let Some(managed) = unsafe { crate::numpy::export_directly(object) }
    {
        let tensor = ImportedTensor::new(managed)?;
        check_result(&tensor, || "numpy.ndarray".into(), request, request.device)?;
        return Ok(tensor);
    }
    crate::torch::check(object, info.torch)?;
    if let Some(api) = info
        .api
        .filter(|_| info.torch != TorchKind::Wrapped && request.copy != Some(true))
        && let Some(tensor) = import_through_api(api, object, request)?
    {
        return Ok(tensor);
    }
    let producer_device = match request.stream {
        StreamRequest::Omitted => None,
        _ => device_of(object)?,
    };
    // Memory that is on the host by construction needs no request for the host (see
    // [`crate::numpy`]); `check_result` still holds the result to it.
    let asked = ImportRequest {
        device: request
            .device
            .filter(|&wanted| !(info.host_memory && wanted == Device::CPU)),
        ..*request
    };
    let tensor_capsule = call_dlpack(object, &asked, producer_device)?;
    let tensor = ImportedTensor::new(capsule::consume(&tensor_capsule)?)?;
    check_result(
        &tensor,
        || format!("{}.__dlpack__", type_name(object)),
        request,
        request.device.or(producer_device),
    )?;
    Ok(tensor)
}

/// Imports through the producer's C exchange API (see [`crate::exchange_api`]), or answers
/// `None` when this request needs the Python protocol after all: `copy=True` never comes here;
/// a `dl_device` other than where the tensor lives, or a device tensor whose producer cannot
/// name its work stream, is released and imported through `__dlpack__` (which can copy, or
/// order streams itself).
///
/// For a CUDA tensor the consumer's stream (the request's; the legacy default stream when
/// omitted) is made to wait, with an event, for the producer's current work stream: no host
/// wait, as `__dlpack__(stream=...)` would do it.
fn import_through_api(
    api: ExchangeApi,
    object: &Bound<'_, PyAny>,
    request: &ImportRequest,
) -> BridgeResult<Option<ImportedTensor>> {
    let tensor = ImportedTensor::new(api.managed_tensor_from_py_object(object)?)?;
    let device = tensor.descriptor().device();
    if request.device.is_some_and(|wanted| wanted != device) {
        return Ok(None);
    }
    let source = || format!("{}.__dlpack_c_exchange_api__", type_name(object));
    match device.kind {
        DeviceKind::Cpu => {}
        DeviceKind::Cuda | DeviceKind::CudaManaged => {
            if let Some(consumer) = request.stream.cuda_handle() {
                let Some(producer) =
                    api.current_work_stream(object.py(), || type_name(object), device)?
                else {
                    return Ok(None);
                };
                // The default stream is NULL in the runtime API; the driver calls it 1.
                let producer = if producer == 0 { 1 } else { producer };
                // SAFETY: `producer` is the producer's current stream on the tensor's device (a
                // live stream by the API's contract); `consumer` is the stream the caller named
                // (the import's contract: a live stream of that device) or a default stream.
                unsafe { rsdlpack::cuda::order::order_streams(device.id, producer, consumer) }?;
            }
        }
        // Pinned host memory and other devices: the Python protocol knows their rules.
        _ if request.stream != StreamRequest::Omitted => return Ok(None),
        _ => {}
    }
    check_result(&tensor, source, request, request.device)?;
    Ok(Some(tensor))
}

fn type_name(object: &Bound<'_, PyAny>) -> String {
    object
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// What the producer could not be asked (or ignored) is checked on the result; on error the
/// caller drops the tensor, so its deleter runs. `source` names the producer in messages.
// Inlined: on success it is a few comparisons, and its `Result` would come back through memory.
#[inline]
fn check_result(
    tensor: &ImportedTensor,
    source: impl FnOnce() -> String,
    request: &ImportRequest,
    wanted_device: Option<Device>,
) -> BridgeResult<()> {
    let found = tensor.descriptor().device();
    if !request.accept_unknown_device_types {
        found.check_known()?;
    }
    let copy = request.copy;
    if let Some(wanted) = wanted_device.filter(|&w| w != found) {
        return Err(BridgeError::Buffer(format!(
            "{} holds a tensor on device {found:?}, not the requested {wanted:?}",
            source()
        )));
    }
    if copy == Some(false) && tensor.descriptor().is_copied() {
        return Err(BridgeError::Buffer(format!(
            "copy=false was requested but {} holds a copy (IS_COPIED)",
            source()
        )));
    }
    // An empty tensor may carry any pointer (torch: null); there is nothing to check.
    if found.kind.is_cuda() && tensor.descriptor().element_count() > 0 {
        rsdlpack::cuda::pointer::check_pointer(tensor.descriptor())?;
    }
    Ok(())
}

/// `__dlpack_device__()`, which must answer a `(device_type, device_id)` tuple; `None` for an
/// object without the method (the `__dlpack__` call then tells whether it speaks DLPack).
fn device_of(object: &Bound<'_, PyAny>) -> BridgeResult<Option<Device>> {
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
    match crate::request::device_from_python(Some(&answer)) {
        Ok(Some(device)) => Ok(Some(device)),
        _ => Err(BridgeError::Argument(format!(
            "{}.{method} returned {answer}, not a (device_type, device_id) tuple",
            type_name(object)
        ))),
    }
}

/// Classifies an error from calling `method`: the object does not have it at all (not a DLPack
/// producer), or the producer raised.
fn not_dlpack_or(object: &Bound<'_, PyAny>, err: PyErr, method: &str) -> BridgeError {
    let py = object.py();
    if err.is_instance_of::<PyAttributeError>(py) && !object.hasattr(method).unwrap_or(true) {
        return BridgeError::NotDlpack {
            type_name: type_name(object),
        };
    }
    BridgeError::producer(format!("{}.{method}", type_name(object)), err)
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
fn call_dlpack<'py>(
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
    /// `(1, 0)`, what every host import asks for, built once.
    static CPU: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let tuple = |device: Device| {
        let dl = device.to_dlpack();
        PyTuple::new(py, [i64::from(dl.device_type.0), i64::from(dl.device_id)])
            .expect("a tuple of ints")
            .into_any()
    };
    let other_device = request
        .device
        .filter(|&device| device != Device::CPU)
        .map(tuple);
    let dl_device = match request.device {
        Some(Device::CPU) => Some(CPU.get_or_init(py, || tuple(Device::CPU).unbind()).bind(py)),
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
        // once (see `crate::attach`).
        Err(err) if err.is_instance_of::<PyTypeError>(py) => crate::attach::releasing(move || {
            let legacy = Keywords {
                stream: stream.as_ref(),
                max_version: None,
                dl_device: None,
                copy: None,
            };
            legacy.call(object).map_err(|retry| {
                BridgeError::producer(
                    format!(
                        "{}.__dlpack__ (also without max_version, after: {err})",
                        type_name(object)
                    ),
                    retry,
                )
            })
        }),
        Err(err) => Err(not_dlpack_or(object, err, "__dlpack__")),
    }
}
