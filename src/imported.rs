//! Ownership of a tensor someone else produced.
//!
//! [`ImportedTensor`] owns a legacy or versioned managed tensor ([`ManagedTensor`], whose
//! drop calls the producer's deleter) together with the [`TensorDescriptor`] validated when
//! ownership was taken. The producer's deleter therefore runs exactly once: when the
//! `ImportedTensor` is dropped, or — if validation fails — before the constructor returns.
//!
//! A tensor a consumer may use on a GPU is released through [`ImportedTensor::into_release`]
//! instead of being dropped: that orders the deleter after the consumer's work on the memory
//! (see [`crate::release`]). Dropping an `ImportedTensor` runs the deleter without waiting,
//! which is right only before anyone has used it (the import's own error paths).

use crate::descriptor::TensorDescriptor;
use crate::error::Result;
// Defined in `managed`, below this module and `release` (a pending release holds one);
// re-exported here, where it was defined before.
use crate::cuda::context::HeldContext;
use crate::cuda::fence::FenceStream;
pub use crate::managed::ManagedTensor;
use crate::release::{ConsumerOrdering, PendingRelease, StreamKeeper, ordering_device};
use crate::stream::StreamRequest;
use dlpark::ffi::DLManagedTensorVersioned;
use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

// `into_raw` promises this alignment.
const _: () = assert!(align_of::<Imported>() >= 8);

/// An owned, validated foreign tensor.
pub struct ImportedTensor(Box<Imported>);

/// The one allocation of an imported tensor. A descriptor is ~560 bytes inline (see
/// [`crate::DimVec`]), so it is boxed rather than moved through the layers on its way to the
/// caller, and the managed tensor lives beside it. The first field is room for the header the
/// tensor is handed on under, should it be forwarded ([`crate::export::forward`]): the forwarded
/// tensor is then this same allocation, and forwarding allocates nothing.
#[repr(C)]
pub(crate) struct Imported {
    pub(crate) forwarding: Slot,
    pub(crate) managed: ManagedTensor,
    pub(crate) descriptor: TensorDescriptor,
    /// The `CUstream` the consumer works on the tensor on
    /// (see [`ImportedTensor::set_consumer_stream`]).
    pub(crate) consumer_stream: Option<usize>,
    /// For the aliases 1 and 2: the context current when the consumer named them.
    pub(crate) consumer_context: Option<HeldContext>,
    /// Device memory imported with `stream=-1`: the consumer orders its own work, so the
    /// release needs the caller's stream.
    pub(crate) self_ordered: bool,
    /// What keeps that stream alive until the release has recorded its event there
    /// (see [`ImportedTensor::keep_consumer_stream`]).
    pub(crate) stream_keeper: Option<StreamKeeper>,
}

/// Room in an imported tensor's allocation for the header it is forwarded under
/// ([`crate::export::forward`], which writes and reads it), and for the release that header's deleter
/// hands the producer's tensor to. Unwritten until then. Defined here, with the allocation it
/// is part of, so that this module does not reach up into `forward`.
#[repr(C)]
pub(crate) struct Slot {
    /// First, so that the pointer a consumer hands to the deleter is the allocation's.
    pub(crate) header: MaybeUninit<DLManagedTensorVersioned>,
    /// A [`crate::export::forward::Release`].
    pub(crate) release: Option<fn(ImportedTensor)>,
}

impl Slot {
    pub(crate) const EMPTY: Self = Self {
        header: MaybeUninit::uninit(),
        release: None,
    };
}

// SAFETY: the header is plain data: unwritten (and never read) while the imported tensor is
// owned, then written once when the allocation is handed on, after which only the forwarded
// `Managed` (itself Send and Sync) reaches it. Its pointers lead to the descriptor beside it,
// which is immutable, and to the tensor's memory, which an `ImportedTensor` already shares.
unsafe impl Send for Slot {}
// SAFETY: as above.
unsafe impl Sync for Slot {}

impl ImportedTensor {
    /// Validates `managed`; on error it is dropped (its deleter runs) before returning.
    #[inline]
    pub fn new(managed: ManagedTensor) -> Result<Self> {
        // Written field by field where it lies: `Box::new` of the whole struct builds it on the
        // stack and copies its ~700 bytes over, on every import.
        let mut uninit = Box::<Imported>::new_uninit();
        let place = uninit.as_mut_ptr();
        // SAFETY: every field of the fresh allocation is written before it is taken as
        // initialised.
        let mut imported = unsafe {
            (&raw mut (*place).forwarding).write(Slot::EMPTY);
            (&raw mut (*place).managed).write(managed);
            (&raw mut (*place).descriptor).write(TensorDescriptor::empty());
            (&raw mut (*place).consumer_stream).write(None);
            (&raw mut (*place).consumer_context).write(None);
            (&raw mut (*place).self_ordered).write(false);
            (&raw mut (*place).stream_keeper).write(None);
            uninit.assume_init()
        };
        let Imported {
            managed,
            descriptor,
            ..
        } = &mut *imported;
        managed.describe_into(descriptor)?;
        Ok(Self(imported))
    }

    /// `managed` with the descriptor it restates, not validated again: only for tensors this
    /// crate built from that descriptor ([`crate::export::forward::forward_owned`]).
    pub(crate) fn restating(managed: ManagedTensor, descriptor: TensorDescriptor) -> Self {
        Self(Box::new(Imported {
            forwarding: Slot::EMPTY,
            managed,
            descriptor,
            consumer_stream: None,
            consumer_context: None,
            self_ordered: false,
            stream_keeper: None,
        }))
    }

    pub fn descriptor(&self) -> &TensorDescriptor {
        &self.0.descriptor
    }

    /// Gives up the descriptor and returns the still-owned managed tensor, forgetting the
    /// consumer's stream (and dropping its keeper): its release is no longer ordered (see
    /// [`Self::into_release`]).
    pub fn into_managed(self) -> ManagedTensor {
        self.0.managed
    }

    /// Remembers the stream a consumer asked the producer to make the tensor ready on (the
    /// import's `stream` request): the consumer works on the tensor there, so its release
    /// waits for that stream's work ([`Self::into_release`]). Only memory a device can use
    /// has one (see [`crate::release::ordering_device`]); `stream=-1` (the consumer orders
    /// itself) remembers none, so that its release needs the releasing caller's stream, and a
    /// request without a stream means the legacy default stream, as it does for the producer.
    /// For the aliases 1 and 2 the context current now is the one they mean, and is held.
    ///
    /// # Safety
    /// The stream `request` names must be a default stream (1, 2, or omitted) or a live
    /// `CUstream` of the tensor's device, and stay live until the tensor is released.
    pub unsafe fn set_consumer_stream(&mut self, request: StreamRequest) {
        let on_device = crate::release::ordering_device(&self.0.descriptor).is_some();
        let stream = request.cuda_handle().filter(|_| on_device);
        self.0.consumer_stream = stream;
        self.0.self_ordered = on_device && stream.is_none();
        self.0.consumer_context = match stream {
            Some(1 | 2) => HeldContext::current().ok().flatten(),
            _ => None,
        };
    }

    /// Holds `keeper` (what keeps the consumer's stream alive, see [`crate::release`]) until
    /// the tensor's release has recorded its event on that stream, and drops it right after;
    /// or with the tensor, when it is dropped unreleased. A tensor that remembers no stream
    /// (host memory, `stream=-1`, an empty tensor) will record nothing: `keeper` is dropped
    /// at once. A keeper held already is replaced, and dropped.
    pub fn keep_consumer_stream(&mut self, keeper: StreamKeeper) {
        if self.0.consumer_stream.is_some() {
            self.0.stream_keeper = Some(keeper);
        }
    }

    /// The `CUstream` remembered by [`Self::set_consumer_stream`], if any.
    pub fn consumer_stream(&self) -> Option<usize> {
        self.0.consumer_stream
    }

    /// Runs the deleter now when the tensor's release orders after nothing (its memory is the
    /// host's, or it is empty: see [`Self::into_release`]), as completing that release would;
    /// otherwise gives the tensor back. For callers that may run the deleter here (the Python
    /// bridge: on a thread that holds the GIL), sparing host tensors the pending release.
    pub fn release_if_unordered(self) -> std::result::Result<(), Self> {
        if ordering_device(&self.0.descriptor).is_some() {
            return Err(self);
        }
        drop(self);
        Ok(())
    }

    /// Releases the tensor after the work enqueued so far on its consumer's stream: an event
    /// is recorded there now, and the [`PendingRelease`] runs the deleter once it completes.
    pub fn into_release(self) -> PendingRelease {
        // SAFETY: no caller stream; the consumer's is live (`set_consumer_stream`'s contract).
        unsafe { self.release_after(None, None) }
    }

    /// As [`Self::into_release`], ordered after the work enqueued so far on `caller` (a
    /// `CUstream`: 1, 2 or a handle) as well, for a device tensor; ignored for host memory.
    ///
    /// # Safety
    /// `caller` must be 1, 2 or a live `CUstream` of the tensor's device.
    pub unsafe fn into_release_after(self, caller: usize) -> PendingRelease {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.release_after(Some(caller), None) }
    }

    /// As [`Self::into_release_after`], with what keeps `caller` alive until the release has
    /// recorded its event there: a graph capture of `caller` defers that record past this
    /// call, and a caller that cannot promise its stream outlives it (a Julia task's, which
    /// CUDA.jl destroys once the task is collected) hands a keeper, as for the consumer's
    /// stream ([`Self::keep_consumer_stream`]). The keeper is dropped once the event is
    /// recorded, or at once when nothing is.
    ///
    /// # Safety
    /// `caller` must be 1, 2 or a live `CUstream` of the tensor's device while `keeper` lives.
    pub unsafe fn into_release_after_kept(
        self,
        caller: usize,
        keeper: StreamKeeper,
    ) -> PendingRelease {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.release_after(Some(caller), Some(keeper)) }
    }

    /// # Safety
    /// As [`Self::into_release_after`], for `caller` when it is `Some`.
    unsafe fn release_after(
        self,
        caller: Option<usize>,
        caller_keeper: Option<StreamKeeper>,
    ) -> PendingRelease {
        // Asked before the fields move out: moving the descriptor would copy its ~560 bytes.
        let device = ordering_device(&self.0.descriptor);
        let Imported {
            managed,
            consumer_stream,
            consumer_context,
            self_ordered,
            stream_keeper,
            ..
        } = *self.0;
        let consumer = consumer_stream.map(|handle| FenceStream {
            handle,
            alias_context: consumer_context,
        });
        let ordering = match consumer {
            Some(stream) => ConsumerOrdering::Stream(stream),
            None if self_ordered => ConsumerOrdering::SelfOrdered,
            None => ConsumerOrdering::Unknown,
        };
        let keepers = stream_keeper.into_iter().chain(caller_keeper).collect();
        // SAFETY: the consumer's stream is live (`set_consumer_stream`'s contract, and its
        // keeper, which the release holds until its event is recorded there), the caller's by
        // this function's (and its keeper's).
        unsafe { PendingRelease::after(managed, device, ordering, caller, keepers) }
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

    /// The allocation itself, for [`crate::export::forward`].
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
    use crate::error::Error;
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
    fn host_tensors_release_at_once_and_device_tensors_are_given_back() {
        let (raw, count) = counted_versioned(&[2, 3], &[3, 1]);
        // SAFETY: `raw` was just produced and is handed over.
        let imported =
            ImportedTensor::new(unsafe { ManagedTensor::from_versioned_raw(raw) }.unwrap())
                .unwrap();
        assert!(imported.release_if_unordered().is_ok());
        assert_eq!(CountingOwner::releases(&count), 1, "the deleter ran, once");

        let (raw, count) = counted_versioned(&[2, 3], &[3, 1]);
        // SAFETY: as above; the tensor is said to be CUDA memory (the data is never read).
        let imported = unsafe {
            (*raw).dl_tensor.device.device_type = dlpark::ffi::DLDeviceType::CUDA;
            ImportedTensor::new(ManagedTensor::from_versioned_raw(raw).unwrap()).unwrap()
        };
        let given_back = imported
            .release_if_unordered()
            .expect_err("device memory orders its release");
        assert_eq!(CountingOwner::releases(&count), 0, "not released");
        drop(given_back);
        assert_eq!(CountingOwner::releases(&count), 1);
    }
}
