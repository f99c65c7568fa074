//! An export's owner (a Julia array's root, a foreign tensor) given back only after the work
//! its consumers enqueued on the memory: DLPack deleters carry no stream, and a consumer
//! (torch) calls its deleter without waiting for its own streams, while the producer's
//! allocator (CUDA.jl's pool) reuses the memory on its own stream at once. The owner goes into
//! a managed tensor of its own, the shape a release takes, and the release is fenced on the
//! consumers' streams ([`PendingRelease::of_export`]) for a queue to complete.

use crate::descriptor::TensorDescriptor;
use crate::export::export_versioned;
use crate::export::plan::ordered_by_streams;
use crate::managed::ManagedTensor;
use crate::release::{PendingRelease, ordering_device, ordering_disabled};

/// Gives `owner`, which keeps the memory `descriptor` describes alive, back after the work
/// enqueued so far on each of `streams` (its consumers', as [`PendingRelease::of_export`]).
/// `None` when nothing is to be waited for (memory no stream orders, no stream named, an empty
/// tensor, ordering switched off for a test): `owner` has then been dropped here, at once,
/// with no allocation and no driver call. Otherwise the release to queue, which holds `owner`
/// until it completes.
///
/// # Safety
/// As [`PendingRelease::of_export`]: each of `streams` is 1, 2 or a `CUstream` of the memory's
/// device that is live now.
pub unsafe fn give_back_after<O: Send + 'static>(
    owner: O,
    descriptor: &TensorDescriptor,
    streams: &[usize],
) -> Option<PendingRelease> {
    if streams.is_empty()
        || !ordered_by_streams(descriptor.device().kind)
        || ordering_device(descriptor).is_none()
        || ordering_disabled()
    {
        drop(owner);
        return None;
    }
    // Restating a valid descriptor cannot fail; were it to, the owner is dropped by
    // `export_versioned` (given back unordered rather than never).
    let managed = export_versioned(descriptor, owner, 3).ok()?;
    // SAFETY: the caller's contract.
    Some(unsafe {
        PendingRelease::of_export(ManagedTensor::Versioned(managed), descriptor, streams)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Device, DeviceKind};
    use crate::dtype::ElementType;
    use crate::error::Error;
    use crate::test_support::{CountingOwner, descriptor_on, require_no_driver};

    const CUDA0: Device = Device {
        kind: DeviceKind::Cuda,
        id: 0,
    };

    /// Holds with and without a driver: an owner with nothing to wait for (host memory, no
    /// stream, an empty tensor) is dropped at once, and no release is made.
    #[test]
    fn an_export_owner_with_nothing_to_wait_for_is_dropped_at_once() {
        static DATA: [f32; 4] = [0.0; 4];
        let host = descriptor_on(
            Device::CPU,
            DATA.as_ptr() as usize,
            &[4],
            &[1],
            ElementType::Float32,
        );
        let device = descriptor_on(CUDA0, 0x1000, &[4], &[1], ElementType::Float32);
        let empty = descriptor_on(CUDA0, 0x1000, &[0], &[1], ElementType::Float32);
        for (descriptor, streams) in [
            (&host, &[0x7f00usize][..]),
            (&device, &[][..]),
            (&empty, &[1][..]),
        ] {
            let (owner, count) = CountingOwner::new();
            // SAFETY: no stream is recorded on (host memory, none named, nothing to order).
            let release = unsafe { give_back_after(owner, descriptor, streams) };
            assert!(release.is_none());
            assert_eq!(CountingOwner::releases(&count), 1, "dropped at once");
        }
    }

    /// Asserts what happens without a driver (CI): device memory with a consumer stream holds
    /// its owner in an ordered release until that release completes.
    #[test]
    fn without_a_driver_an_export_owner_is_held_by_an_ordered_release() {
        require_no_driver();
        let device = descriptor_on(CUDA0, 0x1000, &[4], &[1], ElementType::Float32);
        let (owner, count) = CountingOwner::new();
        // SAFETY: without a driver no handle is dereferenced.
        let release = unsafe { give_back_after(owner, &device, &[0x7f00]) };
        let release = release.expect("device memory with a stream is ordered");
        assert!(release.is_ordered());
        assert_eq!(CountingOwner::releases(&count), 0, "held by the release");
        assert!(matches!(release.complete(), Err(Error::NoCudaDriver)));
        assert_eq!(CountingOwner::releases(&count), 1);
    }
}
