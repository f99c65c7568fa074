//! Exports whose header reads its shape and strides from a descriptor the owner keeps.
//!
//! [`crate::export::export_versioned`] copies shape and strides into a dlpark allocation and
//! boxes the owner apart: two allocations per managed tensor. An owner that already holds the
//! descriptor at a fixed address (behind a `Box` or an `Arc`) needs neither: here the header
//! and the owner share one allocation, and the header points into the owner's descriptor,
//! which lives as long as the header does. The header says what an export says (see
//! [`crate::export`]): the first element's address with a zero byte offset, explicit strides,
//! the descriptor's flags, the claimed version.
//!
//! An owner that counts references to itself (an exporter's allocation) can do better still:
//! it keeps room for one header ([`HeaderSlot`]), and an export while that room is free
//! allocates nothing at all ([`export_versioned_in_slot`], [`export_legacy_in_slot`]). The
//! commonest exporter hands out one capsule, consumed at once; a second export while the
//! first is alive takes the one-allocation path above.

use crate::descriptor::TensorDescriptor;
use crate::error::Result;
use crate::export::{check_legacy, claimed_minor, flags};
use dlpark::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor};
use dlpark::{DlpackFlags, Managed, ManagedTensorBase};
use std::cell::UnsafeCell;
use std::mem::{MaybeUninit, offset_of};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

/// An owner that keeps the descriptor its tensor restates.
///
/// # Safety
/// [`Self::descriptor`] must answer the same descriptor, unchanged and at the same address,
/// for as long as the owner lives, however the owner itself is moved (the descriptor lives
/// behind a `Box` or an `Arc` the owner holds, not inline).
pub unsafe trait DescribingOwner: Send + 'static {
    fn descriptor(&self) -> &TensorDescriptor;
}

/// The tensor part of a header restating `descriptor`, its shape and strides pointing into it.
#[inline]
pub(crate) fn dl_tensor_of(descriptor: &TensorDescriptor) -> DLTensor {
    DLTensor {
        data: descriptor.first_element() as *mut std::ffi::c_void,
        device: descriptor.device().to_dlpack(),
        ndim: descriptor.ndim() as i32,
        dtype: descriptor.element().to_dlpack(),
        shape: descriptor.shape().as_ptr().cast_mut(),
        strides: descriptor.strides().as_ptr().cast_mut(),
        byte_offset: 0,
    }
}

/// A header and its owner, in one allocation.
#[repr(C)]
struct Described<M, O> {
    /// First, so that the pointer a consumer hands to the deleter is the allocation's.
    header: M,
    owner: O,
}

/// [`crate::export::export_versioned`] for an owner that keeps its descriptor: one allocation,
/// nothing copied. On error the owner is dropped before returning.
pub fn export_versioned_described<O: DescribingOwner>(
    owner: O,
    minor_version: u32,
) -> Result<Managed<DLManagedTensorVersioned>> {
    let claimed = claimed_minor(owner.descriptor().element(), minor_version)?;
    let raw = allocate::<DLManagedTensorVersioned, O>(owner);
    // SAFETY: `raw` is a live allocation, ours alone until handed on below; its owner field is
    // initialised, and the header is written in full here before anyone reads it.
    unsafe {
        let header = &mut (*raw).header;
        header.version = DLPackVersion {
            major: DLPackVersion::CURRENT.major,
            minor: claimed,
        };
        header.flags = flags((*raw).owner.descriptor());
    }
    // SAFETY: the header is complete at the current major version; its deleter frees exactly
    // this allocation once (`delete_described`).
    let managed = unsafe { Managed::from_raw(raw.cast::<DLManagedTensorVersioned>()) };
    Ok(managed.expect("a non-null header at the current major version"))
}

/// [`crate::export::export_legacy`] for an owner that keeps its descriptor: one allocation,
/// nothing copied. A tensor the legacy ABI cannot describe is refused and its owner dropped.
pub fn export_legacy_described<O: DescribingOwner>(owner: O) -> Result<Managed<DLManagedTensor>> {
    let descriptor = owner.descriptor();
    check_legacy(descriptor.element(), descriptor.read_only())?;
    let raw = allocate::<DLManagedTensor, O>(owner);
    // SAFETY: a complete legacy header (it has no version to check); its deleter frees exactly
    // this allocation once.
    let managed = unsafe { Managed::from_raw(raw.cast::<DLManagedTensor>()) };
    Ok(managed.expect("a non-null header"))
}

/// Boxes `owner` beside a header that restates its descriptor (version and flags left at
/// their defaults), and returns the allocation. The deleter finds the owner from the header's
/// own address; `manager_ctx` is the owner's address all the same, because some consumers
/// (PaddlePaddle 3.3) never call the deleter of a tensor whose `manager_ctx` is null.
///
/// The shape and strides pointers are taken from the owner where it stays, after its move into
/// the allocation: moving an owner that holds its descriptor in a `Box` reasserts the `Box`'s
/// uniqueness, which invalidates pointers taken through it before (Stacked Borrows).
fn allocate<M: ManagedTensorBase, O: DescribingOwner>(owner: O) -> *mut Described<M, O> {
    const { assert!(offset_of!(Described<M, O>, header) == 0) };
    let raw = Box::into_raw(Box::<Described<M, O>>::new_uninit()).cast::<Described<M, O>>();
    // SAFETY: `raw` is a fresh allocation laid out for a `Described<M, O>`, ours alone; the
    // owner is written in place first and never moves again, so the tensor read from it stays
    // valid; the header is written before the allocation is returned.
    unsafe {
        let owner_at = &raw mut (*raw).owner;
        owner_at.write(owner);
        let tensor = dl_tensor_of((*owner_at).descriptor());
        let deleter = Some(delete_described::<M, O> as unsafe extern "C" fn(*mut M));
        (&raw mut (*raw).header).write(M::from_parts(tensor, owner_at.cast(), deleter));
    }
    raw
}

unsafe extern "C" fn delete_described<M: ManagedTensorBase, O: DescribingOwner>(header: *mut M) {
    if header.is_null() {
        return;
    }
    // SAFETY: a non-null header handed to this deleter starts a `Described<M, O>` that
    // `allocate` boxed (the offset is asserted there), and DLPack calls the deleter once.
    let described = unsafe { Box::from_raw(header.cast::<Described<M, O>>()) };
    // An owner's drop must not unwind into C; the owner is then leaked.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(described)));
}

/// Room for the header of one export at a time, inside an owner that counts references to
/// itself ([`SlotOwner`]). Claimed by an export, freed by that export's deleter.
pub struct HeaderSlot {
    /// Big enough for either ABI's header (asserted in [`claim`]).
    header: UnsafeCell<MaybeUninit<DLManagedTensorVersioned>>,
    /// Whether an export holds the slot. Set only by claims, which never overlap (the export
    /// functions' contract), and cleared only by the holder's deleter: a load and a store
    /// suffice, with no read-modify-write.
    taken: AtomicBool,
}

// SAFETY: the header is written only by the export that claimed the slot, read through the
// managed tensor it hands on, and left alone once the deleter frees the slot; the flag's
// Release (deleter) and Acquire (claim) order each claim after the previous export's last read.
unsafe impl Sync for HeaderSlot {}
// SAFETY: as above: the header's pointers lead to the owner's descriptor and to memory the
// owner already shares, and only the export that claimed the slot writes it.
unsafe impl Send for HeaderSlot {}

impl HeaderSlot {
    pub const fn new() -> Self {
        Self {
            header: UnsafeCell::new(MaybeUninit::uninit()),
            taken: AtomicBool::new(false),
        }
    }

    /// Whether an export holds the slot now.
    pub fn is_taken(&self) -> bool {
        self.taken.load(Ordering::Acquire)
    }
}

impl Default for HeaderSlot {
    fn default() -> Self {
        Self::new()
    }
}

/// An owner that keeps a [`HeaderSlot`] and the descriptor its exports restate, and counts the
/// references to itself: an export in the slot holds one from its claim to its deleter.
///
/// Owners are reached through raw pointers that carry the provenance of their whole
/// allocation (`Box::into_raw`, `Arc::as_ptr`), never through pointers derived from `&Self`:
/// the last reference frees the allocation through the pointer it was given, and a pointer
/// derived from a shared reference may neither free nor reach outside `Self` (both of Miri's
/// aliasing models reject it).
///
/// # Safety
/// [`Self::descriptor`] must answer the same descriptor, unchanged, and [`Self::slot`] the same
/// slot, for as long as the owner lives, at addresses that never move. [`Self::retain`] takes
/// a reference that keeps the owner alive (at the same address) until the matching
/// [`Self::release`], which may run on any thread.
pub unsafe trait SlotOwner: Sync + 'static {
    fn descriptor(&self) -> &TensorDescriptor;
    fn slot(&self) -> &HeaderSlot;
    /// Takes one more reference to the owner at `owner`.
    ///
    /// # Safety
    /// `owner` points to a live owner, with the provenance of its allocation, and the caller
    /// holds a reference to it.
    unsafe fn retain(owner: *const Self);
    /// Gives back a reference [`Self::retain`] took; the owner may be gone afterwards.
    ///
    /// # Safety
    /// `owner` is an owner whose reference the caller holds and does not use again, with the
    /// provenance of its allocation.
    unsafe fn release(owner: *const Self);
    /// Called by the deleter of the export in the slot, before the slot is freed for the next
    /// claim (which may write over what belongs to the export just released): an owner that
    /// keeps something of that export's beside the slot (the Python exporter: the stream its
    /// consumer was handed the memory on) deals with it here. Should it unwind, the slot stays
    /// taken and the reference is never given back: the owner leaks.
    fn slot_released(&self) {}
}

/// A versioned export of `owner`'s memory in its slot, sharing it (IS_COPIED, a claim that the
/// consumer owns the memory alone, is never made: every export of the owner reaches the same
/// memory); `Ok(None)` when the slot is taken. The export holds a reference to `owner` until
/// its deleter runs. Refused (nothing claimed) as [`export_versioned_described`] refuses.
///
/// # Safety
/// `owner` points to a live owner, with the provenance of its allocation (see [`SlotOwner`]),
/// and the caller holds a reference to it for the call. No two exports of the same owner run
/// at once (the Python bridge holds the GIL for each); their deleters may run anywhere, at any
/// time.
pub unsafe fn export_versioned_in_slot<O: SlotOwner>(
    owner: NonNull<O>,
    minor_version: u32,
) -> Result<Option<Managed<DLManagedTensorVersioned>>> {
    // SAFETY: live while the caller holds its reference (contract).
    let descriptor = unsafe { owner.as_ref() }.descriptor();
    let claimed = claimed_minor(descriptor.element(), minor_version)?;
    // SAFETY: forwarded from this function's contract.
    let Some(raw) = (unsafe { claim::<DLManagedTensorVersioned, O>(owner) }) else {
        return Ok(None);
    };
    // SAFETY: the slot is ours (just claimed) and its header written but for these two
    // fields, which complete it before anyone else reads it.
    unsafe {
        (*raw).version = DLPackVersion {
            major: DLPackVersion::CURRENT.major,
            minor: claimed,
        };
        (*raw).flags = flags(descriptor) - DlpackFlags::IS_COPIED;
    }
    // SAFETY: a complete header at the current major version; its deleter frees the slot and
    // the reference it holds, once (`delete_in_slot`).
    let managed = unsafe { Managed::from_raw(raw) };
    Ok(Some(
        managed.expect("a non-null header at the current major version"),
    ))
}

/// [`export_versioned_in_slot`] in the legacy ABI, refused (nothing claimed) as
/// [`export_legacy_described`] refuses.
///
/// # Safety
/// As [`export_versioned_in_slot`].
pub unsafe fn export_legacy_in_slot<O: SlotOwner>(
    owner: NonNull<O>,
) -> Result<Option<Managed<DLManagedTensor>>> {
    // SAFETY: live while the caller holds its reference (contract).
    let descriptor = unsafe { owner.as_ref() }.descriptor();
    check_legacy(descriptor.element(), descriptor.read_only())?;
    // SAFETY: forwarded from this function's contract.
    let Some(raw) = (unsafe { claim::<DLManagedTensor, O>(owner) }) else {
        return Ok(None);
    };
    // SAFETY: a complete legacy header (it has no version to check); its deleter frees the
    // slot and the reference it holds, once.
    let managed = unsafe { Managed::from_raw(raw) };
    Ok(Some(managed.expect("a non-null header")))
}

/// Claims `owner`'s slot and writes a header restating its descriptor there (version and flags
/// left at their defaults), holding a new reference to `owner` (its address in
/// `manager_ctx`); `None` when the slot is taken.
///
/// # Safety
/// As [`export_versioned_in_slot`]: no other claim of this slot runs meanwhile.
unsafe fn claim<M: ManagedTensorBase, O: SlotOwner>(owner: NonNull<O>) -> Option<*mut M> {
    const {
        assert!(size_of::<M>() <= size_of::<DLManagedTensorVersioned>());
        assert!(align_of::<M>() <= align_of::<DLManagedTensorVersioned>());
    };
    // SAFETY: live while the caller holds its reference (contract).
    let slot = unsafe { owner.as_ref() }.slot();
    // Acquire: the previous export's deleter (Release) is done with the header.
    if slot.taken.load(Ordering::Acquire) {
        return None;
    }
    // No other claim runs (contract) and no deleter holds a free slot: nothing races.
    slot.taken.store(true, Ordering::Relaxed);
    // SAFETY: forwarded from this function's contract.
    unsafe { O::retain(owner.as_ptr()) };
    // SAFETY: as above; the reference just taken keeps it alive past the call.
    let tensor = dl_tensor_of(unsafe { owner.as_ref() }.descriptor());
    // The pointer with the allocation's provenance, which the deleter releases (and may free)
    // through; never null, as some consumers need (see `allocate`).
    let context = owner.as_ptr().cast::<std::ffi::c_void>();
    let raw = slot.header.get().cast::<M>();
    let deleter = Some(delete_in_slot::<M, O> as unsafe extern "C" fn(*mut M));
    // SAFETY: the slot is ours alone until its deleter frees it, and large and aligned enough
    // for an `M` (asserted above).
    unsafe { raw.write(M::from_parts(tensor, context, deleter)) };
    Some(raw)
}

unsafe extern "C" fn delete_in_slot<M: ManagedTensorBase, O: SlotOwner>(header: *mut M) {
    if header.is_null() {
        return;
    }
    // SAFETY: a non-null header handed to this deleter is one `claim` wrote, whose
    // `manager_ctx` is the owner it took a reference to; DLPack calls the deleter once.
    let owner = unsafe { (*header).manager_ctx() }.cast::<O>().cast_const();
    // An owner's hook or drop must not unwind into C; the owner is then leaked.
    let release = std::panic::AssertUnwindSafe(|| {
        // SAFETY: the reference keeps the owner alive until released below.
        let held = unsafe { &*owner };
        held.slot_released();
        // Release: nothing reads the header, or what the hook took, after this (the next
        // export may overwrite them).
        held.slot().taken.store(false, Ordering::Release);
        // SAFETY: the reference `claim` took, given back once.
        unsafe { O::release(owner) };
    });
    let _ = std::panic::catch_unwind(release);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::dtype::ElementType;
    use crate::error::Error;
    use crate::imported::{ImportedTensor, ManagedTensor};
    use crate::layout::IndexOrder;
    use crate::test_support::CountingOwner;
    use std::sync::Arc;

    /// A Julia-like array's descriptor, boxed, with a counter of drops.
    struct Owner {
        descriptor: Box<TensorDescriptor>,
        _count: CountingOwner,
    }

    // SAFETY: the descriptor is boxed and never changed.
    unsafe impl DescribingOwner for Owner {
        fn descriptor(&self) -> &TensorDescriptor {
            &self.descriptor
        }
    }

    fn julia_owner(
        element: ElementType,
        read_only: bool,
    ) -> (Owner, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let mut descriptor = TensorDescriptor::from_julia_layout(
            4096,
            Device::CPU,
            element,
            &[3, 4],
            &[1, 3],
            IndexOrder::Producer,
        )
        .unwrap();
        descriptor.set_read_only(read_only);
        let (count, releases) = CountingOwner::new();
        (
            Owner {
                descriptor,
                _count: count,
            },
            releases,
        )
    }

    #[test]
    fn a_versioned_export_reads_as_its_descriptor_and_frees_its_owner_once() {
        let (owner, releases) = julia_owner(ElementType::Float32, true);
        let expected = owner.descriptor.clone();
        let managed = export_versioned_described(owner, 1).unwrap();
        // SAFETY: a managed tensor we own, read before it is released.
        let (version, flags) = unsafe {
            let raw = &*managed.as_ptr();
            (raw.version, raw.flags)
        };
        assert_eq!(version, DLPackVersion { major: 1, minor: 1 });
        assert_eq!(flags, DlpackFlags::READ_ONLY);
        let imported = ImportedTensor::new(ManagedTensor::Versioned(managed)).unwrap();
        assert_eq!(imported.descriptor().shape(), expected.shape());
        assert_eq!(imported.descriptor().strides(), expected.strides());
        assert_eq!(imported.descriptor().first_element(), 4096);
        assert!(imported.descriptor().read_only());
        assert_eq!(CountingOwner::releases(&releases), 0);
        drop(imported);
        assert_eq!(CountingOwner::releases(&releases), 1);
    }

    #[test]
    fn a_legacy_export_reads_as_its_descriptor() {
        let (owner, releases) = julia_owner(ElementType::Int16, false);
        let managed = export_legacy_described(owner).unwrap();
        let imported = ImportedTensor::new(ManagedTensor::Legacy(managed)).unwrap();
        assert_eq!(imported.descriptor().shape(), [3, 4]);
        assert_eq!(imported.descriptor().strides(), [1, 3]);
        assert_eq!(imported.descriptor().element(), ElementType::Int16);
        drop(imported);
        assert_eq!(CountingOwner::releases(&releases), 1);
    }

    #[test]
    fn manager_ctx_is_the_owner_in_both_abis() {
        let (owner, releases) = julia_owner(ElementType::Float32, false);
        let expected = owner.descriptor.clone();
        let versioned = export_versioned_described(owner, 3).unwrap();
        let header = versioned.as_ptr();
        // SAFETY: the header of a live tensor we own; its `manager_ctx` is an `Owner` (checked
        // against the layout first), read while the tensor lives.
        let (context, owner_at) = unsafe {
            let context = (*header).manager_ctx;
            (
                context,
                (*context.cast::<Owner>()).descriptor.strides().to_vec(),
            )
        };
        let offset = offset_of!(Described<DLManagedTensorVersioned, Owner>, owner);
        assert_eq!(context as usize, header as usize + offset);
        assert_eq!(
            owner_at,
            expected.strides(),
            "the owner, read through manager_ctx"
        );
        drop(versioned);
        assert_eq!(CountingOwner::releases(&releases), 1);

        let (owner, releases) = julia_owner(ElementType::Int8, false);
        let legacy = export_legacy_described(owner).unwrap();
        let header = legacy.as_ptr();
        // SAFETY: as above.
        let context = unsafe { (*header).manager_ctx };
        let offset = offset_of!(Described<DLManagedTensor, Owner>, owner);
        assert_eq!(context as usize, header as usize + offset);
        drop(legacy);
        assert_eq!(CountingOwner::releases(&releases), 1);
    }

    #[test]
    fn refusals_drop_the_owner_first() {
        let (owner, releases) = julia_owner(ElementType::Float32, true);
        assert!(matches!(
            export_legacy_described(owner),
            Err(Error::LegacyCannotCarry { .. })
        ));
        assert_eq!(CountingOwner::releases(&releases), 1);
        // An fp8 code needs DLPack 1.1.
        let (owner, releases) = julia_owner(ElementType::RawBytes { code: 10, bits: 8 }, false);
        assert!(matches!(
            export_versioned_described(owner, 0),
            Err(Error::VersionTooOld { .. })
        ));
        assert_eq!(CountingOwner::releases(&releases), 1);
    }

    /// An owner with a slot, as an exporter's shared source keeps one.
    struct Shared {
        slot: HeaderSlot,
        descriptor: TensorDescriptor,
        _count: CountingOwner,
    }

    // SAFETY: every `Shared` lives in an `Arc` (made only by `shared`), whose count is the
    // owner's; the descriptor and the slot live inside it and never change.
    unsafe impl SlotOwner for Shared {
        fn descriptor(&self) -> &TensorDescriptor {
            &self.descriptor
        }
        fn slot(&self) -> &HeaderSlot {
            &self.slot
        }
        unsafe fn retain(owner: *const Self) {
            // SAFETY: `owner` is `Arc::as_ptr` of a live `Arc` (see the impl; contract).
            unsafe { Arc::increment_strong_count(owner) };
        }
        unsafe fn release(owner: *const Self) {
            // SAFETY: a reference `retain` took (contract), inside its `Arc`.
            unsafe { Arc::decrement_strong_count(owner) };
        }
    }

    /// [`export_versioned_in_slot`] from this (the only) thread.
    fn versioned_in_slot(
        owner: &Arc<Shared>,
        minor: u32,
    ) -> Result<Option<Managed<DLManagedTensorVersioned>>> {
        // SAFETY: `Arc::as_ptr` of a live `Arc` the caller holds; the tests export each owner
        // from one thread.
        unsafe { export_versioned_in_slot(arc_pointer(owner), minor) }
    }

    /// [`export_legacy_in_slot`] from this (the only) thread.
    fn legacy_in_slot(owner: &Arc<Shared>) -> Result<Option<Managed<DLManagedTensor>>> {
        // SAFETY: as above.
        unsafe { export_legacy_in_slot(arc_pointer(owner)) }
    }

    /// The owner with its allocation's provenance (not derived from `&Shared`).
    fn arc_pointer(owner: &Arc<Shared>) -> NonNull<Shared> {
        NonNull::new(Arc::as_ptr(owner).cast_mut()).expect("an Arc is never null")
    }

    fn shared(
        element: ElementType,
        read_only: bool,
        is_copied: bool,
    ) -> (Arc<Shared>, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let (julia, _) = julia_owner(element, read_only);
        let (count, releases) = CountingOwner::new();
        let owner = Shared {
            slot: HeaderSlot::new(),
            descriptor: julia.descriptor.with_is_copied(is_copied),
            _count: count,
        };
        (Arc::new(owner), releases)
    }

    #[test]
    fn a_slot_export_holds_its_owner_until_released_and_is_the_slot() {
        let (owner, releases) = shared(ElementType::Float32, true, true);
        let managed = versioned_in_slot(&owner, 1).unwrap().unwrap();
        assert_eq!(Arc::strong_count(&owner), 2, "the export holds a reference");
        let header = managed.as_ptr();
        assert_eq!(
            header.cast::<u8>(),
            owner.slot.header.get().cast::<u8>(),
            "the header is the slot: nothing allocated"
        );
        // SAFETY: the header of a live tensor we own.
        let (version, flags, context) =
            unsafe { ((*header).version, (*header).flags, (*header).manager_ctx) };
        assert_eq!(version, DLPackVersion { major: 1, minor: 1 });
        assert_eq!(
            flags,
            DlpackFlags::READ_ONLY,
            "shared memory never claims IS_COPIED"
        );
        assert_eq!(context as usize, Arc::as_ptr(&owner) as usize);
        let imported = ImportedTensor::new(ManagedTensor::Versioned(managed)).unwrap();
        assert_eq!(imported.descriptor().shape(), owner.descriptor.shape());
        assert_eq!(imported.descriptor().strides(), owner.descriptor.strides());
        assert_eq!(imported.descriptor().first_element(), 4096);

        // A second export while the first lives: the slot is taken.
        assert!(versioned_in_slot(&owner, 3).unwrap().is_none());
        assert_eq!(Arc::strong_count(&owner), 2, "a refusal holds nothing");
        drop(imported);
        assert_eq!(
            Arc::strong_count(&owner),
            1,
            "the deleter dropped its reference"
        );

        // Free again: the next export takes the slot, and outlives the owner's last handle.
        let again = versioned_in_slot(&owner, 3).unwrap().unwrap();
        assert_eq!(again.version(), DLPackVersion { major: 1, minor: 3 });
        drop(owner);
        assert_eq!(CountingOwner::releases(&releases), 0);
        drop(again);
        assert_eq!(
            CountingOwner::releases(&releases),
            1,
            "released once, by the last"
        );
    }

    #[test]
    fn a_legacy_slot_export_reads_as_its_descriptor() {
        let (owner, releases) = shared(ElementType::Int16, false, false);
        let managed = legacy_in_slot(&owner).unwrap().unwrap();
        assert!(legacy_in_slot(&owner).unwrap().is_none(), "taken");
        let imported = ImportedTensor::new(ManagedTensor::Legacy(managed)).unwrap();
        assert_eq!(imported.descriptor().shape(), [3, 4]);
        assert_eq!(imported.descriptor().strides(), [1, 3]);
        assert_eq!(imported.descriptor().element(), ElementType::Int16);
        drop((imported, owner));
        assert_eq!(CountingOwner::releases(&releases), 1);
    }

    #[test]
    fn slot_refusals_claim_nothing() {
        let (owner, _) = shared(ElementType::Float32, true, false);
        assert!(matches!(
            legacy_in_slot(&owner),
            Err(Error::LegacyCannotCarry { .. })
        ));
        let (fp8, _) = shared(ElementType::RawBytes { code: 10, bits: 8 }, false, false);
        assert!(matches!(
            versioned_in_slot(&fp8, 0),
            Err(Error::VersionTooOld { .. })
        ));
        for owner in [owner, fp8] {
            assert_eq!(Arc::strong_count(&owner), 1);
            assert!(
                versioned_in_slot(&owner, 3).unwrap().is_some(),
                "the slot is still free"
            );
        }
    }
}
