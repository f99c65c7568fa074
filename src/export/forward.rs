//! Forwarding: an imported tensor handed on, unchanged, as a versioned managed tensor whose
//! deleter is ours.
//!
//! A bridge forwards what it imported when its consumers must not call the producer's deleter
//! themselves (the Python bridge: a Python producer's deleter needs the GIL, so the release
//! decides where it runs). [`crate::export::export_versioned`] could restate the descriptor
//! instead, but it copies shape and strides into a new allocation and boxes its owner apart:
//! two allocations and a copy on every import. Here the header is written into room the
//! imported tensor's own allocation keeps for it (its `Slot`), beside the producer's tensor and
//! the validated descriptor; the header's shape and strides point into that descriptor, which
//! lives exactly as long as the header does. Forwarding allocates nothing.
//!
//! The header restates the descriptor as an export would: the address of the first element
//! with a zero byte offset, explicit strides, the flags the descriptor carries, and the newest
//! minor version this library speaks ([`crate::export::claimed_minor`]).

use crate::error::Result;
use crate::export::described::dl_tensor_of;
use crate::export::{claimed_minor, flags};
use crate::imported::{Imported, ImportedTensor, ManagedTensor, Slot};
use dlpark::Managed;
use dlpark::ffi::{DLManagedTensorVersioned, DLPackVersion};
use std::mem::{MaybeUninit, offset_of};

/// Disposes of the producer's tensor when the forwarded one is released: as
/// [`ImportedTensor::into_release`] (dropping the [`PendingRelease`](crate::release::PendingRelease) waits for the consumer's
/// work on it, then runs the producer's deleter), or at once where nothing orders it
/// ([`ImportedTensor::release_if_unordered`]); a bridge may defer either. Handed the tensor
/// itself, not its pending release, so that a host tensor's release needs none.
pub type Release = fn(ImportedTensor);

// The deleter gets the header's address and frees the allocation from it.
const _: () = assert!(offset_of!(Imported, forwarding) == 0 && offset_of!(Slot, header) == 0);

/// `tensor` as a versioned managed tensor over the same memory and metadata, whose deleter
/// hands the producer's tensor to `release` (to be released after the consumer's stream the
/// tensor remembers: [`ImportedTensor::into_release`]). On error (an element type that needs a newer
/// DLPack than this library speaks) the producer's tensor goes to `release` before returning.
pub fn forward_versioned(
    tensor: ImportedTensor,
    release: Release,
) -> Result<Managed<DLManagedTensorVersioned>> {
    let descriptor = tensor.descriptor();
    let minor = match claimed_minor(descriptor.element(), DLPackVersion::CURRENT.minor) {
        Ok(minor) => minor,
        Err(error) => {
            release(tensor);
            return Err(error);
        }
    };
    let imported = Box::into_raw(tensor.into_box());
    // SAFETY: `imported` is a live allocation, ours alone until handed on below. The arrays
    // belong to its descriptor, which never moves or changes while the allocation lives;
    // consumers only read them.
    unsafe {
        let descriptor = &(*imported).descriptor;
        let header = DLManagedTensorVersioned {
            version: DLPackVersion {
                major: DLPackVersion::CURRENT.major,
                minor,
            },
            manager_ctx: imported.cast(),
            deleter: Some(delete_forwarded),
            flags: flags(descriptor),
            dl_tensor: dl_tensor_of(descriptor),
        };
        (*imported).forwarding = Slot {
            header: MaybeUninit::new(header),
            release: Some(release),
        };
    }
    // SAFETY: the allocation starts with an initialised header (offsets asserted above) at
    // the current major version, whose deleter frees exactly this allocation once and never
    // unwinds into C (see `delete_forwarded`).
    let managed = unsafe { Managed::from_raw(imported.cast::<DLManagedTensorVersioned>()) };
    Ok(managed.expect("a non-null header at the current major version"))
}

/// [`forward_versioned`], owned again with its descriptor (for exporters that hold what they
/// hand out): the forwarded tensor restates the descriptor, so it is not validated again.
pub fn forward_owned(tensor: ImportedTensor, release: Release) -> Result<ImportedTensor> {
    let restated = tensor
        .descriptor()
        .with_version(Some(DLPackVersion::CURRENT));
    let forwarded = forward_versioned(tensor, release)?;
    Ok(ImportedTensor::restating(
        ManagedTensor::Versioned(forwarded),
        restated,
    ))
}

/// The deleter of a forwarded tensor.
unsafe extern "C" fn delete_forwarded(header: *mut DLManagedTensorVersioned) {
    if header.is_null() {
        return;
    }
    // SAFETY: a non-null header passed to this deleter starts an `Imported` allocation made
    // by `Box` and handed on by `forward_versioned` (offsets asserted above), and DLPack calls
    // the deleter once.
    let imported = unsafe { Box::from_raw(header.cast::<Imported>()) };
    // A panic must not cross this `extern "C"` boundary; the tensor is then leaked.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let release = imported.forwarding.release.expect("set when forwarded");
        release(ImportedTensor::from_box(imported));
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::TensorDescriptor;
    use crate::dtype::ElementType;
    use crate::test_support::{CountingOwner, counted_versioned};
    use dlpark::DlpackFlags;
    use std::cell::Cell;
    use std::sync::atomic::AtomicUsize;

    fn imported(shape: &[i64], strides: &[i64]) -> (ImportedTensor, std::sync::Arc<AtomicUsize>) {
        let (raw, count) = counted_versioned(shape, strides);
        // SAFETY: `raw` was just produced and is handed over.
        let managed = unsafe { ManagedTensor::from_versioned_raw(raw) }.unwrap();
        (ImportedTensor::new(managed).unwrap(), count)
    }

    #[test]
    fn the_header_restates_the_descriptor() {
        let (tensor, count) = imported(&[2, 3, 4], &[1, 2, 6]);
        let expected = *tensor.descriptor();
        let forwarded = forward_versioned(tensor, |tensor| drop(tensor.into_release())).unwrap();
        let raw = forwarded.into_raw();
        // SAFETY: `raw` is the header just made, owned here until its deleter runs.
        let header = unsafe { &*raw };
        assert_eq!(header.version, DLPackVersion::CURRENT);
        assert_eq!(header.flags, DlpackFlags::empty());
        assert_eq!(
            header.manager_ctx,
            raw.cast(),
            "manager_ctx: the imported allocation the header starts"
        );
        let dl = &header.dl_tensor;
        assert_eq!(dl.ndim, 3);
        assert_eq!(dl.byte_offset, 0);
        assert_eq!(dl.data as usize, expected.first_element());
        assert_eq!(dl.dtype, ElementType::Float32.to_dlpack());
        // SAFETY: the header's arrays hold `ndim` entries while it is alive.
        let (shape, strides) = unsafe {
            (
                std::slice::from_raw_parts(dl.shape, 3),
                std::slice::from_raw_parts(dl.strides, 3),
            )
        };
        assert_eq!((shape, strides), (&[2, 3, 4][..], &[1, 2, 6][..]));
        // The header validates to the descriptor it forwards.
        // SAFETY: as above.
        let again = unsafe { TensorDescriptor::validate(dl, Some(header.version), header.flags) };
        assert_eq!(again.unwrap().strides(), expected.strides());
        assert_eq!(CountingOwner::releases(&count), 0);
        // SAFETY: the header's own deleter, called once.
        unsafe { (header.deleter.unwrap())(raw) };
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    thread_local! {
        /// Releases counted per thread: each test runs on its own, and drops its tensors there.
        static RELEASED: Cell<usize> = const { Cell::new(0) };
    }

    /// A release that counts, then releases the producer's tensor.
    fn counting(tensor: ImportedTensor) {
        RELEASED.set(RELEASED.get() + 1);
        drop(tensor.into_release());
    }

    fn released() -> usize {
        RELEASED.get()
    }

    #[test]
    fn the_release_gets_the_producers_tensor_once() {
        let (tensor, count) = imported(&[5], &[1]);
        let forwarded = forward_versioned(tensor, counting).unwrap();
        assert_eq!(released(), 0);
        drop(forwarded);
        assert_eq!(released(), 1);
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    #[test]
    fn an_owned_forward_restates_its_tensor_and_releases_it_once() {
        let (tensor, count) = imported(&[4, 5], &[1, 4]);
        let expected = *tensor.descriptor();
        let owned = forward_owned(tensor, counting).unwrap();
        let restated = owned.descriptor();
        assert_eq!(restated.shape(), expected.shape());
        assert_eq!(restated.strides(), expected.strides());
        assert_eq!(restated.first_element(), expected.first_element());
        assert_eq!(restated.version(), Some(DLPackVersion::CURRENT));
        assert_eq!(released(), 0);
        drop(owned);
        assert_eq!(released(), 1);
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    #[test]
    fn a_panicking_release_does_not_unwind_into_the_caller() {
        fn panicking(tensor: ImportedTensor) {
            // Released first, so that nothing leaks (scripts/miri.sh checks leaks).
            drop(tensor);
            panic!("a release that fails");
        }
        let (tensor, count) = imported(&[1], &[1]);
        drop(forward_versioned(tensor, panicking).unwrap());
        assert_eq!(CountingOwner::releases(&count), 1);
    }
}
