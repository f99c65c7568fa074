//! The exporter: a Python object with `__dlpack__` and `__dlpack_device__` over a tensor that
//! Rust owns (a Julia array's root, a copy buffer, a tensor from another producer).
//!
//! Every `__dlpack__` call hands out a new managed tensor holding a reference to the source, so
//! the source lives until the exporter and every consumer are done with it. Capsules nobody
//! consumes are freed by their destructor (see [`crate::protocol::capsule`]). What each call
//! hands out is the core's decision ([`rsdlpack::export::plan`]); this module carries it out.
//!
//! One share or export allocates the Python object and one source: the descriptor, what keeps
//! the memory alive and room for a capsule's header, in one `Arc` allocation built where it
//! lies ([`Source`]). A capsule of the source's own memory takes that room while it is free
//! ([`rsdlpack::described::HeaderSlot`]), so that an exporter consumed once allocates nothing
//! more; a second capsule alive at the same time gets an allocation of its own.
//!
//! The object's layout is defined here ([`ExporterObject`]); its type and Python face
//! (`__dlpack__`, `__dlpack_c_exchange_api__`, …) are in [`super::methods`], above the modules
//! that implement them, which use the exporter defined here.

use super::roots::JuliaRoot;
use crate::error::BridgeResult;
use crate::protocol::capsule::into_capsule;
use crate::protocol::request::{ExportRequest, VersionRequest};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use rsdlpack::copy::{AlignedBuffer, materialize};
use rsdlpack::cuda::order::ReadyEvent;
use rsdlpack::described::{
    DescribingOwner, HeaderSlot, SlotOwner, export_legacy_described, export_legacy_in_slot,
    export_versioned_described, export_versioned_in_slot,
};
use rsdlpack::dlpark::Managed;
use rsdlpack::dlpark::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLPackVersion};
use rsdlpack::export::plan::{
    self, Capsule, Memory, exchange_api_stream, ordered_by_streams, plan_export,
};
use rsdlpack::{ImportedTensor, IndexOrder, ManagedTensor, TensorDescriptor};
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, Ordering};

/// The tensor behind an exporter, what keeps its memory alive, and room for one capsule's
/// header: one allocation (the exporter's `Arc`), shared by the exporter and its capsules, and
/// built where it lies (a descriptor is ~560 bytes).
struct Source {
    slot: HeaderSlot,
    descriptor: TensorDescriptor,
    /// Held for its drop.
    _memory: Keeper,
    /// For device memory: the point in the stream on which its producer wrote it, recorded
    /// when the exporter was made. Consumers' streams are ordered after it; the producer's
    /// stream itself is not used again (it may be gone by the time a consumer comes).
    /// `None` for other memory, and where no driver exists (ordering then fails as it would).
    ready: Option<ReadyEvent>,
}

/// What keeps a source's memory alive until the exporter and every capsule are gone.
enum Keeper {
    /// A tensor from another producer (or a copy): its deleter runs when the source drops.
    Tensor(#[allow(dead_code)] ManagedTensor),
    /// A Julia array: its root is released when the source drops.
    JuliaArray(#[allow(dead_code)] JuliaRoot),
}

/// A source being built in its `Arc`: its descriptor written first (where it will stay), the
/// rest by [`Self::finish`]. Dropped unfinished, it frees the allocation and drops nothing.
///
/// Written through the `Arc`'s pointer, which nothing else holds: `Arc::get_mut` would prove
/// that with an atomic compare-and-swap on each call, a visible part of a share.
struct Building {
    /// Invariant: the descriptor is initialised, the other fields are not; never cloned.
    uninit: Arc<std::mem::MaybeUninit<Source>>,
}

impl Building {
    #[inline]
    fn new() -> Self {
        let building = Self {
            uninit: Arc::new_uninit(),
        };
        // SAFETY: the fresh allocation is ours alone; the descriptor is written in place.
        unsafe { (&raw mut (*building.place()).descriptor).write(TensorDescriptor::empty()) };
        building
    }

    /// The source's place: `Arc::as_ptr` derives it from the allocation itself, not from a
    /// shared reference, and the `Arc` is the only one (never cloned), so writes through it
    /// race with nothing.
    #[inline]
    fn place(&self) -> *mut Source {
        Arc::as_ptr(&self.uninit).cast_mut().cast()
    }

    /// The descriptor, to describe the source where it lies.
    #[inline]
    fn descriptor(&mut self) -> &mut TensorDescriptor {
        // SAFETY: the descriptor is initialised (the invariant), and borrowed mutably through
        // `self`, which alone reaches the allocation (see `place`).
        unsafe { &mut (*self.place()).descriptor }
    }

    /// The source, kept alive by `memory`. `stream`: the `CUstream` device memory was written
    /// on (`None`: the legacy default); on error `memory` is dropped before returning.
    #[inline]
    fn finish(self, memory: Keeper, stream: Option<usize>) -> BridgeResult<Arc<Source>> {
        let place = self.place();
        // SAFETY: the descriptor is initialised (the invariant).
        let device = unsafe { (*place).descriptor.device() };
        let mut ready = None;
        if ordered_by_streams(device.kind) {
            // SAFETY: `stream` is the stream the exporter's creator named for this memory
            // (rsdlpack_py_export_with_stream's and rsdlpack_py_share's contracts) or the
            // legacy default stream (1).
            match unsafe { ReadyEvent::record(device.id, stream.unwrap_or(1)) } {
                Ok(recorded) => ready = Some(recorded),
                Err(rsdlpack::Error::NoCudaDriver) => {}
                Err(error) => return Err(error.into()),
            }
        }
        // SAFETY: the remaining fields are written in place (see `place`); with the descriptor
        // (the invariant) every field is then initialised.
        unsafe {
            (&raw mut (*place).slot).write(HeaderSlot::new());
            (&raw mut (*place)._memory).write(memory);
            (&raw mut (*place).ready).write(ready);
            Ok(self.uninit.assume_init())
        }
    }
}

// SAFETY: the descriptor and the slot are fields of the source, which lives in its `Arc`'s
// allocation and never changes once built.
unsafe impl SlotOwner for Source {
    fn descriptor(&self) -> &TensorDescriptor {
        &self.descriptor
    }
    fn slot(&self) -> &HeaderSlot {
        &self.slot
    }
}

/// What a capsule's managed tensor owns when the source's slot cannot serve it, with the
/// descriptor it restates: the header reads that descriptor in place (see
/// [`rsdlpack::described`]). Memory owners are held for their drop.
enum CapsuleOwner {
    /// The source itself, restated as it is (its slot taken by another capsule).
    Shared(Arc<Source>),
    /// The source, restated otherwise (IS_COPIED cleared).
    Restated(#[allow(dead_code)] Arc<Source>, Box<TensorDescriptor>),
    /// A private host copy of the source.
    Copy(#[allow(dead_code)] AlignedBuffer, Box<TensorDescriptor>),
    /// A private host copy of device memory, its descriptor inside.
    HostCopy(Box<rsdlpack::cuda::to_host::HostCopy>),
}

// SAFETY: every descriptor answered lives inside an `Arc` or a `Box` the owner holds (the
// source's own in its `Arc`), and nothing changes a descriptor once built: it stays put and
// unchanged however the owner moves.
unsafe impl DescribingOwner for CapsuleOwner {
    fn descriptor(&self) -> &TensorDescriptor {
        match self {
            Self::Shared(source) => &source.descriptor,
            Self::Restated(_, descriptor) | Self::Copy(_, descriptor) => descriptor,
            Self::HostCopy(host) => &host.descriptor,
        }
    }
}

/// What one export hands out the memory of: the source's own, or a private copy.
enum Carried {
    Source,
    Copy(CapsuleOwner),
}

/// A tensor offered to Python consumers through the DLPack protocol; in Python, an object of
/// type `rsdlpack.DLPackTensor` ([`ExporterObject`]).
pub struct Exporter {
    source: Arc<Source>,
}

/// An exporter's Python object: Python's object header, then the exporter. Its type is made by
/// [`super::methods`], which publishes it in [`TYPE`]: made by hand rather than by pyo3, whose
/// classes are made through the base type's `tp_new` and dropped through bookkeeping that
/// every share would pay for (BENCHMARKS.md, "Issue 29: share and export").
#[repr(C)]
pub(crate) struct ExporterObject {
    header: ffi::PyObject,
    exporter: Exporter,
}

/// The exporter type once built (null before): objects of this type, and only those (it allows
/// no subclasses), are [`ExporterObject`]s.
pub(super) static TYPE: AtomicPtr<ffi::PyTypeObject> = AtomicPtr::new(std::ptr::null_mut());

impl ExporterObject {
    pub(super) const SIZE: usize = size_of::<Self>();

    /// Drops the exporter inside `object` (its type's `tp_dealloc`, which frees the object).
    ///
    /// # Safety
    /// `object` is an exporter object whose reference count reached zero; it is not used
    /// again but to be freed.
    pub(super) unsafe fn drop_exporter(object: *mut ffi::PyObject) {
        // SAFETY: an exporter object (contract) holds an initialised exporter, dropped once.
        unsafe { std::ptr::drop_in_place(&raw mut (*object.cast::<Self>()).exporter) };
    }
}

impl Exporter {
    /// `object`'s exporter, when it is an exporter object.
    pub(crate) fn of_object<'a>(object: &'a Bound<'_, PyAny>) -> Option<&'a Self> {
        let ty = TYPE.load(Ordering::Acquire);
        // SAFETY: a live object's header.
        let ours = !ty.is_null() && unsafe { ffi::Py_TYPE(object.as_ptr()) } == ty;
        // SAFETY: an object of the exporter type (just checked), alive as long as `object`.
        ours.then(|| unsafe { Self::of_receiver(object.as_ptr()) })
    }

    /// The exporter inside `object`.
    ///
    /// # Safety
    /// `object` is a live exporter object (a method's receiver, which its method descriptor
    /// checked), alive for `'a`.
    pub(crate) unsafe fn of_receiver<'a>(object: *mut ffi::PyObject) -> &'a Self {
        // SAFETY: an exporter object (contract) holds an initialised exporter.
        unsafe { &(*object.cast::<ExporterObject>()).exporter }
    }

    /// A new exporter object over `self`, of the exporter type `ty`.
    ///
    /// # Safety
    /// `ty` is the exporter type ([`TYPE`]'s).
    pub(super) unsafe fn into_object_of<'py>(
        self,
        py: Python<'py>,
        ty: *mut ffi::PyTypeObject,
    ) -> PyResult<Bound<'py, PyAny>> {
        // SAFETY: `ty` is a live heap type (contract); its `tp_alloc` is this generic one (a
        // type without garbage-collector support), which zeroes the object, sets its type
        // and reference count and takes a reference to the type.
        let raw = unsafe { ffi::PyType_GenericAlloc(ty, 0) };
        if raw.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: a fresh object of `ty`'s size, `ExporterObject::SIZE`: the exporter is
        // written where its layout puts it, and the new reference passes to the `Bound`.
        unsafe {
            (&raw mut (*raw.cast::<ExporterObject>()).exporter).write(self);
            Ok(Bound::from_owned_ptr(py, raw))
        }
    }

    /// A new exporter object over `self`, of the exporter type as built (for the C exchange
    /// API's `managed_tensor_to_py_object_no_sync`, which is reached through that type).
    pub(crate) fn into_object_of_built_type<'py>(
        self,
        py: Python<'py>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ty = TYPE.load(Ordering::Acquire);
        if ty.is_null() {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "rsdlpack.DLPackTensor has not been made yet",
            ));
        }
        // SAFETY: the exporter type, published once built.
        unsafe { self.into_object_of(py, ty) }
    }
    /// A producer's tensor, validated where the exporter keeps it; on error it is released
    /// before returning. `stream`: for device tensors, the producer's stream (see [`Source`]).
    pub fn of_tensor(tensor: ManagedTensor, stream: Option<usize>) -> BridgeResult<Self> {
        let mut building = Building::new();
        if let Err(error) = tensor.describe_into(building.descriptor()) {
            drop(tensor);
            return Err(error.into());
        }
        Ok(Self {
            source: building.finish(Keeper::Tensor(tensor), stream)?,
        })
    }

    /// A tensor imported already (its descriptor validated then).
    pub fn new(tensor: ImportedTensor, stream: Option<usize>) -> BridgeResult<Self> {
        let mut building = Building::new();
        *building.descriptor() = *tensor.descriptor();
        let memory = Keeper::Tensor(tensor.into_managed());
        Ok(Self {
            source: building.finish(memory, stream)?,
        })
    }

    /// A Julia array kept alive by `root` (released on error too), which `describe` writes
    /// over the descriptor where the exporter keeps it
    /// ([`TensorDescriptor::julia_layout_into`]).
    #[inline]
    pub fn of_julia_array(
        root: JuliaRoot,
        stream: Option<usize>,
        describe: impl FnOnce(&mut TensorDescriptor) -> BridgeResult<()>,
    ) -> BridgeResult<Self> {
        let mut building = Building::new();
        if let Err(error) = describe(building.descriptor()) {
            drop(root);
            return Err(error);
        }
        Ok(Self {
            source: building.finish(Keeper::JuliaArray(root), stream)?,
        })
    }

    /// What `__dlpack__` answers for `request` (see [`super::dlpack_method`]).
    #[inline]
    pub(crate) fn dlpack<'py>(
        &self,
        py: Python<'py>,
        request: &ExportRequest,
    ) -> BridgeResult<Bound<'py, PyCapsule>> {
        crate::python::release::drain(py, crate::python::release::Wait::No);
        let plan = plan_export(&self.facts(), request)?;
        match plan.capsule {
            Capsule::Versioned { minor } => into_capsule(py, self.versioned(plan.memory, minor)?),
            Capsule::Legacy => into_capsule(py, self.legacy(plan.memory)?),
        }
    }

    /// The validated tensor behind this exporter.
    pub(crate) fn descriptor(&self) -> &rsdlpack::TensorDescriptor {
        &self.source.descriptor
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
        self.versioned(plan.memory, DLPackVersion::CURRENT.minor)
    }

    /// A versioned tensor over `memory`, declaring 1.`minor`: the source's memory in its slot
    /// while that is free.
    fn versioned(
        &self,
        memory: Memory,
        minor: u32,
    ) -> BridgeResult<Managed<DLManagedTensorVersioned>> {
        let owner = match self.carry_out(memory)? {
            Carried::Source => match export_versioned_in_slot(&self.source, minor)? {
                Some(tensor) => return Ok(tensor),
                None => self.shared(),
            },
            Carried::Copy(owner) => owner,
        };
        Ok(export_versioned_described(owner, minor)?)
    }

    /// [`Self::versioned`] in the legacy ABI.
    fn legacy(&self, memory: Memory) -> BridgeResult<Managed<DLManagedTensor>> {
        let owner = match self.carry_out(memory)? {
            Carried::Source => match export_legacy_in_slot(&self.source)? {
                Some(tensor) => return Ok(tensor),
                None => self.shared(),
            },
            Carried::Copy(owner) => owner,
        };
        Ok(export_legacy_described(owner)?)
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

    /// The memory of one export, as [`plan_export`] decided: the source itself (its consumer's
    /// stream ordered after the producer's, for CUDA memory), or a host copy.
    fn carry_out(&self, memory: Memory) -> BridgeResult<Carried> {
        let descriptor = self.descriptor();
        match memory {
            Memory::Shared { consumer_stream } => {
                if let Some(consumer) = consumer_stream {
                    self.order_before(consumer)?;
                }
                Ok(Carried::Source)
            }
            Memory::HostCopy => {
                // SAFETY: the source's memory is alive (we own it) and host-readable (the plan
                // copies only such memory; materialize refuses other devices). Holders of
                // earlier capsules may write it concurrently: DLPack leaves synchronising
                // writers of shared memory to its users, and the copy moves plain bytes, so a
                // racing writer yields a mix of old and new values, never invalid ones.
                let buffer = unsafe { materialize(descriptor, IndexOrder::Producer) }?;
                let spec = Box::new(descriptor.copied_at(buffer.as_ptr() as usize));
                Ok(Carried::Copy(CapsuleOwner::Copy(buffer, spec)))
            }
            Memory::DeviceToHost => {
                if self.source.ready.is_none() {
                    rsdlpack::cuda::driver()?;
                }
                // SAFETY: the source's device memory is alive (we own it).
                let host = unsafe {
                    rsdlpack::cuda::to_host::copy_to_host(descriptor, self.source.ready.as_ref())
                }?;
                Ok(Carried::Copy(CapsuleOwner::HostCopy(Box::new(host))))
            }
        }
    }

    /// An owner over the source itself, for a capsule the slot cannot hold. Several capsules
    /// share the memory, so none may claim IS_COPIED (a private copy), whatever the source
    /// said.
    fn shared(&self) -> CapsuleOwner {
        let source = Arc::clone(&self.source);
        // The source's own unless the flag must change.
        if self.descriptor().is_copied() {
            let restated = Box::new(self.descriptor().with_is_copied(false));
            CapsuleOwner::Restated(source, restated)
        } else {
            CapsuleOwner::Shared(source)
        }
    }
}
