//! Ownership of a tensor someone else produced.
//!
//! [`ImportedTensor`] owns a legacy or versioned managed tensor (dlpark's [`Managed`], whose
//! drop calls the producer's deleter) together with the [`TensorDescriptor`] validated when
//! ownership was taken. The producer's deleter therefore runs exactly once: when the
//! `ImportedTensor` is dropped, or — if validation fails — before the constructor returns.
//!
//! A tensor a consumer may use on a GPU is released through [`ImportedTensor::into_release`]
//! instead of being dropped: that orders the deleter after the consumer's work on the memory
//! (see [`crate::release`]). Dropping an `ImportedTensor` runs the deleter without waiting,
//! which is right only before anyone has used it (the import's own error paths).

use crate::descriptor::TensorDescriptor;
use crate::error::{Error, Result};
use crate::release::PendingRelease;
use crate::stream::StreamRequest;
use dlpark::Managed;
use dlpark::dlpack::FromRawError;
use dlpark::ffi::{DLManagedTensor, DLManagedTensorVersioned};
use std::ffi::c_void;
use std::ptr::NonNull;

// `into_raw` promises this alignment.
const _: () = assert!(align_of::<Imported>() >= 8);

/// A managed tensor in either DLPack ABI. Dropping it calls the producer's deleter.
pub enum ManagedTensor {
    Legacy(Managed<DLManagedTensor>),
    Versioned(Managed<DLManagedTensorVersioned>),
}

impl ManagedTensor {
    /// Takes ownership of a versioned managed tensor. A tensor of another major version is
    /// released (its deleter sits where every major version keeps it) and refused.
    ///
    /// # Safety
    /// `ptr` must be null or point to a `DLManagedTensorVersioned` the caller owns and gives up;
    /// its deleter, if any, must be callable once from any thread.
    pub unsafe fn from_versioned_raw(ptr: *mut DLManagedTensorVersioned) -> Result<Self> {
        // SAFETY: forwarded from this function's contract.
        match unsafe { Managed::from_raw(ptr) } {
            Ok(managed) => Ok(Self::Versioned(managed)),
            Err(FromRawError::Null) => Err(Error::NullTensor),
            Err(FromRawError::Version { source }) => Err(Error::UnsupportedVersion {
                found: source.actual,
                supported: source.expected,
            }),
            Err(_) => Err(Error::NullTensor),
        }
    }

    /// Takes ownership of a legacy managed tensor.
    ///
    /// # Safety
    /// As [`Self::from_versioned_raw`], for a `DLManagedTensor`.
    pub unsafe fn from_legacy_raw(ptr: *mut DLManagedTensor) -> Result<Self> {
        // SAFETY: forwarded from this function's contract; legacy tensors carry no version.
        match unsafe { Managed::from_raw(ptr) } {
            Ok(managed) => Ok(Self::Legacy(managed)),
            Err(_) => Err(Error::NullTensor),
        }
    }

    /// Validates the metadata into `descriptor` (where it already lies: see
    /// [`TensorDescriptor::validate_into`]). The tensor stays owned by `self` whatever the
    /// outcome.
    #[inline]
    fn describe_into(&self, descriptor: &mut TensorDescriptor) -> Result<()> {
        match self {
            // SAFETY: a `Managed` owns its tensor, whose metadata the producer keeps readable and
            // unchanged until the deleter runs, which cannot happen while `self` is borrowed.
            Self::Legacy(m) => unsafe { descriptor.validate_into(m.tensor(), None, m.flags()) },
            // SAFETY: as above.
            Self::Versioned(m) => unsafe {
                descriptor.validate_into(m.tensor(), Some(m.version()), m.flags())
            },
        }
    }
}

/// An owned, validated foreign tensor.
pub struct ImportedTensor(Box<Imported>);

/// The one allocation of an imported tensor. A descriptor is ~560 bytes inline (see
/// [`crate::DimVec`]), so it is boxed rather than moved through the layers on its way to the
/// caller, and the managed tensor lives beside it. The first field is room for the header the
/// tensor is handed on under, should it be forwarded ([`crate::forward`]): the forwarded
/// tensor is then this same allocation, and forwarding allocates nothing.
#[repr(C)]
pub(crate) struct Imported {
    pub(crate) forwarding: crate::forward::Slot,
    pub(crate) managed: ManagedTensor,
    pub(crate) descriptor: TensorDescriptor,
    /// The `CUstream` the consumer works on the tensor on
    /// (see [`ImportedTensor::set_consumer_stream`]).
    pub(crate) consumer_stream: Option<usize>,
}

impl ImportedTensor {
    /// Validates `managed`; on error it is dropped (its deleter runs) before returning.
    #[inline]
    pub fn new(managed: ManagedTensor) -> Result<Self> {
        let mut imported = Box::new(Imported {
            forwarding: crate::forward::Slot::EMPTY,
            managed,
            descriptor: TensorDescriptor::empty(),
            consumer_stream: None,
        });
        let Imported {
            managed,
            descriptor,
            ..
        } = &mut *imported;
        managed.describe_into(descriptor)?;
        Ok(Self(imported))
    }

    /// `managed` with the descriptor it restates, not validated again: only for tensors this
    /// crate built from that descriptor ([`crate::forward::forward_owned`]).
    pub(crate) fn restating(managed: ManagedTensor, descriptor: TensorDescriptor) -> Self {
        Self(Box::new(Imported {
            forwarding: crate::forward::Slot::EMPTY,
            managed,
            descriptor,
            consumer_stream: None,
        }))
    }

    pub fn descriptor(&self) -> &TensorDescriptor {
        &self.0.descriptor
    }

    /// Gives up the descriptor and returns the still-owned managed tensor, forgetting the
    /// consumer's stream: its release is no longer ordered (see [`Self::into_release`]).
    pub fn into_managed(self) -> ManagedTensor {
        self.0.managed
    }

    /// Remembers the stream a consumer asked the producer to make the tensor ready on (the
    /// import's `stream` request): the consumer works on the tensor there, so its release
    /// waits for that stream's work ([`Self::into_release`]). Only memory a device can use
    /// has one (see [`crate::release::ordering_device`]); `stream=-1` (the consumer orders
    /// itself) remembers none, and a request without a stream means the legacy default
    /// stream, as it does for the producer.
    ///
    /// # Safety
    /// The stream `request` names must be a default stream (1, 2, or omitted) or a live
    /// `CUstream` of the tensor's device, and stay live until the tensor is released.
    pub unsafe fn set_consumer_stream(&mut self, request: StreamRequest) {
        let on_device = crate::release::ordering_device(&self.0.descriptor).is_some();
        self.0.consumer_stream = request.cuda_handle().filter(|_| on_device);
    }

    /// The `CUstream` remembered by [`Self::set_consumer_stream`], if any.
    pub fn consumer_stream(&self) -> Option<usize> {
        self.0.consumer_stream
    }

    /// Releases the tensor after the work enqueued so far on its consumer's stream: an event
    /// is recorded there now, and the [`PendingRelease`] runs the deleter once it completes.
    pub fn into_release(self) -> PendingRelease {
        // SAFETY: no caller stream; the consumer's is live (`set_consumer_stream`'s contract).
        unsafe { self.release_after(None) }
    }

    /// As [`Self::into_release`], ordered after the work enqueued so far on `caller` (a
    /// `CUstream`: 1, 2 or a handle) as well, for a device tensor; ignored for host memory.
    ///
    /// # Safety
    /// `caller` must be 1, 2 or a live `CUstream` of the tensor's device.
    pub unsafe fn into_release_after(self, caller: usize) -> PendingRelease {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.release_after(Some(caller)) }
    }

    /// # Safety
    /// As [`Self::into_release_after`], for `caller` when it is `Some`.
    unsafe fn release_after(self, caller: Option<usize>) -> PendingRelease {
        let Imported {
            managed,
            descriptor,
            consumer_stream,
            ..
        } = *self.0;
        // SAFETY: the consumer's stream is live (`set_consumer_stream`'s contract), the
        // caller's by this function's.
        unsafe { PendingRelease::after(managed, &descriptor, consumer_stream, caller) }
    }

    /// The tensor as one pointer to its allocation (aligned to at least 8 bytes), for handles
    /// that cross an FFI boundary. [`Self::from_raw`] takes it back.
    pub fn into_raw(self) -> NonNull<c_void> {
        NonNull::from(Box::leak(self.0)).cast()
    }

    /// # Safety
    /// `raw` must come from [`Self::into_raw`] and not have been taken back before.
    pub unsafe fn from_raw(raw: NonNull<c_void>) -> Self {
        // SAFETY: an allocation `into_raw` leaked, handed back once (this function's contract).
        Self(unsafe { Box::from_raw(raw.as_ptr().cast::<Imported>()) })
    }

    /// The allocation itself, for [`crate::forward`].
    pub(crate) fn into_box(self) -> Box<Imported> {
        self.0
    }

    /// An allocation [`Self::into_box`] gave up, owned again (its forwarding slot is plain
    /// data and is ignored).
    pub(crate) fn from_box(imported: Box<Imported>) -> Self {
        Self(imported)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{CountingOwner, counted_versioned};

    #[test]
    fn deleter_runs_once_on_drop() {
        let (raw, count) = counted_versioned(&[2, 3], &[3, 1]);
        // SAFETY: `raw` was just produced and is handed over.
        let imported =
            ImportedTensor::new(unsafe { ManagedTensor::from_versioned_raw(raw) }.unwrap())
                .unwrap();
        assert_eq!(imported.descriptor().shape(), vec![2, 3]);
        assert_eq!(CountingOwner::releases(&count), 0);
        drop(imported);
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    #[test]
    fn deleter_runs_once_when_validation_fails() {
        let (raw, count) = counted_versioned(&[2, -3], &[3, 1]);
        // SAFETY: `raw` was just produced and is handed over.
        let managed = unsafe { ManagedTensor::from_versioned_raw(raw) }.unwrap();
        assert!(matches!(
            ImportedTensor::new(managed),
            Err(Error::NegativeDimension { .. })
        ));
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    #[test]
    fn deleter_runs_once_when_the_major_version_is_foreign() {
        let (raw, count) = counted_versioned(&[2], &[1]);
        // SAFETY: `raw` is a live tensor we own; only its version field changes.
        unsafe { (*raw).version.major = 2 };
        // SAFETY: handed over.
        let result = unsafe { ManagedTensor::from_versioned_raw(raw) };
        assert!(matches!(
            result,
            Err(Error::UnsupportedVersion {
                found: 2,
                supported: 1
            })
        ));
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    #[test]
    fn null_is_refused() {
        // SAFETY: null is explicitly allowed by the contract.
        let result = unsafe { ManagedTensor::from_versioned_raw(std::ptr::null_mut()) };
        assert!(matches!(result, Err(Error::NullTensor)));
    }
}
