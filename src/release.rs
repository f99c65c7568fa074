//! Release ordering: an imported tensor on its way to its producer's deleter.
//!
//! DLPack leaves it to the consumer. A GPU producer's deleter hands the memory back at once
//! (torch's caching allocator gives it to the next tensor allocated on its stream), so the
//! work the consumer enqueued on the memory must be complete before the deleter runs. So an
//! imported CUDA tensor remembers the stream its consumer named at import
//! ([`crate::ImportedTensor::set_consumer_stream`]: where the producer made the data ready,
//! and where the consumer works on it), and releasing it
//! ([`crate::ImportedTensor::into_release`], or [`crate::ImportedTensor::into_release_after`]
//! with the releasing caller's stream as well) records an event on those streams. The
//! [`PendingRelease`] it becomes runs the deleter only after the events:
//! [`PendingRelease::complete`] (and dropping it) waits for them on the host, and a queue of
//! releases asks [`PendingRelease::is_ready`] and keeps the ones that are not. Why the host
//! waits rather than the producer's stream: [`crate::cuda::fence`].
//!
//! Host memory, empty tensors and imports with `stream=-1` (the consumer said it orders
//! itself) need no fence: their releases run the deleter at once and make no driver call.
//!
//! Errors never keep a tensor alive: when an event cannot be recorded or waited for (the
//! stream handle was destroyed, the context is broken, no driver), the deleter still runs —
//! after whatever could be waited for — and the failure is returned to whoever can report it.
//! A leaked tensor would hold the producer's memory (and a Python object) for the rest of the
//! process, and a driver that refuses the stream will not run new work on it either.
//!
//! For the GPU check only: in a build with the `unordered-releases-for-tests` feature
//! (scripts/gpu_check.sh's; never a shipped one), `RSDLPACK_TEST_UNORDERED_RELEASES=1` in the
//! environment (read once per process) makes releases record no fence, so that the check can
//! show the corruption it guards against (test/gpu/check_gpu.py).

use crate::cuda::fence::ReleaseFence;
use crate::descriptor::TensorDescriptor;
use crate::device::DeviceKind;
use crate::error::{Error, Result};
use crate::managed::ManagedTensor;
#[cfg(feature = "unordered-releases-for-tests")]
use std::sync::OnceLock;

/// The environment variable that turns release ordering off, for the GPU check's negative case.
pub const UNORDERED_RELEASES_FOR_TESTS: &str = "RSDLPACK_TEST_UNORDERED_RELEASES";

/// Whether [`UNORDERED_RELEASES_FOR_TESTS`] is set to 1 (read once), in a build with the
/// `unordered-releases-for-tests` feature; never otherwise.
#[cfg(feature = "unordered-releases-for-tests")]
fn ordering_disabled() -> bool {
    static DISABLED: OnceLock<bool> = OnceLock::new();
    *DISABLED.get_or_init(|| {
        std::env::var_os(UNORDERED_RELEASES_FOR_TESTS).is_some_and(|value| value == "1")
    })
}

#[cfg(not(feature = "unordered-releases-for-tests"))]
fn ordering_disabled() -> bool {
    false
}

/// The CUDA device whose streams can use `descriptor`'s memory, or `None` when no device
/// work can touch it (host memory, or an empty tensor). Pinned host memory belongs to no
/// device; DLPack gives it id 0 and so does this (as the pointer check does).
pub fn ordering_device(descriptor: &TensorDescriptor) -> Option<i32> {
    let device = descriptor.device();
    if descriptor.element_count() == 0 {
        return None;
    }
    match device.kind {
        DeviceKind::Cuda | DeviceKind::CudaManaged => Some(device.id),
        DeviceKind::CudaHost => Some(0),
        _ => None,
    }
}

/// A producer's tensor whose deleter is to run once the consumer's work on it is complete.
/// Dropping it waits for that work on the host, then runs the deleter; [`Self::complete`]
/// does the same and says what failed.
pub struct PendingRelease {
    /// `Some` until the deleter has run.
    managed: Option<ManagedTensor>,
    fence: Option<ReleaseFence>,
    /// A failure while recording the fence, returned by [`Self::complete`].
    error: Option<Error>,
}

impl PendingRelease {
    /// A release with nothing to wait for.
    pub fn unordered(managed: ManagedTensor) -> Self {
        Self {
            managed: Some(managed),
            fence: None,
            error: None,
        }
    }

    /// A release of `managed` (described by `descriptor`) ordered after the work enqueued so
    /// far on `consumer` and on `caller` (`CUstream` values), when its memory is on a device.
    ///
    /// # Safety
    /// `consumer` and `caller` must each be `None`, 1, 2 or a live `CUstream` of the tensor's
    /// device.
    pub(crate) unsafe fn after(
        managed: ManagedTensor,
        descriptor: &TensorDescriptor,
        consumer: Option<usize>,
        caller: Option<usize>,
    ) -> Self {
        let Some(device) = ordering_device(descriptor) else {
            return Self::unordered(managed);
        };
        let Some(first) = consumer.or(caller) else {
            return Self::unordered(managed);
        };
        if ordering_disabled() {
            return Self::unordered(managed);
        }
        let second = caller.filter(|_| consumer.is_some());
        // SAFETY: the streams are 1, 2 or live streams of the tensor's device (contract).
        let (fence, recorded) = unsafe { ReleaseFence::record(device, first, second) };
        Self {
            managed: Some(managed),
            fence: Some(fence),
            error: recorded.err(),
        }
    }

    /// Whether the deleter may run without waiting: no fence, or every event completed.
    pub fn is_ready(&self) -> bool {
        self.fence.as_ref().is_none_or(ReleaseFence::is_complete)
    }

    /// Whether a fence orders this release (for tests: host memory and `stream=-1` have none).
    pub fn is_ordered(&self) -> bool {
        self.fence.is_some()
    }

    /// Waits on the host for the consumer's work without running the deleter yet (so that a
    /// caller can wait without a lock the deleter needs, such as Python's GIL). A failure is
    /// kept for [`Self::complete`].
    pub fn wait(&mut self) {
        if let Some(Err(error)) = self.fence.take().map(ReleaseFence::wait) {
            self.error.get_or_insert(error);
        }
    }

    /// Waits on the host for the consumer's work, then runs the deleter — always, also after a
    /// failure, which it then returns (the first: recording, then waiting).
    pub fn complete(mut self) -> Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        self.wait();
        drop(self.managed.take());
        self.error.take().map_or(Ok(()), Err)
    }
}

impl Drop for PendingRelease {
    fn drop(&mut self) {
        // Errors are dropped: Drop has no caller to tell (use `complete` to hear them).
        let _ = self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::dtype::ElementType;
    use crate::export::export_versioned;
    use crate::imported::ImportedTensor;
    use crate::stream::StreamRequest;
    use crate::test_support::{CountingOwner, descriptor_on};
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    const CUDA0: Device = Device {
        kind: DeviceKind::Cuda,
        id: 0,
    };

    /// A Float32 tensor of `shape` (row-major) claiming to be at `address` on `device`, whose
    /// owner counts releases. Nothing reads the memory.
    fn tensor_on(
        device: Device,
        address: usize,
        shape: &[i64],
    ) -> (ImportedTensor, Arc<AtomicUsize>) {
        let strides: Vec<i64> = match shape {
            [] => vec![],
            [_] => vec![1],
            _ => unreachable!("one dimension suffices here"),
        };
        let spec = descriptor_on(device, address, shape, &strides, ElementType::Float32);
        let (owner, count) = CountingOwner::new();
        let managed = export_versioned(&spec, owner, 3).unwrap();
        (
            ImportedTensor::new(ManagedTensor::Versioned(managed)).unwrap(),
            count,
        )
    }

    /// Holds with and without a driver: host memory has nothing to wait for, so its release
    /// makes no driver call and remembers no stream.
    #[test]
    fn a_host_tensor_is_released_at_once_whatever_the_streams() {
        static DATA: [f32; 4] = [0.0; 4];
        let (mut tensor, count) = tensor_on(Device::CPU, DATA.as_ptr() as usize, &[4]);
        // SAFETY: host memory: no stream is remembered, so none is ever dereferenced.
        unsafe { tensor.set_consumer_stream(StreamRequest::Handle(0x1230)) };
        assert_eq!(tensor.consumer_stream(), None);
        // SAFETY: ignored for host memory (no driver call is made).
        let release = unsafe { tensor.into_release_after(0x4560) };
        assert!(!release.is_ordered() && release.is_ready());
        assert_eq!(CountingOwner::releases(&count), 0);
        release.complete().unwrap();
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    /// Holds with and without a driver: `stream=-1` and empty tensors need no fence.
    #[test]
    fn no_sync_imports_and_empty_device_tensors_are_released_at_once() {
        let (mut tensor, count) = tensor_on(CUDA0, 0x1000, &[4]);
        // SAFETY: no stream is named.
        unsafe { tensor.set_consumer_stream(StreamRequest::NoSync) };
        assert_eq!(tensor.consumer_stream(), None);
        let release = tensor.into_release();
        assert!(!release.is_ordered());
        drop(release);
        assert_eq!(CountingOwner::releases(&count), 1);

        let (mut empty, count) = tensor_on(CUDA0, 0x1000, &[0]);
        // SAFETY: an empty tensor remembers no stream (nothing to protect).
        unsafe { empty.set_consumer_stream(StreamRequest::Handle(0x1230)) };
        assert_eq!(empty.consumer_stream(), None);
        // SAFETY: ignored for an empty tensor.
        let release = unsafe { empty.into_release_after(0x4560) };
        assert!(!release.is_ordered());
        release.complete().unwrap();
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    /// Asserts what happens without a driver (CI); skipped by scripts/test.sh where one exists
    /// (tests_gpu covers it there).
    fn require_no_driver() {
        let here = crate::cuda::driver();
        assert!(
            matches!(here, Err(Error::NoCudaDriver)),
            "asserts the no-driver behaviour, but this machine answers {here:?}: scripts/test.sh \
             skips without_a_driver_* tests where a driver exists"
        );
    }

    #[test]
    fn without_a_driver_a_device_release_runs_the_deleter_and_says_why() {
        require_no_driver();
        for kind in [
            DeviceKind::Cuda,
            DeviceKind::CudaManaged,
            DeviceKind::CudaHost,
        ] {
            let device = Device { kind, id: 0 };
            let (mut tensor, count) = tensor_on(device, 0x1000, &[4]);
            // SAFETY: without a driver no handle is ever dereferenced.
            unsafe { tensor.set_consumer_stream(StreamRequest::Omitted) };
            assert_eq!(
                tensor.consumer_stream(),
                Some(1),
                "omitted: the legacy default stream"
            );
            // SAFETY: as above.
            unsafe { tensor.set_consumer_stream(StreamRequest::Handle(0x1230)) };
            assert_eq!(tensor.consumer_stream(), Some(0x1230));
            let release = tensor.into_release();
            assert!(release.is_ordered(), "{kind:?}");
            assert!(
                release.is_ready(),
                "nothing could be recorded, so nothing to wait for"
            );
            assert_eq!(CountingOwner::releases(&count), 0);
            let outcome = release.complete();
            assert!(matches!(outcome, Err(Error::NoCudaDriver)), "{outcome:?}");
            assert_eq!(
                CountingOwner::releases(&count),
                1,
                "released despite the error"
            );
        }
        // Dropped instead of completed: released too, the error unheard.
        let (tensor, count) = tensor_on(CUDA0, 0x1000, &[4]);
        // SAFETY: as above.
        drop(unsafe { tensor.into_release_after(2) });
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    /// Asserts what happens without a driver (CI): a forwarded device tensor's deleter hands
    /// its release on, which runs the producer's deleter once.
    #[test]
    fn without_a_driver_a_forwarded_device_tensor_is_released_once() {
        require_no_driver();
        let (mut tensor, count) = tensor_on(CUDA0, 0x1000, &[4]);
        // SAFETY: without a driver no handle is ever dereferenced.
        unsafe { tensor.set_consumer_stream(StreamRequest::Handle(0x1230)) };
        fn ordered(release: PendingRelease) {
            assert!(release.is_ordered());
            assert!(matches!(release.complete(), Err(Error::NoCudaDriver)));
        }
        let forwarded = crate::forward::forward_versioned(tensor, ordered).unwrap();
        assert_eq!(CountingOwner::releases(&count), 0);
        drop(forwarded);
        assert_eq!(CountingOwner::releases(&count), 1);
    }
}
