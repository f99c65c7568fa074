//! Julia arrays shared straight into a consumer's type through its DLPack C exchange API.
//!
//! `share(A, torch.Tensor)`: the array's tensor goes to the table's
//! `managed_tensor_to_py_object_no_sync`, which makes the consumer's object over it with no
//! Python call — where `share(A, torch.from_dlpack)` makes an exporter, and torch calls its
//! `__dlpack__` and parses its arguments. The decisions are the exporter's:
//! - CUDA memory is ordered, with an event, after the stream the array was written on, on the
//!   consumer's current work stream (the table's `current_work_stream`; the legacy default
//!   stream for a table without one), as `__dlpack__(stream=...)` orders it;
//! - its release is ordered after that stream in turn: the consumer (torch) calls the deleter
//!   without waiting for its work, so the Julia root comes back only once an event recorded
//!   there at the release has completed, through the queue of pending releases (see
//!   [`super::roots::NotedRoot`]); host memory's root comes back at once;
//! - the tensor declares the newest minor version both sides know (and is refused if its
//!   element type needs a newer one);
//! - a read-only array is refused: a table has no way to say that it keeps DLPack's READ_ONLY
//!   flag, and torch's does not (its tensors are always writable).
//!
//! The object must be of the type asked for (a subclass inheriting torch's table gets a plain
//! `torch.Tensor` from it, which is refused by name).

use super::roots::{ConsumerFence, JuliaRoot, NotedRoot};
use crate::error::{BridgeError, BridgeResult};
use crate::import::exchange_api::ExchangeApi;
use crate::import::type_info::type_info_of;
use crate::python::names;
use pyo3::prelude::*;
use pyo3::types::PyType;
use rsdlpack::TensorDescriptor;
use rsdlpack::cuda::fence::FenceStream;
use rsdlpack::export::plan::{exchange_api_release_stream, ordered_by_streams};
use std::sync::atomic::Ordering;

/// An object of type `ty` over the array `descriptor` describes, which root `root` keeps
/// alive until the object's tensor is released. `stream` is the CUDA stream the array was
/// written on (the legacy default stream when `None`).
pub fn share_into<'py>(
    ty: &Bound<'py, PyType>,
    descriptor: &TensorDescriptor,
    root: JuliaRoot,
    stream: Option<usize>,
) -> BridgeResult<Bound<'py, PyAny>> {
    let api = type_info_of(ty)?
        .api
        .filter(ExchangeApi::makes_objects)
        .ok_or_else(|| BridgeError::NoObjectMaker {
            type_name: type_name(ty),
        })?;
    if descriptor.read_only() {
        return Err(BridgeError::ReadOnlyShareInto {
            type_name: type_name(ty),
        });
    }
    // The consumer's stream, named now: an alias means the context current at the share.
    let fence = order_for_consumer(ty, api, descriptor, stream)?.map(|stream| {
        Box::new(ConsumerFence {
            descriptor: *descriptor,
            stream: FenceStream::named_now(stream),
        })
    });
    let (_, minor) = api.version();
    // The flag is this call's: a table may run the deleter on another thread before failing.
    // SAFETY: the fence's stream is the consumer's current work stream, which it works on the
    // memory on until it releases it (the exchange API's contract).
    let (noted, released) = unsafe { NotedRoot::new(root, fence) };
    let tensor = rsdlpack::export::export_versioned(descriptor, noted, minor)?;
    let object = api.managed_tensor_to_py_object(
        ty.py(),
        || type_name(ty),
        tensor,
        || released.load(Ordering::Acquire),
    )?;
    if !object.is_instance(ty).unwrap_or(false) {
        return Err(BridgeError::ObjectOfOtherType {
            type_name: type_name(ty),
            made: type_name(&object.get_type()),
        });
    }
    Ok(object)
}

/// For CUDA memory: the consumer's current work stream waits (an event, no host wait) for the
/// stream the array was written on. Returns the consumer's stream (a `CUstream` value), which
/// the array's release is ordered after in turn
/// ([`rsdlpack::export::plan::exchange_api_release_stream`]), or `None` for memory no stream
/// orders.
fn order_for_consumer(
    ty: &Bound<'_, PyType>,
    api: ExchangeApi,
    descriptor: &TensorDescriptor,
    stream: Option<usize>,
) -> BridgeResult<Option<usize>> {
    let device = descriptor.device();
    if !ordered_by_streams(device.kind) {
        return Ok(None);
    }
    let current = api.current_work_stream(ty.py(), || type_name(ty), device)?;
    let Some(consumer) = exchange_api_release_stream(device.kind, current) else {
        return Ok(None);
    };
    let producer = stream.unwrap_or(1);
    // SAFETY: `producer` is the stream the array was written on (the share entry points'
    // contract) or the legacy default stream; `consumer` is the consumer's current stream on
    // the array's device, live by the API's contract.
    unsafe { rsdlpack::cuda::order::order_streams(device.id, producer, consumer) }?;
    Ok(Some(consumer))
}

/// `module.qualname`, as a user writes the type.
fn type_name(ty: &Bound<'_, PyType>) -> String {
    names::with_module(ty, true)
}
