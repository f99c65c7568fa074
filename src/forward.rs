//! Forwarding: an imported tensor handed on, unchanged, as a versioned managed tensor whose
//! deleter is ours.
//!
//! A bridge forwards what it imported when its consumers must not call the producer's deleter
//! themselves (the Python bridge: a Python producer's deleter needs the GIL, so the release
//! decides where it runs). [`crate::export::export_versioned`] could restate the descriptor
//! instead, but it copies shape and strides into a new allocation and boxes its owner apart:
//! two allocations and a copy on every import. Here the tensor's one allocation holds the
//! header, the producer's tensor and the validated descriptor, and the header's shape and
//! strides point into that descriptor, which lives exactly as long as the header does.
//!
//! The header restates the descriptor as an export would: the address of the first element
//! with a zero byte offset, explicit strides, the flags the descriptor carries, and the newest
//! minor version this library speaks ([`crate::export::claimed_minor`]).

use crate::descriptor::TensorDescriptor;
use crate::error::Result;
use crate::export::{claimed_minor, flags};
use crate::imported::{ImportedTensor, ManagedTensor};
use dlpark::Managed;
use dlpark::ffi::{DLManagedTensorVersioned, DLPackVersion, DLTensor};

/// Disposes of the producer's tensor when the forwarded one is released (dropping it runs the
/// producer's deleter; a bridge may defer that instead).
pub type Release = fn(ManagedTensor);

/// The one allocation behind a forwarded tensor.
#[repr(C)]
struct Forwarded {
    /// First, so that the pointer a consumer hands to the deleter is the allocation's.
    header: DLManagedTensorVersioned,
    producer: ManagedTensor,
    /// Boxed, so that the shape and strides the header points to never move.
    descriptor: Box<TensorDescriptor>,
    release: Release,
}

/// `tensor` as a versioned managed tensor over the same memory and metadata, whose deleter
/// hands the producer's tensor to `release`. On error (an element type that needs a newer
/// DLPack than this library speaks) the producer's tensor goes to `release` before returning.
pub fn forward_versioned(
    tensor: ImportedTensor,
    release: Release,
) -> Result<Managed<DLManagedTensorVersioned>> {
    let (producer, descriptor) = tensor.into_parts();
    let minor = match claimed_minor(descriptor.element(), DLPackVersion::CURRENT.minor) {
        Ok(minor) => minor,
        Err(error) => {
            release(producer);
            return Err(error);
        }
    };
    let header = DLManagedTensorVersioned {
        version: DLPackVersion {
            major: DLPackVersion::CURRENT.major,
            minor,
        },
        manager_ctx: std::ptr::null_mut(),
        deleter: Some(delete_forwarded),
        flags: flags(&descriptor),
        dl_tensor: DLTensor {
            data: descriptor.first_element() as *mut std::ffi::c_void,
            device: descriptor.device().to_dlpack(),
            ndim: descriptor.ndim() as i32,
            dtype: descriptor.element().to_dlpack(),
            // Written below, once the descriptor has its final address inside the box.
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        },
    };
    let forwarded = Box::into_raw(Box::new(Forwarded {
        header,
        producer,
        descriptor,
        release,
    }));
    // SAFETY: `forwarded` was just allocated and is ours alone. The arrays belong to the boxed
    // descriptor, which the allocation owns and never mutates; consumers only read them.
    unsafe {
        let descriptor = &(*forwarded).descriptor;
        let tensor = &mut (*forwarded).header.dl_tensor;
        tensor.shape = descriptor.shape().as_ptr().cast_mut();
        tensor.strides = descriptor.strides().as_ptr().cast_mut();
        (*forwarded).header.manager_ctx = forwarded.cast();
    }
    // SAFETY: a fully initialised header at the current major version, whose deleter frees
    // exactly this allocation once and never unwinds into C (see `delete_forwarded`).
    let managed = unsafe { Managed::from_raw(forwarded.cast::<DLManagedTensorVersioned>()) };
    Ok(managed.expect("a non-null header at the current major version"))
}

/// The deleter of a forwarded tensor.
unsafe extern "C" fn delete_forwarded(header: *mut DLManagedTensorVersioned) {
    if header.is_null() {
        return;
    }
    // SAFETY: a non-null header passed to this deleter is the first field of a `Forwarded`
    // made by `Box::into_raw` in `forward_versioned`, and DLPack calls the deleter once.
    let forwarded = unsafe { Box::from_raw(header.cast::<Forwarded>()) };
    let Forwarded {
        producer, release, ..
    } = *forwarded;
    // A panic must not cross this `extern "C"` boundary; the tensor is then leaked.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| release(producer)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::ElementType;
    use crate::test_support::{CountingOwner, counted_versioned};
    use dlpark::DlpackFlags;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn imported(shape: &[i64], strides: &[i64]) -> (ImportedTensor, std::sync::Arc<AtomicUsize>) {
        let (raw, count) = counted_versioned(shape, strides);
        // SAFETY: `raw` was just produced and is handed over.
        let managed = unsafe { ManagedTensor::from_versioned_raw(raw) }.unwrap();
        (ImportedTensor::new(managed).unwrap(), count)
    }

    #[test]
    fn the_header_restates_the_descriptor() {
        let (tensor, count) = imported(&[2, 3, 4], &[1, 2, 6]);
        let expected = tensor.descriptor().clone();
        let forwarded = forward_versioned(tensor, drop).unwrap();
        let raw = forwarded.into_raw();
        // SAFETY: `raw` is the header just made, owned here until its deleter runs.
        let header = unsafe { &*raw };
        assert_eq!(header.version, DLPackVersion::CURRENT);
        assert_eq!(header.flags, DlpackFlags::empty());
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

    #[test]
    fn the_release_gets_the_producers_tensor_once() {
        static RELEASED: AtomicUsize = AtomicUsize::new(0);
        fn counting(tensor: ManagedTensor) {
            RELEASED.fetch_add(1, Ordering::SeqCst);
            drop(tensor);
        }
        let (tensor, count) = imported(&[5], &[1]);
        let forwarded = forward_versioned(tensor, counting).unwrap();
        assert_eq!(RELEASED.load(Ordering::SeqCst), 0);
        drop(forwarded);
        assert_eq!(RELEASED.load(Ordering::SeqCst), 1);
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    #[test]
    fn a_panicking_release_does_not_unwind_into_the_caller() {
        fn panicking(tensor: ManagedTensor) {
            std::mem::forget(tensor);
            panic!("a release that fails");
        }
        let (tensor, _count) = imported(&[1], &[1]);
        drop(forward_versioned(tensor, panicking).unwrap());
    }
}
