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
//! [`numpy`]), where nothing about the request needs NumPy's own answer; and a type
//! that offers the DLPack 1.3 C exchange API (`__dlpack_c_exchange_api__`,
//! torch) is imported through it (see [`exchange_api`]): one C call instead of Python
//! code, the streams ordered by us. torch tensors are checked for what DLPack cannot carry
//! (see [`torch`]) on either path. What each type offers is decided once per type
//! ([`type_info`]); the Python call itself, with its retry, is [`dlpack_call`].
//!
//! dlpark has a Python importer, but it does not retry on `TypeError` and it would tie this
//! crate to its PyO3 feature set; the protocol steps are few, so they live here.

mod dlpack_call;
pub mod exchange_api;
pub mod numpy;
pub mod torch;
pub mod type_info;

pub(crate) use dlpack_call::device_of as producer_device;

use crate::error::{BridgeError, BridgeResult};
use crate::protocol::capsule;
use crate::protocol::request::StreamRequest;
use crate::python::names;
use exchange_api::ExchangeApi;
use pyo3::prelude::*;
use rsdlpack::{Device, DeviceKind, ImportedTensor};
use torch::TorchKind;

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
/// it in Python code), since the capsule itself says where the tensor lives; names and
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

/// [`import`] up to the validated tensor: a bare capsule, NumPy's fields, the type's C
/// exchange API, or the Python protocol, the first that serves.
fn negotiate(object: &Bound<'_, PyAny>, request: &ImportRequest) -> BridgeResult<ImportedTensor> {
    if capsule::is_capsule(object) {
        return import_capsule(object, request);
    }
    let info = type_info::type_info(object)?;
    if info.numpy_fields
        && request.stream == StreamRequest::Omitted
        && request.copy != Some(true)
        && request.device.is_none_or(|wanted| wanted == Device::CPU)
        // SAFETY: `numpy_fields` says the object's type is one `fields_are_readable` accepted.
        && let Some(managed) = unsafe { numpy::export_directly(object) }
    {
        let tensor = ImportedTensor::new(managed)?;
        check_result(&tensor, || "numpy.ndarray".into(), request, request.device)?;
        return Ok(tensor);
    }
    torch::check(object, info.torch)?;
    if let Some(api) = info
        .api
        .filter(|_| info.torch != TorchKind::Wrapped && request.copy != Some(true))
        && let Some(tensor) = import_through_api(api, object, request)?
    {
        return Ok(tensor);
    }
    import_through_dlpack(object, request, info.host_memory)
}

/// A capsule was made before we could ask for anything: check what it holds instead.
fn import_capsule(
    capsule: &Bound<'_, PyAny>,
    request: &ImportRequest,
) -> BridgeResult<ImportedTensor> {
    let tensor = ImportedTensor::new(capsule::consume(capsule)?)?;
    let on_device = !tensor.descriptor().device().kind.host_accessible();
    if on_device && request.stream != StreamRequest::Omitted {
        return Err(BridgeError::CapsuleCannotOrderStream);
    }
    check_result(&tensor, || "the capsule".into(), request, request.device)?;
    Ok(tensor)
}

/// Imports through the Python protocol: `__dlpack_device__` when a stream is asked for, then
/// `__dlpack__`. `host_memory`: the type's tensors are on the host by construction.
fn import_through_dlpack(
    object: &Bound<'_, PyAny>,
    request: &ImportRequest,
    host_memory: bool,
) -> BridgeResult<ImportedTensor> {
    let producer_device = match request.stream {
        StreamRequest::Omitted => None,
        _ => dlpack_call::device_of(object)?,
    };
    // Memory that is on the host by construction needs no request for the host (see
    // [`numpy`]); `check_result` still holds the result to it.
    let asked = ImportRequest {
        device: request
            .device
            .filter(|&wanted| !(host_memory && wanted == Device::CPU)),
        ..*request
    };
    let tensor_capsule = dlpack_call::call_dlpack(object, &asked, producer_device)?;
    let tensor = ImportedTensor::new(capsule::consume(&tensor_capsule)?)?;
    check_result(
        &tensor,
        || format!("{}.__dlpack__", names::of_object(object)),
        request,
        request.device.or(producer_device),
    )?;
    Ok(tensor)
}

/// Imports through the producer's C exchange API (see [`exchange_api`]), or answers
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
    let source = || format!("{}.__dlpack_c_exchange_api__", names::of_object(object));
    match device.kind {
        DeviceKind::Cpu => {}
        DeviceKind::Cuda | DeviceKind::CudaManaged => {
            if let Some(consumer) = request.stream.cuda_handle() {
                let Some(producer) =
                    api.current_work_stream(object.py(), || names::of_object(object), device)?
                else {
                    return Ok(None);
                };
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
        return Err(BridgeError::WrongDevice {
            producer: source(),
            found,
            wanted,
        });
    }
    if copy == Some(false) && tensor.descriptor().is_copied() {
        return Err(BridgeError::CopyNotAllowed { producer: source() });
    }
    // An empty tensor may carry any pointer (torch: null); there is nothing to check.
    if found.kind.is_cuda() && tensor.descriptor().element_count() > 0 {
        rsdlpack::cuda::pointer::check_pointer(tensor.descriptor())?;
    }
    Ok(())
}
