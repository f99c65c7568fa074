//! Exports whose header reads its shape and strides from a descriptor the owner keeps.
//!
//! [`crate::export::export_versioned`] copies shape and strides into a dlpark allocation and
//! boxes the owner apart: two allocations per managed tensor. An owner that already holds the
//! descriptor at a fixed address (behind a `Box` or an `Arc`) needs neither: here the header
//! and the owner share one allocation, and the header points into the owner's descriptor,
//! which lives as long as the header does. The header says what an export says (see
//! [`crate::export`]): the first element's address with a zero byte offset, explicit strides,
//! the descriptor's flags, the claimed version.

use crate::descriptor::TensorDescriptor;
use crate::error::Result;
use crate::export::{check_legacy, claimed_minor, flags};
use dlpark::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor};
use dlpark::{Managed, ManagedTensorBase};
use std::mem::offset_of;

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
fn allocate<M: ManagedTensorBase, O: DescribingOwner>(owner: O) -> *mut Described<M, O> {
    const { assert!(offset_of!(Described<M, O>, header) == 0) };
    // Taken before the owner moves: its descriptor stays where it is (the trait's contract).
    let tensor = dl_tensor_of(owner.descriptor());
    let raw = Box::into_raw(Box::<Described<M, O>>::new_uninit()).cast::<Described<M, O>>();
    // SAFETY: `raw` is a fresh allocation laid out for a `Described<M, O>`, ours alone; both
    // fields are written in place before it is returned, and the owner's address is taken
    // without forming a reference.
    unsafe {
        (&raw mut (*raw).owner).write(owner);
        let owner_address = (&raw mut (*raw).owner).cast::<std::ffi::c_void>();
        let deleter = Some(delete_described::<M, O> as unsafe extern "C" fn(*mut M));
        (&raw mut (*raw).header).write(M::from_parts(tensor, owner_address, deleter));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::dtype::ElementType;
    use crate::error::Error;
    use crate::imported::{ImportedTensor, ManagedTensor};
    use crate::layout::IndexOrder;
    use crate::test_support::CountingOwner;
    use dlpark::DlpackFlags;

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
}
