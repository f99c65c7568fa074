//! The exporter: a Python object with `__dlpack__` and `__dlpack_device__` over a tensor that
//! Rust owns (a Julia array's root, a copy buffer, a tensor from another producer).
//!
//! Every `__dlpack__` call hands out a new managed tensor whose owner shares the source, so
//! the source lives until the exporter and every consumer are done with it. Capsules nobody
//! consumes are freed by their destructor (see [`crate::capsule`]).
//!
//! The type also offers the DLPack 1.3 C exchange API as the class attribute
//! `__dlpack_c_exchange_api__` (see [`crate::exporter_api`]).

use crate::capsule::into_capsule;
use crate::error::{BridgeError, BridgeResult};
use crate::request::{
    StreamRequest, VersionRequest, copy_from_python, device_from_python, stream_from_python,
};
use crate::roots::JuliaRoot;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use rsdlpack::copy::{AlignedBuffer, materialize};
use rsdlpack::dlpark::Managed;
use rsdlpack::dlpark::ffi::{DLManagedTensorVersioned, DLPackVersion};
use rsdlpack::export::{export_legacy, export_versioned};
use rsdlpack::{DeviceKind, ImportedTensor, IndexOrder, ManagedTensor, TensorDescriptor};
use std::borrow::Cow;
use std::sync::Arc;

/// The tensor behind an exporter, and what keeps its memory alive.
struct Source {
    descriptor: Box<TensorDescriptor>,
    /// Held for its drop only.
    _keeper: Keeper,
    /// For device memory: the stream on which its producer wrote it (`CUstream`; 1 is the
    /// legacy default stream). Consumers' streams are ordered after it.
    stream: Option<usize>,
}

/// What keeps a source's memory alive until the exporter and every capsule are gone.
enum Keeper {
    /// A tensor from another producer (or a copy): its deleter runs when the source drops.
    Tensor(#[allow(dead_code)] ManagedTensor),
    /// A Julia array: its root is released when the source drops. Held directly, not inside a
    /// managed tensor nobody would see.
    JuliaRoot(#[allow(dead_code)] JuliaRoot),
}

/// What a capsule's managed tensor owns: the shared source, or a private copy of it.
enum CapsuleOwner {
    Shared(#[allow(dead_code)] Arc<Source>),
    Copy(#[allow(dead_code)] AlignedBuffer),
    HostCopy(#[allow(dead_code)] Box<rsdlpack::cuda::to_host::HostCopy>),
}

/// A tensor offered to Python consumers through the DLPack protocol.
#[pyclass(frozen, name = "DLPackTensor", module = "rsdlpack")]
pub struct Exporter {
    source: Arc<Source>,
}

impl Exporter {
    /// `stream`: for device tensors, the producer's stream (see [`Source`]).
    pub fn new(tensor: ImportedTensor, stream: Option<usize>) -> Self {
        let (managed, descriptor) = tensor.into_parts();
        Self {
            source: Arc::new(Source {
                descriptor,
                _keeper: Keeper::Tensor(managed),
                stream,
            }),
        }
    }

    /// A Julia array described by `descriptor`, kept alive by `root`.
    pub fn of_julia_array(
        descriptor: TensorDescriptor,
        root: JuliaRoot,
        stream: Option<usize>,
    ) -> Self {
        Self {
            source: Arc::new(Source {
                descriptor: Box::new(descriptor),
                _keeper: Keeper::JuliaRoot(root),
                stream,
            }),
        }
    }

    fn export<'py>(
        &self,
        py: Python<'py>,
        stream: StreamRequest,
        version: VersionRequest,
        device: Option<rsdlpack::Device>,
        copy: Option<bool>,
    ) -> BridgeResult<Bound<'py, PyCapsule>> {
        let (spec, owner) = self.prepare(stream, device, copy)?;
        match version {
            VersionRequest::Versioned { minor } => {
                let tensor = export_versioned(&spec, owner, minor)?;
                into_capsule(py, tensor)
            }
            VersionRequest::Legacy => into_capsule(py, export_legacy(&spec, owner)?),
        }
    }

    /// The validated tensor behind this exporter.
    pub(crate) fn descriptor(&self) -> &rsdlpack::TensorDescriptor {
        &self.source.descriptor
    }

    /// What `__dlpack__(max_version=(1, 3))` would hand out, as a managed tensor (for the C
    /// exchange API, [`crate::exporter_api`]). Device memory is made ready on the legacy
    /// default stream, which is what that API's `current_work_stream` reports for it.
    pub(crate) fn managed_no_sync(&self) -> BridgeResult<Managed<DLManagedTensorVersioned>> {
        let stream = match self.descriptor().device().kind {
            DeviceKind::Cuda => StreamRequest::LegacyDefault,
            _ => StreamRequest::Omitted,
        };
        let (spec, owner) = self.prepare(stream, None, None)?;
        Ok(export_versioned(
            &spec,
            owner,
            DLPackVersion::CURRENT.minor,
        )?)
    }

    /// Orders the legacy default stream after the stream that wrote a CUDA source (an event,
    /// no host wait); nothing for other devices.
    pub(crate) fn ready_on_default_stream(&self) -> BridgeResult<()> {
        let descriptor = self.descriptor();
        if descriptor.device().kind != DeviceKind::Cuda {
            return Ok(());
        }
        let producer = self.source.stream.unwrap_or(1);
        // SAFETY: `producer` is the stream the exporter's creator named for this memory
        // (rsdlpack_py_export_with_stream's contract) or the legacy default stream (1).
        Ok(unsafe { rsdlpack::cuda::order::order_streams(descriptor.device().id, producer, 1) }?)
    }

    /// The spec and owner of one export (see `__dlpack__`).
    fn prepare(
        &self,
        stream: StreamRequest,
        device: Option<rsdlpack::Device>,
        copy: Option<bool>,
    ) -> BridgeResult<(Cow<'_, TensorDescriptor>, CapsuleOwner)> {
        let descriptor = &*self.source.descriptor;
        // Only device → host copies are offered; any other device change is refused here.
        let host_copy_of_device = descriptor.device().kind == DeviceKind::Cuda;
        if let Some(wanted) = device.filter(|&d| {
            d != descriptor.device() && !(host_copy_of_device && d.kind == DeviceKind::Cpu)
        }) {
            return Err(BridgeError::Buffer(format!(
                "cannot export a tensor on {:?} to dl_device {wanted:?}",
                descriptor.device()
            )));
        }
        match descriptor.device().kind {
            DeviceKind::Cuda => self.export_device(stream, device, copy),
            _ => self.export_host(stream, copy),
        }
    }
}

impl Exporter {
    /// A capsule over the source itself. Several capsules share the memory, so none may claim
    /// IS_COPIED (a private copy), whatever the source said.
    fn shared(&self) -> (Cow<'_, TensorDescriptor>, CapsuleOwner) {
        let source = &*self.source.descriptor;
        // Borrowed unless the flag must change: a descriptor is large, and this is every
        // zero-copy export.
        let spec = if source.is_copied() {
            Cow::Owned(source.with_is_copied(false))
        } else {
            Cow::Borrowed(source)
        };
        (spec, CapsuleOwner::Shared(Arc::clone(&self.source)))
    }

    fn export_host(
        &self,
        stream: StreamRequest,
        copy: Option<bool>,
    ) -> BridgeResult<(Cow<'_, TensorDescriptor>, CapsuleOwner)> {
        let descriptor = &*self.source.descriptor;
        if descriptor.device().kind == DeviceKind::Cpu
            && !matches!(stream, StreamRequest::Omitted | StreamRequest::NoSync)
        {
            return Err(BridgeError::Argument(format!(
                "stream must be None for a CPU tensor, got {:?}",
                stream.to_value()
            )));
        }
        if copy != Some(true) {
            return Ok(self.shared());
        }
        // SAFETY: the source's memory is alive (we own it) and host-readable (materialize
        // refuses other devices). Holders of earlier capsules may write it concurrently: DLPack
        // leaves synchronising writers of shared memory to its users, and the copy moves plain
        // bytes, so a racing writer yields a mix of old and new values, never invalid ones.
        let buffer = unsafe { materialize(descriptor, IndexOrder::Producer) }?;
        let spec = descriptor.copied_at(buffer.as_ptr() as usize);
        Ok((Cow::Owned(spec), CapsuleOwner::Copy(buffer)))
    }

    /// A CUDA tensor: zero-copy on its device with the consumer's stream ordered after the
    /// producer's (an event, no host wait), or a host copy for `dl_device=(CPU, 0)`.
    fn export_device(
        &self,
        stream: StreamRequest,
        device: Option<rsdlpack::Device>,
        copy: Option<bool>,
    ) -> BridgeResult<(Cow<'_, TensorDescriptor>, CapsuleOwner)> {
        let descriptor = &*self.source.descriptor;
        let producer = self.source.stream.unwrap_or(1);
        match device {
            Some(wanted) if wanted.kind == DeviceKind::Cpu => {
                if copy == Some(false) {
                    return Err(BridgeError::Buffer(format!(
                        "dl_device=(CPU, 0) needs a copy of this {:?} tensor but copy=False",
                        descriptor.device()
                    )));
                }
                // SAFETY: `producer` is the stream the exporter's creator named for this memory
                // (rsdlpack_py_export_with_stream's contract) or the legacy default stream.
                let host = unsafe { rsdlpack::cuda::to_host::copy_to_host(descriptor, producer) }?;
                let spec = host.descriptor;
                Ok((Cow::Owned(spec), CapsuleOwner::HostCopy(Box::new(host))))
            }
            _ if copy == Some(true) => Err(BridgeError::Buffer(
                "copy=True of device memory is not supported by this exporter; ask for \
                 dl_device=(CPU, 0) or copy on the consumer side"
                    .into(),
            )),
            _ => {
                if let Some(consumer) = stream.cuda_handle() {
                    // SAFETY: `producer` as above; `consumer` is the stream the DLPack consumer
                    // will use, which the protocol requires to be live on this device.
                    unsafe {
                        rsdlpack::cuda::order::order_streams(
                            descriptor.device().id,
                            producer,
                            consumer,
                        )
                    }?;
                }
                Ok(self.shared())
            }
        }
    }
}

#[pymethods]
impl Exporter {
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        copy: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        crate::release::drain(py);
        let stream = stream_from_python(stream.as_ref())?;
        let version = VersionRequest::from_python(max_version.as_ref())?;
        let device = device_from_python(dl_device.as_ref())?;
        let copy = copy_from_python(copy.as_ref())?;
        Ok(self.export(py, stream, version, device, copy)?)
    }

    /// The DLPack 1.3 C exchange API of this type (see [`crate::exporter_api`]).
    #[classattr]
    fn __dlpack_c_exchange_api__(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
        crate::exporter_api::capsule(py)
    }

    fn __dlpack_device__(&self) -> (u32, i32) {
        let device = self.source.descriptor.device().to_dlpack();
        (device.device_type.0, device.device_id)
    }

    fn __repr__(&self) -> String {
        let d = &*self.source.descriptor;
        format!(
            "rsdlpack.DLPackTensor(shape={:?}, strides={:?}, dtype={}, device={:?}, read_only={})",
            d.shape(),
            d.strides(),
            d.element().julia_name(),
            d.device(),
            d.read_only()
        )
    }
}
