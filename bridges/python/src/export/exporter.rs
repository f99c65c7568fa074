//! The exporter: a Python object with `__dlpack__` and `__dlpack_device__` over a tensor that
//! Rust owns (a Julia array's root, a copy buffer, a tensor from another producer).
//!
//! Every `__dlpack__` call hands out a new managed tensor whose owner shares the source, so
//! the source lives until the exporter and every consumer are done with it. Capsules nobody
//! consumes are freed by their destructor (see [`crate::protocol::capsule`]). What each call
//! hands out is the core's decision ([`rsdlpack::export::plan`]); this module carries it out.
//!
//! The type's Python face (`__dlpack__`, `__dlpack_c_exchange_api__`, …) is in
//! [`super::methods`], above the modules that implement it, which use the type defined here.

use super::roots::JuliaRoot;
use crate::error::BridgeResult;
use crate::protocol::capsule::into_capsule;
use crate::protocol::request::{ExportRequest, VersionRequest};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use rsdlpack::copy::{AlignedBuffer, materialize};
use rsdlpack::cuda::order::ReadyEvent;
use rsdlpack::dlpark::Managed;
use rsdlpack::dlpark::ffi::{DLManagedTensorVersioned, DLPackVersion};
use rsdlpack::export::described::{
    DescribingOwner, export_legacy_described, export_versioned_described,
};
use rsdlpack::export::plan::{
    self, Capsule, Memory, exchange_api_stream, ordered_by_streams, plan_export,
};
use rsdlpack::{ImportedTensor, IndexOrder, TensorDescriptor};
use std::sync::Arc;

/// The tensor behind an exporter, and what keeps its memory alive.
struct Source {
    described: Described,
    /// For device memory: the point in the stream on which its producer wrote it, recorded
    /// when the exporter was made. Consumers' streams are ordered after it; the producer's
    /// stream itself is not used again (it may be gone by the time a consumer comes).
    /// `None` for other memory, and where no driver exists (ordering then fails as it would).
    ready: Option<ReadyEvent>,
}

/// A source's descriptor with what keeps its memory alive until the exporter and every capsule
/// are gone.
enum Described {
    /// A tensor from another producer (or a copy): its deleter runs when the source drops.
    Tensor(ImportedTensor),
    /// A Julia array: its root is released when the source drops. Held directly, not inside a
    /// managed tensor nobody would see.
    JuliaArray {
        descriptor: Box<TensorDescriptor>,
        /// Held for its drop only.
        _root: JuliaRoot,
    },
}

impl Source {
    /// `stream`: the `CUstream` device memory was written on (`None`: the legacy default).
    fn new(described: Described, stream: Option<usize>) -> BridgeResult<Self> {
        let mut source = Self {
            described,
            ready: None,
        };
        let device = source.descriptor().device();
        if ordered_by_streams(device.kind) {
            // SAFETY: `stream` is the stream the exporter's creator named for this memory
            // (rsdlpack_py_export_with_stream's and rsdlpack_py_share's contracts) or the
            // legacy default stream (1).
            match unsafe { ReadyEvent::record(device.id, stream.unwrap_or(1)) } {
                Ok(ready) => source.ready = Some(ready),
                Err(rsdlpack::Error::NoCudaDriver) => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(source)
    }

    fn descriptor(&self) -> &TensorDescriptor {
        match &self.described {
            Described::Tensor(tensor) => tensor.descriptor(),
            Described::JuliaArray { descriptor, .. } => descriptor,
        }
    }
}

/// What a capsule's managed tensor owns, with the descriptor it restates: the header reads
/// that descriptor in place (see [`rsdlpack::export::described`]). Memory owners are held for their
/// drop.
enum CapsuleOwner {
    /// The source itself, restated as it is.
    Shared(Arc<Source>),
    /// The source, restated otherwise (IS_COPIED cleared).
    Restated(#[allow(dead_code)] Arc<Source>, Box<TensorDescriptor>),
    /// A private host copy of the source.
    Copy(#[allow(dead_code)] AlignedBuffer, Box<TensorDescriptor>),
    /// A private host copy of device memory, its descriptor inside.
    HostCopy(Box<rsdlpack::cuda::to_host::HostCopy>),
}

// SAFETY: every descriptor answered lives behind an `Arc` or a `Box` the owner holds (the
// source's own is boxed in its `ImportedTensor` or beside its Julia root), and nothing
// changes a descriptor once built: it stays put and unchanged however the owner moves.
unsafe impl DescribingOwner for CapsuleOwner {
    fn descriptor(&self) -> &TensorDescriptor {
        match self {
            Self::Shared(source) => source.descriptor(),
            Self::Restated(_, descriptor) | Self::Copy(_, descriptor) => descriptor,
            Self::HostCopy(host) => &host.descriptor,
        }
    }
}

/// A tensor offered to Python consumers through the DLPack protocol.
#[pyclass(frozen, name = "DLPackTensor", module = "rsdlpack")]
pub struct Exporter {
    source: Arc<Source>,
}

impl Exporter {
    /// `stream`: for device tensors, the producer's stream (see [`Source`]).
    pub fn new(tensor: ImportedTensor, stream: Option<usize>) -> BridgeResult<Self> {
        Ok(Self {
            source: Arc::new(Source::new(Described::Tensor(tensor), stream)?),
        })
    }

    /// A Julia array described by `descriptor`, kept alive by `root`.
    pub fn of_julia_array(
        descriptor: Box<TensorDescriptor>,
        root: JuliaRoot,
        stream: Option<usize>,
    ) -> BridgeResult<Self> {
        let described = Described::JuliaArray {
            descriptor,
            _root: root,
        };
        Ok(Self {
            source: Arc::new(Source::new(described, stream)?),
        })
    }

    /// What `__dlpack__` answers for `request` (see [`super::dlpack_method`]).
    pub(crate) fn dlpack<'py>(
        &self,
        py: Python<'py>,
        request: &ExportRequest,
    ) -> BridgeResult<Bound<'py, PyCapsule>> {
        crate::python::release::drain(py, crate::python::release::Wait::No);
        self.export(py, request)
    }

    fn export<'py>(
        &self,
        py: Python<'py>,
        request: &ExportRequest,
    ) -> BridgeResult<Bound<'py, PyCapsule>> {
        let plan = plan_export(&self.facts(), request)?;
        let owner = self.carry_out(plan.memory)?;
        match plan.capsule {
            Capsule::Versioned { minor } => {
                into_capsule(py, export_versioned_described(owner, minor)?)
            }
            Capsule::Legacy => into_capsule(py, export_legacy_described(owner)?),
        }
    }

    /// The validated tensor behind this exporter.
    pub(crate) fn descriptor(&self) -> &rsdlpack::TensorDescriptor {
        self.source.descriptor()
    }

    /// What [`plan_export`] needs to know about the source.
    fn facts(&self) -> plan::Source {
        let d = self.descriptor();
        plan::Source {
            device: d.device(),
            element: d.element(),
            read_only: d.read_only(),
        }
    }

    /// What `__dlpack__(max_version=(1, 3))` would hand out, as a managed tensor (for the C
    /// exchange API, [`super::exchange_api`]). Memory a stream orders is made ready on the
    /// legacy default stream, which is what that API's `current_work_stream` reports for it.
    pub(crate) fn managed_no_sync(&self) -> BridgeResult<Managed<DLManagedTensorVersioned>> {
        let stream = exchange_api_stream(self.descriptor().device().kind);
        let request = ExportRequest {
            stream,
            version: VersionRequest::Versioned {
                minor: DLPackVersion::CURRENT.minor,
            },
            device: None,
            copy: None,
        };
        let plan = plan_export(&self.facts(), &request)?;
        let owner = self.carry_out(plan.memory)?;
        Ok(export_versioned_described(
            owner,
            DLPackVersion::CURRENT.minor,
        )?)
    }

    /// Orders the legacy default stream after the stream that wrote a CUDA or managed source
    /// (an event, no host wait); nothing for other devices.
    pub(crate) fn ready_on_default_stream(&self) -> BridgeResult<()> {
        match exchange_api_stream(self.descriptor().device().kind).cuda_handle() {
            Some(stream) => self.order_before(stream),
            None => Ok(()),
        }
    }

    /// Makes `consumer` (1, 2 or a live `CUstream` of the source's device) wait for the
    /// producer's writes.
    fn order_before(&self, consumer: usize) -> BridgeResult<()> {
        match &self.source.ready {
            // SAFETY: `consumer` is the stream the DLPack consumer will use, which the protocol
            // requires to be live on this device (or the legacy default stream).
            Some(ready) => Ok(unsafe { ready.order_before(consumer) }?),
            // Recorded for all memory streams order, except without a driver: that's the answer.
            None => Ok(rsdlpack::cuda::driver()?),
        }
    }

    /// The owner of one export, as [`plan_export`] decided: the source itself (its consumer's
    /// stream ordered after the producer's, for CUDA memory), or a host copy.
    fn carry_out(&self, memory: Memory) -> BridgeResult<CapsuleOwner> {
        let descriptor = self.descriptor();
        match memory {
            Memory::Shared { consumer_stream } => {
                if let Some(consumer) = consumer_stream {
                    self.order_before(consumer)?;
                }
                Ok(self.shared())
            }
            Memory::HostCopy => {
                // SAFETY: the source's memory is alive (we own it) and host-readable (the plan
                // copies only such memory; materialize refuses other devices). Holders of
                // earlier capsules may write it concurrently: DLPack leaves synchronising
                // writers of shared memory to its users, and the copy moves plain bytes, so a
                // racing writer yields a mix of old and new values, never invalid ones.
                let buffer = unsafe { materialize(descriptor, IndexOrder::Producer) }?;
                let spec = Box::new(descriptor.copied_at(buffer.as_ptr() as usize));
                Ok(CapsuleOwner::Copy(buffer, spec))
            }
            Memory::DeviceToHost => {
                if self.source.ready.is_none() {
                    rsdlpack::cuda::driver()?;
                }
                // SAFETY: the source's device memory is alive (we own it).
                let host = unsafe {
                    rsdlpack::cuda::to_host::copy_to_host(descriptor, self.source.ready.as_ref())
                }?;
                Ok(CapsuleOwner::HostCopy(Box::new(host)))
            }
        }
    }

    /// A capsule over the source itself. Several capsules share the memory, so none may claim
    /// IS_COPIED (a private copy), whatever the source said.
    fn shared(&self) -> CapsuleOwner {
        let source = Arc::clone(&self.source);
        // The source's own unless the flag must change: this is every zero-copy export.
        if self.descriptor().is_copied() {
            let restated = Box::new(self.descriptor().with_is_copied(false));
            CapsuleOwner::Restated(source, restated)
        } else {
            CapsuleOwner::Shared(source)
        }
    }
}
