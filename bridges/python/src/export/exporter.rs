//! The exporter: a Python object with `__dlpack__` and `__dlpack_device__` over a tensor that
//! Rust owns (a Julia array's root, a copy buffer, a tensor from another producer).
//!
//! Every `__dlpack__` call hands out a new managed tensor holding a reference to the source, so
//! the source lives until the exporter and every consumer are done with it. Capsules nobody
//! consumes are freed by their destructor (see [`crate::protocol::capsule`]). What each call
//! hands out is the core's decision ([`rsdlpack::export::plan`]); this module carries it out.
//!
//! A share or an export allocates once ([`ExporterObject`]): the Python object's header, a
//! count of its holders, the descriptor, what keeps the memory alive and room for a capsule's
//! header, built where they lie (a descriptor is ~560 bytes). A capsule of the source's own
//! memory takes that room while it is free ([`rsdlpack::export::described::HeaderSlot`]), so that an
//! exporter consumed once allocates nothing more; a second capsule alive at the same time gets
//! an allocation of its own. The Python object is one holder, each capsule another: the
//! allocation outlives the object while a consumer still holds a capsule's tensor, and whoever
//! lets go last (the object's `tp_dealloc` under the GIL, or a capsule's deleter on any thread)
//! drops the source and frees it. So the allocation is this crate's, never Python's.
//!
//! The object's type and Python face (`__dlpack__`, `__dlpack_c_exchange_api__`, …) are in
//! [`super::methods`], above the modules that implement them, which use the exporter defined
//! here.

use super::roots::JuliaRoot;
use crate::error::BridgeResult;
use crate::protocol::capsule::{into_capsule, releasing_unconsumed};
use crate::protocol::request::{ExportRequest, VersionRequest};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use rsdlpack::copy::{AlignedBuffer, materialize};
use rsdlpack::cuda::fence::FenceStream;
use rsdlpack::cuda::order::ReadyEvent;
use rsdlpack::dlpark::Managed;
use rsdlpack::dlpark::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLPackVersion};
use rsdlpack::export::described::{
    DescribingOwner, HeaderSlot, SlotOwner, export_legacy_described, export_legacy_in_slot,
    export_versioned_described, export_versioned_in_slot,
};
use rsdlpack::export::given_back::{GiveBack, give_back_after};
use rsdlpack::export::plan::{
    self, Capsule, Memory, exchange_api_stream, ordered_by_streams, plan_export,
};
use rsdlpack::release::ConsumerFences;
use rsdlpack::{ImportedTensor, IndexOrder, ManagedTensor, PendingRelease, TensorDescriptor};
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// An exporter's one allocation: its Python object (`rsdlpack.DLPackTensor`, whose layout
/// this is), the count of its holders, and the source.
///
/// Reached through [`ExporterRef`] (a pointer with the allocation's provenance), never freed
/// through a pointer derived from `&ExporterObject` (see [`SlotOwner`]).
#[repr(C)]
pub(crate) struct ExporterObject {
    /// Python's object header, written when the exporter becomes an object
    /// ([`Exporter::into_object_of`]); Python's alone from then on, under the GIL. In an
    /// `UnsafeCell`: Python writes the reference count while Rust holds `&ExporterObject`.
    header: UnsafeCell<MaybeUninit<ffi::PyObject>>,
    /// The Python object (or, before, the [`Exporter`] that will become it) and each capsule
    /// of the source's own memory.
    holders: AtomicUsize,
    slot: HeaderSlot,
    descriptor: TensorDescriptor,
    /// Held for its drop.
    _memory: Keeper,
    /// For device memory: the point in the stream on which its producer wrote it, recorded
    /// when the exporter was made. Consumers' streams are ordered after it; the producer's
    /// stream itself is not used again (it may be gone by the time a consumer comes).
    /// `None` for other memory, and where no driver exists (ordering then fails as it would).
    /// A consumer's captured graph may wait for it (an external-event node), so it goes with
    /// the memory to the memory's release ([`release_memory`]), never before.
    ready: Option<ReadyEvent>,
    /// What only memory that streams order (CUDA, managed) needs, the fences its consumers
    /// leave: `None` for other memory, whose exports pay nothing for it.
    ordered: Option<Box<Ordered>>,
    /// The stream the consumer of the capsule in the slot was handed the memory on: written by
    /// the export that claimed the slot (under the GIL), taken by that capsule's deleter
    /// before it frees the slot ([`SlotOwner::slot_released`]).
    slot_consumer: UnsafeCell<Option<FenceStream>>,
    /// The producer's stream, kept alive with the memory, when each export records its own
    /// event there ([`plan::ProducerReady::AtEachExport`]) rather than waiting for `ready`.
    producer: Option<usize>,
}

// SAFETY: the header is Python's, read and written only under the GIL; the count is atomic; the
// slot is `Sync` by itself; the descriptor never changes once built; the keeper and the event
// are `Send` and used only by their drop, which runs once, by the last holder; the fences and
// the views (in `ordered`) are behind locks. The slot's consumer stream is written only by the
// export that claimed the slot, after the claim and before its capsule is handed out, and
// taken only by that capsule's deleter: handing the capsule to its consumer (who calls the
// deleter, on whichever thread) orders the write before the take, not the slot's flag, which
// the claim stores Relaxed before the write. The deleter's Release store of the flag, after
// the take, orders the take before the next claim's Acquire load and write.
unsafe impl Sync for ExporterObject {}

/// What an exporter of memory that streams order keeps for its release.
struct Ordered {
    /// The fences the consumers' releases left, each recorded as its capsule was released:
    /// the memory's release waits for them (see [`release_memory`]).
    fences: ConsumerFences,
    /// The streams borrowed views (the C exchange API's `dltensor_from_py_object_no_sync`,
    /// valid while the object lives) were made ready on: fenced when the object's own hold is
    /// given back ([`ExporterObject::release_object`]).
    views: Mutex<Vec<FenceStream>>,
}

/// What keeps a source's memory alive until the exporter and every capsule are gone.
enum Keeper {
    /// A tensor from another producer (or a copy): its deleter runs when the source drops.
    Tensor(#[allow(dead_code)] ManagedTensor),
    /// A Julia array: its root is released when the source drops.
    JuliaArray(#[allow(dead_code)] JuliaRoot),
}

/// Gives the source's memory back (drops `memory`, and the producer's `ready` event with it)
/// once the work its consumers enqueued on it is complete: the fences their releases recorded,
/// each as its own tensor was released, and the release queued until they have completed
/// (see [`rsdlpack::export::given_back`]). Never waits and runs no Python (any thread: a
/// capsule's deleter runs where its consumer frees it); memory whose consumers recorded no
/// fence (host memory, none handed on a stream) is given back at once.
///
/// Device memory whose fences have all completed by then has nothing to wait for, but its
/// keeper is dropped here only where that may run: a Julia array's root anywhere (its drop
/// queues the id), a foreign tensor only on a thread that holds the GIL (its producer's
/// deleter may take it: CuPy's does). Elsewhere it goes through the queue of releases, as
/// every fenced release does, for the next bridge call holding the GIL.
fn release_memory(memory: Keeper, ready: Option<ReadyEvent>, ordered: Option<Box<Ordered>>) {
    // Host memory (the common case) has no fences: no lock taken for it.
    let Some(ordered) = ordered else {
        drop(memory);
        return drop(ready);
    };
    release_ordered(memory, ready, &ordered.fences);
}

/// [`release_memory`] for memory that streams order (out of line: host memory's release stays
/// short).
#[inline(never)]
fn release_ordered(memory: Keeper, ready: Option<ReadyEvent>, fences: &ConsumerFences) {
    // An unconsumed capsule's answer no stream asked for (its capsule named none) is cleared
    // before the keeper's drop, which may release other capsules' tensors.
    releasing_unconsumed();
    match give_back_after((memory, ready), fences) {
        GiveBack::Now((memory, ready)) => {
            if drops_here(&memory, crate::python::release::this_thread_holds_the_gil) {
                drop(memory);
                drop(ready);
            } else {
                queue(PendingRelease::unordered_owner(Box::new((memory, ready))));
            }
        }
        GiveBack::Queue(release) => queue(release),
    }
}

/// Whether `memory`, with nothing left to wait for, may be dropped on this thread: a Julia
/// array's root always (no Python runs), a foreign tensor where `holds_the_gil` says this
/// thread holds the GIL (asked only then).
fn drops_here(memory: &Keeper, holds_the_gil: impl FnOnce() -> bool) -> bool {
    match memory {
        Keeper::JuliaArray(_) => true,
        Keeper::Tensor(_) => holds_the_gil(),
    }
}

/// Queues a release of an exporter's memory (or, in a model test, hands it to the test).
fn queue(release: PendingRelease) {
    #[cfg(test)]
    let Some(release) = model_tests::catch_deferred(release) else {
        return;
    };
    crate::python::release::defer(release);
}

/// The exporter type once built (null before): objects of this type, and only those (it allows
/// no subclasses), are [`ExporterObject`]s.
pub(super) static TYPE: AtomicPtr<ffi::PyTypeObject> = AtomicPtr::new(std::ptr::null_mut());

/// A tensor offered to Python consumers through the DLPack protocol, not handed to Python yet:
/// it holds its allocation until it becomes a `rsdlpack.DLPackTensor` (`into_pyobject`, see
/// [`super::methods`]), or is dropped.
pub struct Exporter(NonNull<ExporterObject>);

// SAFETY: an exporter holds its allocation alone until it becomes a Python object, and the
// source inside is `Send` (see `ExporterObject`'s `Sync`).
unsafe impl Send for Exporter {}

impl Drop for Exporter {
    fn drop(&mut self) {
        // SAFETY: the exporter's hold, given back once.
        unsafe { ExporterObject::release(self.0.as_ptr()) };
    }
}

/// An exporter's allocation being built: the descriptor written first (where it will stay), the
/// rest by [`Self::finish`]. Dropped unfinished, it frees the allocation and drops nothing.
struct Building(NonNull<ExporterObject>);

impl Building {
    #[inline]
    fn new() -> Self {
        let place = Box::into_raw(Box::<ExporterObject>::new_uninit()).cast::<ExporterObject>();
        // SAFETY: the fresh allocation is ours alone; the descriptor is written in place.
        unsafe { (&raw mut (*place).descriptor).write(TensorDescriptor::empty()) };
        Self(NonNull::new(place).expect("a Box is never null"))
    }

    /// The descriptor, to describe the source where it lies.
    #[inline]
    fn descriptor(&mut self) -> &mut TensorDescriptor {
        // SAFETY: the descriptor is initialised, and borrowed mutably through `self`, which
        // alone reaches the allocation.
        unsafe { &mut (*self.0.as_ptr()).descriptor }
    }

    /// The exporter, its memory kept alive by `memory`. `stream`: the `CUstream` device memory
    /// was written on (`None`: the legacy default); on error `memory` is dropped before
    /// returning.
    #[inline]
    fn finish(self, memory: Keeper, stream: Option<usize>) -> BridgeResult<Exporter> {
        let place = self.0.as_ptr();
        // SAFETY: the descriptor is initialised.
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
        // SAFETY: the remaining fields but the header (written when the exporter becomes an
        // object) are written in place; the allocation passes to the exporter, its one holder.
        unsafe {
            (&raw mut (*place).holders).write(AtomicUsize::new(1));
            (&raw mut (*place).slot).write(HeaderSlot::new());
            (&raw mut (*place)._memory).write(memory);
            (&raw mut (*place).ready).write(ready);
            (&raw mut (*place).ordered).write(ordered_by_streams(device.kind).then(|| {
                Box::new(Ordered {
                    fences: ConsumerFences::new(),
                    views: Mutex::new(Vec::new()),
                })
            }));
            (&raw mut (*place).slot_consumer).write(UnsafeCell::new(None));
            (&raw mut (*place).producer).write(None);
        }
        let exporter = Exporter(self.0);
        std::mem::forget(self);
        Ok(exporter)
    }
}

impl Drop for Building {
    fn drop(&mut self) {
        // SAFETY: unfinished: nothing but the descriptor (plain data) was written, and the
        // allocation is `Box`'s, freed once here.
        drop(unsafe { Box::from_raw(self.0.as_ptr().cast::<MaybeUninit<ExporterObject>>()) });
    }
}

impl Exporter {
    /// A producer's tensor, validated where the exporter keeps it; on error it is released
    /// before returning. `stream`: for device tensors, the producer's stream (see
    /// [`ExporterObject`]'s `ready`).
    pub fn of_tensor(tensor: ManagedTensor, stream: Option<usize>) -> BridgeResult<Self> {
        let mut building = Building::new();
        if let Err(error) = tensor.describe_into(building.descriptor()) {
            drop(tensor);
            return Err(error.into());
        }
        building.finish(Keeper::Tensor(tensor), stream)
    }

    /// A tensor imported already (its descriptor validated then).
    pub fn new(tensor: ImportedTensor, stream: Option<usize>) -> BridgeResult<Self> {
        let mut building = Building::new();
        *building.descriptor() = *tensor.descriptor();
        building.finish(Keeper::Tensor(tensor.into_managed()), stream)
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
        building.finish(Keeper::JuliaArray(root), stream)
    }

    /// Makes each export record its own event on `stream` (the producer's, for device memory)
    /// instead of waiting for the one recorded when the exporter was made: writes enqueued
    /// there between the share and a consumer's `__dlpack__` are ordered too.
    ///
    /// # Safety
    /// `stream` is 1, 2 or a `CUstream` of the memory's device that stays live as long as the
    /// exporter's memory is kept (its root keeps it: `RSDLPACK_SHARE_STREAM_KEPT`).
    pub unsafe fn ready_at_each_export(self, stream: usize) -> Self {
        // SAFETY: the exporter is the allocation's one holder (not yet an object), so nothing
        // reads the field meanwhile.
        unsafe { (*self.0.as_ptr()).producer = Some(stream) };
        self
    }

    /// The exporter as a new object of the exporter type `ty`, which takes over its hold.
    ///
    /// # Safety
    /// `ty` is the exporter type ([`TYPE`]'s).
    pub(super) unsafe fn into_object_of<'py>(
        self,
        py: Python<'py>,
        ty: *mut ffi::PyTypeObject,
    ) -> Bound<'py, PyAny> {
        let object = self.0.as_ptr().cast::<ffi::PyObject>();
        std::mem::forget(self);
        // SAFETY: the header lies at the allocation's start (`repr(C)`), sized and aligned for
        // a `PyObject`; `PyObject_Init` sets its type and reference count, and takes the
        // reference every object of a heap type holds to it; the new reference passes to the
        // `Bound`, and with it the exporter's hold.
        unsafe {
            ffi::PyObject_Init(object, ty);
            Bound::from_owned_ptr(py, object)
        }
    }

    /// The exporter as a new object of the exporter type as built (for the C exchange API's
    /// `managed_tensor_to_py_object_no_sync`, which is reached through that type).
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
        Ok(unsafe { self.into_object_of(py, ty) })
    }
}

/// A hold on an exporter's allocation, for a capsule the slot cannot serve, with the stream its
/// consumer was handed the memory on; given back on drop, once a fence is recorded there.
struct Held {
    exporter: NonNull<ExporterObject>,
    consumer: Option<FenceStream>,
}

// SAFETY: the allocation is `Sync` and counts its holders atomically; the stream is `Send`.
unsafe impl Send for Held {}

impl Drop for Held {
    fn drop(&mut self) {
        // Unconsumed: asked before anything this drop runs could ask in turn; where no stream
        // asks, the memory's release clears the answer (`release_ordered`).
        if let Some(stream) = self.consumer.take()
            && !releasing_unconsumed()
        {
            // SAFETY: the hold keeps the allocation alive until it is given back below; the
            // stream is this capsule's consumer's, live while its tensor is (now being
            // released).
            unsafe { (*self.exporter.as_ptr()).record_consumer(stream) };
        }
        // SAFETY: this hold, given back once, after the fence: the record reads the
        // allocation, which the last hold frees.
        unsafe { ExporterObject::release(self.exporter.as_ptr()) };
    }
}

// SAFETY: the descriptor and the slot are fields of the allocation, which never moves and
// lives while any holder does; `retain` and `release` count holders (see `ExporterObject`).
unsafe impl SlotOwner for ExporterObject {
    fn descriptor(&self) -> &TensorDescriptor {
        &self.descriptor
    }
    fn slot(&self) -> &HeaderSlot {
        &self.slot
    }
    unsafe fn retain(owner: *const Self) {
        // SAFETY: a live exporter whose holder the caller is (contract).
        unsafe { Self::retain(owner) }
    }
    unsafe fn release(owner: *const Self) {
        // SAFETY: forwarded from this function's contract.
        unsafe { Self::release(owner) }
    }
    fn slot_released(&self) {
        // SAFETY: called by the slot's capsule's deleter before it frees the slot: the export
        // that claimed it wrote the stream before handing the capsule out, and no other claim
        // writes it until the slot is freed.
        let consumer = unsafe { (*self.slot_consumer.get()).take() };
        // As in `Held::drop`.
        if let Some(stream) = consumer
            && !releasing_unconsumed()
        {
            // SAFETY: the stream of this capsule's consumer, live while its tensor is (now
            // being released).
            unsafe { self.record_consumer(stream) };
        }
    }
}

/// What a capsule's managed tensor owns when the source's slot cannot serve it, with the
/// descriptor it restates: the header reads that descriptor in place (see
/// [`rsdlpack::export::described`]). Memory owners are held for their drop.
enum CapsuleOwner {
    /// The source itself, restated as it is (its slot taken by another capsule).
    Shared(Held),
    /// The source, restated otherwise (IS_COPIED cleared).
    Restated(#[allow(dead_code)] Held, Box<TensorDescriptor>),
    /// A private host copy of the source.
    Copy(#[allow(dead_code)] AlignedBuffer, Box<TensorDescriptor>),
    /// A private host copy of device memory, its descriptor inside.
    HostCopy(Box<rsdlpack::cuda::to_host::HostCopy>),
}

// SAFETY: every descriptor answered lives in the exporter's allocation (which a hold keeps) or
// in a `Box` the owner holds, and nothing changes a descriptor once built: it stays put and
// unchanged however the owner moves.
unsafe impl DescribingOwner for CapsuleOwner {
    fn descriptor(&self) -> &TensorDescriptor {
        match self {
            // SAFETY: the hold keeps the allocation alive.
            Self::Shared(held) => unsafe { &(*held.exporter.as_ptr()).descriptor },
            Self::Restated(_, descriptor) | Self::Copy(_, descriptor) => descriptor,
            Self::HostCopy(host) => &host.descriptor,
        }
    }
}

/// What one export hands out the memory of: the source's own (with the stream its consumer
/// was handed it on, a `CUstream` value, for memory streams order), or a private copy.
enum Carried {
    Source(Option<usize>),
    Copy(CapsuleOwner),
}

impl ExporterObject {
    /// The type's `tp_basicsize`.
    pub(super) const SIZE: usize = size_of::<Self>();

    /// `object`'s exporter, when it is an exporter object.
    pub(crate) fn of_object<'a>(object: &'a Bound<'_, PyAny>) -> Option<ExporterRef<'a>> {
        let ty = TYPE.load(Ordering::Acquire);
        // SAFETY: a live object's header.
        let ours = !ty.is_null() && unsafe { ffi::Py_TYPE(object.as_ptr()) } == ty;
        // SAFETY: an object of the exporter type (just checked), alive as long as `object`.
        ours.then(|| unsafe { Self::of_receiver(object.as_ptr()) })
    }

    /// The exporter that `object` is.
    ///
    /// # Safety
    /// `object` is a live exporter object (a method's receiver, which its method descriptor
    /// checked), alive for `'a`.
    pub(crate) unsafe fn of_receiver<'a>(object: *mut ffi::PyObject) -> ExporterRef<'a> {
        // SAFETY: an exporter object is its allocation's start, and the object pointer is the
        // allocation's own (`Exporter::into_object_of` handed it to Python) (contract).
        unsafe { ExporterRef::new(NonNull::new_unchecked(object.cast())) }
    }

    /// Takes one more hold on the allocation at `object`.
    ///
    /// # Safety
    /// `object` is a live exporter (built) whose holder the caller is.
    unsafe fn retain(object: *const Self) {
        // As `Arc::clone`: a new holder comes from an existing one, so no ordering is needed.
        // SAFETY: live while the caller holds it (contract).
        unsafe { (*object).holders.fetch_add(1, Ordering::Relaxed) };
    }

    /// Gives back one hold on the allocation at `object`; the last drops the source and frees
    /// the allocation. Any thread: a capsule's deleter runs where its consumer frees it.
    ///
    /// # Safety
    /// The caller holds `object` (built, see [`Building::finish`]) and does not use the hold
    /// again.
    pub(super) unsafe fn release(object: *const Self) {
        // Release: this holder's uses happen before the last holder's drop (as `Arc`'s).
        // SAFETY: held until this decrement.
        if unsafe { (*object).holders.fetch_sub(1, Ordering::Release) } != 1 {
            return;
        }
        std::sync::atomic::fence(Ordering::Acquire);
        let object = object.cast_mut();
        // SAFETY: the last holder: nothing else reaches the allocation. The fields with drops
        // are dropped once (the keeper, the ready event and the fences moved out to the
        // memory's release, which may outlive the allocation); the slot's stream is `None`
        // (taken by the slot's last capsule, or never written), the slot and the descriptor
        // have no drop, and the header is Python's memory no longer (its object was
        // deallocated, or never made). The allocation is `Box`'s (`Building::new`). Should the
        // release unwind, the allocation, and the memory, are leaked.
        unsafe {
            debug_assert!((*(*object).slot_consumer.get()).is_none());
            release_memory(
                std::ptr::read(&raw const (*object)._memory),
                std::ptr::read(&raw const (*object).ready),
                std::ptr::read(&raw const (*object).ordered),
            );
            drop(Box::from_raw(object.cast::<MaybeUninit<Self>>()));
        }
    }

    /// Gives back the Python object's own hold (its `tp_dealloc`), once the streams its
    /// borrowed views were made ready on have their fences: those views are valid while the
    /// object lives, so their consumers' work on the memory comes before this.
    ///
    /// # Safety
    /// As [`Self::release`], for the object's hold.
    #[inline]
    pub(super) unsafe fn release_object(object: *const Self) {
        // SAFETY: held until the release below (contract).
        let this = unsafe { &*object };
        if let Some(ordered) = &this.ordered {
            let views =
                std::mem::take(&mut *ordered.views.lock().unwrap_or_else(|p| p.into_inner()));
            for stream in views {
                // SAFETY: a stream a view's consumer named, live while the view is (until now).
                unsafe { ordered.fences.record(&this.descriptor, stream) };
            }
        }
        // SAFETY: forwarded from this function's contract.
        unsafe { Self::release(object) }
    }

    /// Records a fence on `stream`, the stream one consumer was handed the memory on, as that
    /// consumer's capsule (or the object, for views) is released: see [`ConsumerFences`].
    ///
    /// # Safety
    /// `stream` is 1, 2 or a `CUstream` of the memory's device, live now.
    unsafe fn record_consumer(&self, stream: FenceStream) {
        if let Some(ordered) = &self.ordered {
            // SAFETY: contract.
            unsafe { ordered.fences.record(&self.descriptor, stream) };
        }
    }

    /// The validated tensor behind this exporter.
    pub(crate) fn descriptor(&self) -> &rsdlpack::TensorDescriptor {
        &self.descriptor
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

    /// Orders the legacy default stream after the stream that wrote a CUDA or managed source
    /// (an event, no host wait), for a borrowed view whose consumer works there: the stream is
    /// fenced when the object goes ([`Self::release_object`]). Nothing for other devices.
    pub(crate) fn ready_on_default_stream(&self) -> BridgeResult<()> {
        let Some(stream) = exchange_api_stream(self.descriptor().device().kind).cuda_handle()
        else {
            return Ok(());
        };
        self.order_before(stream)?;
        let Some(ordered) = &self.ordered else {
            return Ok(());
        };
        let named = FenceStream::named_now(stream);
        let mut views = ordered.views.lock().unwrap_or_else(|p| p.into_inner());
        let context = |s: &FenceStream| s.alias_context.as_ref().map(|c| c.raw());
        if !views
            .iter()
            .any(|v| v.handle == named.handle && context(v) == context(&named))
        {
            views.push(named);
        }
        Ok(())
    }

    /// Makes `consumer` (1, 2 or a live `CUstream` of the source's device) wait for the
    /// producer's writes.
    fn order_before(&self, consumer: usize) -> BridgeResult<()> {
        if let Some(producer) = self.producer {
            let device = self.descriptor().device().id;
            // SAFETY: every caller holds the GIL (see `carry_out`).
            let py = unsafe { Python::assume_attached() };
            // With the GIL released: while the consumer's stream captures, the order is a host
            // wait for the producer's work (its event lives for this call only), and a
            // producer stream whose host function takes the GIL must be able to finish.
            // SAFETY: the producer's stream is kept alive with the memory
            // (`ready_at_each_export`); `consumer` as below.
            py.detach(|| unsafe {
                rsdlpack::cuda::order::order_streams(device, producer, consumer)
            })?;
            return Ok(());
        }
        match &self.ready {
            Some(ready) => {
                // SAFETY: `consumer` is the stream the DLPack consumer will use, which the
                // protocol requires to be live on this device (or the legacy default stream).
                unsafe { ready.order_before(consumer) }?;
                Ok(())
            }
            // Recorded for all memory streams order, except without a driver: that's the answer.
            None => Ok(rsdlpack::cuda::driver()?),
        }
    }

    /// The memory of one export, as [`plan_export`] decided: the source itself (its consumer's
    /// stream ordered after the producer's, for CUDA memory, and kept for the capsule's release
    /// to fence: the stream named now, an alias with the context current now), or a host copy.
    fn carry_out(&self, memory: Memory) -> BridgeResult<Carried> {
        let descriptor = self.descriptor();
        match memory {
            Memory::Shared { consumer_stream } => {
                if let Some(consumer) = consumer_stream {
                    self.order_before(consumer)?;
                }
                Ok(Carried::Source(consumer_stream))
            }
            Memory::HostCopy => {
                // SAFETY: every caller holds the GIL (a Python method or a function of the C
                // exchange API, see `versioned`).
                let py = unsafe { Python::assume_attached() };
                let fresh = self.ready_now()?;
                let ready = fresh
                    .as_ref()
                    .or(self.ready.as_ref())
                    .filter(|_| plan::host_copy_after_producer(descriptor.device().kind));
                // The producer's writes to managed memory are waited for, with the GIL
                // released, before the host reads it (on a device without
                // concurrentManagedAccess a host touch while a kernel runs faults).
                let buffer = py.detach(|| -> BridgeResult<AlignedBuffer> {
                    if let Some(ready) = ready {
                        ready.wait_on_host()?;
                    }
                    // SAFETY: the source's memory is alive (we own it) and host-readable (the
                    // plan copies only such memory; materialize refuses other devices).
                    // Holders of earlier capsules may write it concurrently: DLPack leaves
                    // synchronising writers of shared memory to its users, and the copy moves
                    // plain bytes, so a racing writer yields a mix of old and new values, never
                    // invalid ones.
                    Ok(unsafe { materialize(descriptor, IndexOrder::Producer) }?)
                })?;
                let spec = Box::new(descriptor.copied_at(buffer.as_ptr() as usize));
                Ok(Carried::Copy(CapsuleOwner::Copy(buffer, spec)))
            }
            Memory::DeviceToHost => {
                if self.ready.is_none() {
                    rsdlpack::cuda::driver()?;
                }
                // SAFETY: as above.
                let py = unsafe { Python::assume_attached() };
                let fresh = self.ready_now()?;
                let ready = fresh.as_ref().or(self.ready.as_ref());
                // The copy waits for the device (the producer's work, then the copy): with the
                // GIL released, so that other Python threads run and a producer stream whose
                // host function takes the GIL can finish.
                // SAFETY: the source's device memory is alive (we own it).
                let host = py.detach(|| unsafe {
                    rsdlpack::cuda::to_host::copy_to_host(descriptor, ready)
                })?;
                Ok(Carried::Copy(CapsuleOwner::HostCopy(Box::new(host))))
            }
        }
    }

    /// A new event on the producer's stream, for an exporter that records at each export
    /// (`None` for the others, which wait for `ready`).
    fn ready_now(&self) -> BridgeResult<Option<ReadyEvent>> {
        let Some(producer) = self.producer.filter(|_| self.ready.is_some()) else {
            return Ok(None);
        };
        let device = self.descriptor().device();
        // SAFETY: the producer's stream is kept alive with the memory (`ready_at_each_export`).
        Ok(Some(unsafe { ReadyEvent::record(device.id, producer) }?))
    }
}

/// An exporter reached through a pointer with its allocation's provenance (a Python object
/// pointer, or the allocation's `Box` pointer), borrowed for `'a` by a caller that holds it.
/// Reads go through `Deref`; new holds (a capsule's) are taken, and may later free the
/// allocation, through the pointer itself, never through one derived from `&ExporterObject`.
#[derive(Clone, Copy)]
pub(crate) struct ExporterRef<'a>(NonNull<ExporterObject>, PhantomData<&'a ExporterObject>);

impl Deref for ExporterRef<'_> {
    type Target = ExporterObject;

    #[inline]
    fn deref(&self) -> &ExporterObject {
        // SAFETY: live for `'a` (see `new`); only the header (in an `UnsafeCell`) and the
        // atomics change while it is shared.
        unsafe { self.0.as_ref() }
    }
}

impl<'a> ExporterRef<'a> {
    /// # Safety
    /// `object` is a built exporter, live for `'a`, with its allocation's provenance.
    #[inline]
    pub(crate) unsafe fn new(object: NonNull<ExporterObject>) -> Self {
        Self(object, PhantomData)
    }

    /// What `__dlpack__` answers for `request` (see [`super::dlpack_method`]).
    #[inline]
    pub(crate) fn dlpack<'py>(
        self,
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

    /// What `__dlpack__(max_version=(1, 3))` would hand out, as a managed tensor (for the C
    /// exchange API, [`super::exchange_api`]). Memory a stream orders is made ready on the
    /// legacy default stream, which is what that API's `current_work_stream` reports for it.
    pub(crate) fn managed_no_sync(self) -> BridgeResult<Managed<DLManagedTensorVersioned>> {
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
    /// while that is free. Called with the GIL held (every caller is a Python method or a
    /// function of the C exchange API), which serialises the slot's claims.
    fn versioned(
        self,
        memory: Memory,
        minor: u32,
    ) -> BridgeResult<Managed<DLManagedTensorVersioned>> {
        self.hand_out_versioned(self.carry_out(memory)?, minor)
    }

    /// [`Self::versioned`] past carrying the plan out.
    #[inline]
    fn hand_out_versioned(
        self,
        carried: Carried,
        minor: u32,
    ) -> BridgeResult<Managed<DLManagedTensorVersioned>> {
        let owner = match carried {
            Carried::Source(consumer) => {
                // Named now, in this export's call: an alias means the context current now.
                let consumer = consumer.map(FenceStream::named_now);
                // SAFETY: the allocation's pointer, held by the caller for the call (see
                // `new`); the GIL serialises the exports of an exporter (see above).
                match unsafe { export_versioned_in_slot(self.0, minor) }? {
                    Some(tensor) => {
                        // SAFETY: the slot was just claimed by this export, whose capsule is not
                        // handed out yet: nothing else reads or writes its stream, which is
                        // `None` (taken by the previous capsule's deleter: nothing to drop).
                        unsafe { self.slot_consumer.get().write(consumer) };
                        return Ok(tensor);
                    }
                    None => self.shared(consumer),
                }
            }
            Carried::Copy(owner) => owner,
        };
        Ok(export_versioned_described(owner, minor)?)
    }

    /// [`Self::versioned`] in the legacy ABI.
    fn legacy(self, memory: Memory) -> BridgeResult<Managed<DLManagedTensor>> {
        self.hand_out_legacy(self.carry_out(memory)?)
    }

    /// [`Self::legacy`] past carrying the plan out.
    #[inline]
    fn hand_out_legacy(self, carried: Carried) -> BridgeResult<Managed<DLManagedTensor>> {
        let owner = match carried {
            Carried::Source(consumer) => {
                // As in `hand_out_versioned`.
                let consumer = consumer.map(FenceStream::named_now);
                // SAFETY: as in `hand_out_versioned`.
                match unsafe { export_legacy_in_slot(self.0) }? {
                    Some(tensor) => {
                        // SAFETY: as in `hand_out_versioned`.
                        unsafe { self.slot_consumer.get().write(consumer) };
                        return Ok(tensor);
                    }
                    None => self.shared(consumer),
                }
            }
            Carried::Copy(owner) => owner,
        };
        Ok(export_legacy_described(owner)?)
    }

    /// An owner over the source itself, for a capsule the slot cannot hold, whose consumer
    /// was handed the memory on `consumer`. Several capsules share the memory, so none may
    /// claim IS_COPIED (a private copy), whatever the source said.
    fn shared(self, consumer: Option<FenceStream>) -> CapsuleOwner {
        // SAFETY: live and held by the caller for `'a` (see `new`), the allocation's pointer.
        unsafe { ExporterObject::retain(self.0.as_ptr()) };
        let held = Held {
            exporter: self.0,
            consumer,
        };
        // The source's own unless the flag must change.
        if self.descriptor().is_copied() {
            let restated = Box::new(self.descriptor().with_is_copied(false));
            CapsuleOwner::Restated(held, restated)
        } else {
            CapsuleOwner::Shared(held)
        }
    }
}

/// Models of the exporter's allocation that need no Python (so Miri runs them, see
/// scripts/miri.sh): the header slot, the holder count and the root queue, driven through the
/// exporter's own code, with capsules released on other threads as consumers release them.
#[cfg(test)]
mod model_tests {
    use super::*;
    use crate::export::roots::{self, QUEUE_TESTS};
    use crate::test_support::require_no_driver;
    use rsdlpack::cuda::fence::fence_log::{self, Entry};
    use rsdlpack::{Device, ElementType};

    /// An exporter over a 3×4 Julia array (never read: the address is only described), rooted
    /// by `id`.
    fn julia_exporter(id: u64) -> Exporter {
        Exporter::of_julia_array(JuliaRoot(id), None, |d| {
            Ok(d.julia_layout_into(
                4096,
                Device::CPU,
                ElementType::Float32,
                &[3, 4],
                &[1, 3],
                IndexOrder::Producer,
            )?)
        })
        .expect("a valid layout")
    }

    /// The exporter as a method's receiver sees it: the allocation's own pointer.
    fn receiver(exporter: &Exporter) -> ExporterRef<'_> {
        // SAFETY: built, and held by `exporter` for the borrow.
        unsafe { ExporterRef::new(exporter.0) }
    }

    fn holders(exporter: &Exporter) -> usize {
        receiver(exporter).holders.load(Ordering::SeqCst)
    }

    /// The ids released so far (the queue is process-wide: callers hold `QUEUE_TESTS`).
    fn taken() -> Vec<u64> {
        let mut out = [0u64; 16];
        let mut all = Vec::new();
        loop {
            let n = roots::take_released(&mut out);
            all.extend_from_slice(&out[..n]);
            if n < out.len() {
                return all;
            }
        }
    }

    const SHARED: Memory = Memory::Shared {
        consumer_stream: None,
    };

    thread_local! {
        /// Where this thread's exporters queue their memory's release while a test catches
        /// them (`Some`), rather than the process-wide queue, which needs Python to drain.
        static CAUGHT: std::cell::RefCell<Option<Vec<rsdlpack::PendingRelease>>> =
            const { std::cell::RefCell::new(None) };
    }

    /// The release, unless this thread's test catches it.
    pub(super) fn catch_deferred(
        release: rsdlpack::PendingRelease,
    ) -> Option<rsdlpack::PendingRelease> {
        CAUGHT.with_borrow_mut(|caught| match caught {
            Some(caught) => {
                caught.push(release);
                None
            }
            None => Some(release),
        })
    }

    /// An exporter over 16 floats of device memory (never dereferenced: without a driver
    /// nothing is recorded), rooted by `id`.
    fn device_exporter(id: u64) -> Exporter {
        Exporter::of_julia_array(JuliaRoot(id), None, |d| {
            Ok(d.julia_layout_into(
                0x1000,
                Device {
                    kind: rsdlpack::DeviceKind::Cuda,
                    id: 0,
                },
                ElementType::Float32,
                &[16],
                &[1],
                IndexOrder::Producer,
            )?)
        })
        .expect("a valid layout")
    }

    /// A fence asked for on `handle` (no context: without a driver none is found), as an
    /// export's consumer's release asks for it: keeping no handle past the call.
    fn recorded(handle: usize) -> Entry {
        Entry::Recorded {
            handle,
            alias_context: None,
            event_context: None,
            defers_on_capture: false,
        }
    }

    fn named(handle: usize) -> Entry {
        Entry::Named {
            handle,
            context: None,
        }
    }

    /// Drops `tensor` on a thread of its own (as a consumer may), and returns what that thread
    /// logged: the fences its release asked for. A release it queues is caught for this
    /// thread's test (which must be catching, see `CAUGHT`).
    fn drop_on_a_thread<T: Send + 'static>(tensor: T) -> Vec<Entry> {
        let (log, queued) = std::thread::spawn(move || {
            fence_log::take();
            CAUGHT.set(Some(Vec::new()));
            drop(tensor);
            (fence_log::take(), CAUGHT.take().unwrap_or_default())
        })
        .join()
        .unwrap();
        CAUGHT.with_borrow_mut(|caught| match caught {
            Some(caught) => caught.extend(queued),
            None => assert!(queued.is_empty(), "a release queued, uncaught"),
        });
        log
    }

    /// Completes the releases the last holder queued (each fails for want of a driver).
    fn complete_caught() -> usize {
        let caught = CAUGHT.take().unwrap_or_default();
        let count = caught.len();
        for release in caught {
            assert!(release.is_ordered());
            let outcome = release.complete();
            assert!(
                matches!(outcome, Err(rsdlpack::Error::NoCudaDriver)),
                "{outcome:?}"
            );
        }
        count
    }

    /// Each consumer's stream is named when its export is made (on the exporting thread) and
    /// fenced when its own capsule is released (in the slot or not, on whichever thread), the
    /// borrowed views' when the object goes, and the memory comes back only through the
    /// release its last holder queues, once that completes. Runs without a driver (and under
    /// Miri).
    #[test]
    fn model_without_a_driver_each_capsule_fences_its_consumer_when_it_is_released() {
        require_no_driver();
        let _queue = QUEUE_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        taken();
        let exporter = device_exporter(41);
        let at = receiver(&exporter);
        let on = |handle| Carried::Source(Some(handle));
        fence_log::take();
        let in_slot = at.hand_out_versioned(on(0x7f00), 3).unwrap();
        assert!(at.slot().is_taken());
        let held = at.hand_out_versioned(on(0x8f00), 3).unwrap();
        let unfenced = at.hand_out_legacy(Carried::Source(None)).unwrap();
        assert_eq!(
            fence_log::take(),
            [named(0x7f00), named(0x8f00)],
            "each stream named by its export, on the exporting thread, and nothing fenced yet"
        );
        let ordered = at.ordered.as_ref().expect("device memory");
        ordered
            .views
            .lock()
            .unwrap()
            .push(FenceStream::named_now(1));
        fence_log::take();

        assert_eq!(
            drop_on_a_thread(in_slot),
            [recorded(0x7f00)],
            "the slot's consumer, at its release, on its thread (named before, not now)"
        );
        assert_eq!(
            drop_on_a_thread(held),
            [recorded(0x8f00)],
            "the other capsule's, at its release"
        );

        // The object's own hold (its tp_dealloc): the views' stream.
        let object = exporter.0;
        std::mem::forget(exporter);
        // SAFETY: the hold `exporter` had, given back once; `unfenced` keeps it alive.
        unsafe { ExporterObject::release_object(object.as_ptr()) };
        assert_eq!(
            fence_log::take(),
            [recorded(1)],
            "the views, as the object goes"
        );
        assert_eq!(taken(), [] as [u64; 0], "a capsule still holds the root");

        CAUGHT.set(Some(Vec::new()));
        assert_eq!(drop_on_a_thread(unfenced), [], "no stream: no fence");
        assert_eq!(taken(), [] as [u64; 0], "queued, not given back");
        assert_eq!(complete_caught(), 1, "the last holder queued one release");
        assert_eq!(taken(), [41], "given back once the fences are done");
    }

    /// The last holder is a fenced capsule (in the slot, then one beside it): it records its
    /// consumer's fence before it gives its hold back, since that hold may be the one that
    /// frees the allocation the fences live in (Miri reports the use after free otherwise),
    /// and the memory comes back through the release it queues.
    #[test]
    fn model_without_a_driver_a_fenced_last_holder_records_before_it_lets_go() {
        require_no_driver();
        let _queue = QUEUE_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        taken();
        for (id, beside) in [(42, false), (43, true)] {
            let exporter = device_exporter(id);
            let at = receiver(&exporter);
            let mut first = Some(at.hand_out_versioned(Carried::Source(None), 3).unwrap());
            let last = at.hand_out_legacy(Carried::Source(Some(0x9f00))).unwrap();
            assert!(at.slot().is_taken());
            // In the slot: the unfenced capsule goes first, and the fenced one takes the slot.
            let last = if beside {
                last
            } else {
                drop(last);
                drop(first.take());
                fence_log::take();
                let last = at.hand_out_legacy(Carried::Source(Some(0x9f00))).unwrap();
                assert!(at.slot().is_taken(), "the fenced capsule in the slot");
                last
            };
            let object = exporter.0;
            std::mem::forget(exporter);
            // SAFETY: the object's hold, given back once; the capsules keep the allocation.
            unsafe { ExporterObject::release_object(object.as_ptr()) };
            drop(first);
            fence_log::take();
            CAUGHT.set(Some(Vec::new()));
            assert_eq!(
                drop_on_a_thread(last),
                [recorded(0x9f00)],
                "the last holder's own fence (beside the slot: {beside})"
            );
            assert_eq!(taken(), [] as [u64; 0], "queued, not given back");
            assert_eq!(complete_caught(), 1);
            assert_eq!(taken(), [id]);
        }
    }

    /// A capsule nobody consumed (its destructor drops the tensor) fences nothing: no consumer
    /// worked on the memory, and its stream need not be alive. A consumed one afterwards does.
    #[test]
    fn model_without_a_driver_an_unconsumed_capsule_fences_nothing() {
        require_no_driver();
        let _queue = QUEUE_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        taken();
        let exporter = device_exporter(44);
        let at = receiver(&exporter);
        let in_slot = at
            .hand_out_versioned(Carried::Source(Some(0x7f00)), 3)
            .unwrap();
        let held = at.hand_out_legacy(Carried::Source(Some(0x8f00))).unwrap();
        fence_log::take();
        crate::protocol::capsule::drop_unconsumed(in_slot);
        crate::protocol::capsule::drop_unconsumed(held);
        assert_eq!(fence_log::take(), [], "unconsumed: nothing recorded");
        assert!(!at.slot().is_taken());
        let consumed = at
            .hand_out_versioned(Carried::Source(Some(0x7f01)), 3)
            .unwrap();
        assert_eq!(drop_on_a_thread(consumed), [recorded(0x7f01)]);
        CAUGHT.set(Some(Vec::new()));
        drop(exporter);
        assert_eq!(complete_caught(), 1, "the consumed capsule's fence");
        assert_eq!(taken(), [44]);

        // Nothing recorded by any capsule: given back at once (a Julia root may go anywhere).
        let exporter = device_exporter(45);
        let capsule = receiver(&exporter)
            .hand_out_versioned(Carried::Source(Some(0x7f00)), 3)
            .unwrap();
        drop(exporter);
        CAUGHT.set(Some(Vec::new()));
        crate::protocol::capsule::drop_unconsumed(capsule);
        assert_eq!(complete_caught(), 0, "nothing queued");
        assert_eq!(taken(), [45]);
    }

    /// With nothing left to wait for, a Julia array's root is dropped wherever its last holder
    /// lets go, and a foreign tensor only on a thread that holds the GIL (else queued): the
    /// question is asked for the tensor only.
    #[test]
    fn model_only_a_julia_root_is_dropped_without_asking_for_the_gil() {
        let _queue = QUEUE_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        taken();
        assert!(drops_here(&Keeper::JuliaArray(JuliaRoot(46)), || {
            panic!("asked for a Julia root")
        }));
        let descriptor = *receiver(&device_exporter(47)).descriptor();
        let mut roots = taken();
        roots.sort_unstable();
        assert_eq!(roots, [46, 47]);
        let tensor = rsdlpack::export::export_versioned(&descriptor, (), 3).unwrap();
        let keeper = Keeper::Tensor(ManagedTensor::Versioned(tensor));
        for holds in [false, true] {
            let mut asked = false;
            let here = drops_here(&keeper, || {
                asked = true;
                holds
            });
            assert!(asked && here == holds);
        }
    }

    #[test]
    fn model_slot_then_own_allocation_released_on_threads_frees_once() {
        let _queue = QUEUE_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        taken();
        let exporter = julia_exporter(11);
        let at = receiver(&exporter);
        let in_slot = at.versioned(SHARED, 3).unwrap();
        assert!(at.slot().is_taken(), "the first capsule takes the slot");
        let second = at.versioned(SHARED, 3).unwrap();
        let legacy = at.legacy(SHARED).unwrap();
        assert_eq!(holders(&exporter), 4, "the exporter and three capsules");
        // Consumers release on their own threads; the exporter goes first, so a capsule's
        // deleter frees the allocation.
        drop(exporter);
        let threads = [
            std::thread::spawn(move || drop(in_slot)),
            std::thread::spawn(move || drop(second)),
            std::thread::spawn(move || drop(legacy)),
        ];
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(
            taken(),
            [11],
            "the root comes back once, after the last holder"
        );
    }

    #[test]
    fn model_the_slot_is_reused_after_its_deleter_ran_on_another_thread() {
        let _queue = QUEUE_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        taken();
        let exporter = julia_exporter(12);
        for _ in 0..3 {
            let capsule = receiver(&exporter).versioned(SHARED, 3).unwrap();
            assert!(receiver(&exporter).slot().is_taken());
            std::thread::spawn(move || drop(capsule)).join().unwrap();
            assert!(!receiver(&exporter).slot().is_taken());
            assert_eq!(holders(&exporter), 1);
        }
        assert_eq!(taken(), [] as [u64; 0], "the exporter still holds the root");
        drop(exporter);
        assert_eq!(taken(), [12]);
    }

    #[test]
    fn model_holders_race_to_the_last_release() {
        let _queue = QUEUE_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        taken();
        let exporter = julia_exporter(13);
        let capsules: Vec<_> = (0..4)
            .map(|_| receiver(&exporter).versioned(SHARED, 3).unwrap())
            .collect();
        // The exporter's own hold dropped on a thread too, racing the capsules' deleters.
        let threads: Vec<_> = capsules
            .into_iter()
            .map(|capsule| std::thread::spawn(move || drop(capsule)))
            .chain(std::iter::once(std::thread::spawn(move || drop(exporter))))
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(taken(), [13]);
    }

    #[test]
    fn model_roots_released_on_threads_each_come_back_once() {
        let _queue = QUEUE_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        taken();
        // More than the slot holds at once: the queue behind it takes the rest, while this
        // thread takes concurrently.
        let threads: Vec<_> = (100..106)
            .map(|id| std::thread::spawn(move || drop(julia_exporter(id))))
            .collect();
        let mut seen = taken();
        for thread in threads {
            thread.join().unwrap();
        }
        seen.extend(taken());
        seen.sort_unstable();
        assert_eq!(seen, (100..106).collect::<Vec<_>>());
    }

    #[test]
    fn model_a_noted_root_released_on_another_thread_is_seen_by_its_call() {
        let _queue = QUEUE_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        taken();
        // SAFETY: no fence: no stream is recorded on.
        let (noted, released) = unsafe { roots::NotedRoot::new(JuliaRoot(21), None) };
        assert!(!released.load(Ordering::Acquire));
        std::thread::spawn(move || drop(noted)).join().unwrap();
        assert!(released.load(Ordering::Acquire));
        assert_eq!(taken(), [21]);
    }
}
