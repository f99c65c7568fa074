//! An export's owner (a Julia array's root, a foreign tensor) given back only after the work
//! its consumers enqueued on the memory: DLPack deleters carry no stream, and a consumer
//! (torch) calls its deleter without waiting for its own streams, while the producer's
//! allocator (CUDA.jl's pool) reuses the memory on its own stream at once. Each consumer's
//! release records an event on its stream when it runs ([`ConsumerFences::record`]); the
//! owner goes into a release that waits for them all ([`PendingRelease::of_export`]), for a
//! queue to complete.
//!
//! Should anything unwind on the way (it is not expected to), the owner is leaked, never
//! dropped: dropping it would hand the memory back with the consumers' work perhaps still
//! running on it, a use after free in someone else's allocator; a leak only holds memory.
//!
//! An owner with nothing left to wait for is handed back to the caller ([`GiveBack::Now`]),
//! not dropped here: the caller runs on whichever thread the last holder let go on (a
//! consumer's deleter), and dropping an owner may run a foreign producer's deleter (CuPy's
//! takes the GIL), which only the caller knows whether that thread may run.

use crate::release::{ConsumerFences, PendingRelease};
use std::mem::ManuallyDrop;

/// What [`give_back_after`] leaves to its caller.
#[must_use = "the owner is to be dropped or its release queued"]
#[allow(
    clippy::large_enum_variant,
    reason = "matched at once by the caller; boxing would allocate once more per release"
)]
pub enum GiveBack<O> {
    /// Nothing to wait for: the owner, to drop where that may run (or to queue unordered:
    /// [`PendingRelease::unordered_owner`]).
    Now(O),
    /// A release that holds the owner until every fence has completed: queue it.
    Queue(PendingRelease),
}

impl<O> GiveBack<O> {
    /// The release to queue, if any; an owner with nothing to wait for is dropped here (for
    /// owners whose drop may run on any thread: a Julia root's only queues its id).
    pub fn queued(self) -> Option<PendingRelease> {
        match self {
            Self::Now(owner) => {
                drop(owner);
                None
            }
            Self::Queue(release) => Some(release),
        }
    }
}

/// Gives `owner`, which keeps an export's memory alive, back after every fence its consumers'
/// releases left in `fences` (taken here) has completed. [`GiveBack::Now`] when nothing is to
/// be waited for (no consumer recorded a fence: memory no stream orders, no stream named, an
/// empty tensor, ordering switched off for a test; or every fence has completed): the caller
/// drops `owner` where that may run. Otherwise the release to queue, which holds `owner` until
/// it completes. If this unwinds, `owner` is leaked (see the module docs).
pub fn give_back_after<O: Send + 'static>(owner: O, fences: &ConsumerFences) -> GiveBack<O> {
    // Never dropped while anything below may unwind: leaked instead.
    let owner = ManuallyDrop::new(owner);
    #[cfg(test)]
    tests::panic_here_if_asked();
    let left = fences.take();
    let owner = ManuallyDrop::into_inner(owner);
    match left {
        None => GiveBack::Now(owner),
        Some((fence, error)) => {
            GiveBack::Queue(PendingRelease::of_export(Box::new(owner), fence, error))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::fence::FenceStream;
    use crate::device::{Device, DeviceKind};
    use crate::dtype::ElementType;
    use crate::error::Error;
    use crate::test_support::{CountingOwner, descriptor_on, require_no_driver};
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const CUDA0: Device = Device {
        kind: DeviceKind::Cuda,
        id: 0,
    };

    thread_local! {
        /// A test seam: makes `give_back_after` panic on this thread, once, where a failure
        /// while taking the fences would.
        static PANIC_HERE: Cell<bool> = const { Cell::new(false) };
    }

    pub(super) fn panic_here_if_asked() {
        if PANIC_HERE.replace(false) {
            panic!("a forced panic while giving an export's owner back");
        }
    }

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
            let fences = ConsumerFences::new();
            for &stream in streams {
                // SAFETY: no stream is recorded on (host memory, nothing to order).
                unsafe { fences.record(descriptor, FenceStream::named_now(stream)) };
            }
            let (owner, count) = CountingOwner::new();
            let GiveBack::Now(owner) = give_back_after(owner, &fences) else {
                panic!("nothing to wait for, so nothing to queue");
            };
            assert_eq!(
                CountingOwner::releases(&count),
                0,
                "handed back, not dropped"
            );
            drop(owner);
            assert_eq!(CountingOwner::releases(&count), 1);
        }
    }

    /// Asserts what happens without a driver (CI): device memory whose consumer recorded a
    /// fence holds its owner in an ordered release until that release completes.
    #[test]
    fn without_a_driver_an_export_owner_is_held_by_an_ordered_release() {
        require_no_driver();
        let device = descriptor_on(CUDA0, 0x1000, &[4], &[1], ElementType::Float32);
        let fences = ConsumerFences::new();
        // SAFETY: without a driver no handle is dereferenced.
        unsafe { fences.record(&device, FenceStream::named_now(0x7f00)) };
        let (owner, count) = CountingOwner::new();
        let release = give_back_after(owner, &fences).queued();
        let release = release.expect("device memory with a stream is ordered");
        assert!(release.is_ordered());
        assert_eq!(CountingOwner::releases(&count), 0, "held by the release");
        assert!(matches!(release.complete(), Err(Error::NoCudaDriver)));
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    /// Holds with and without a driver: a panic on the way leaks the owner (the memory stays
    /// held) rather than dropping it, which would give the memory back unfenced.
    #[test]
    fn a_panic_while_giving_back_leaks_the_owner_and_never_frees_it_unfenced() {
        let device = descriptor_on(CUDA0, 0x1000, &[4], &[1], ElementType::Float32);
        let fences = ConsumerFences::new();
        // SAFETY: without a driver no handle is dereferenced; with one, the legacy default
        // stream of a context of device 0 is live.
        unsafe { fences.record(&device, FenceStream::named_now(1)) };
        // Counted in a static: leaking it leaks no allocation (Miri checks for leaks).
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        struct Owner;
        impl Drop for Owner {
            fn drop(&mut self) {
                DROPS.fetch_add(1, Ordering::SeqCst);
            }
        }
        PANIC_HERE.set(true);
        let unwound = std::panic::catch_unwind(|| give_back_after(Owner, &fences));
        assert!(unwound.is_err(), "the forced panic");
        assert_eq!(
            DROPS.load(Ordering::SeqCst),
            0,
            "leaked, not given back unfenced"
        );
        let given = give_back_after(Owner, &fences).queued();
        drop(given);
        assert_eq!(
            DROPS.load(Ordering::SeqCst),
            1,
            "without the panic: given back"
        );
    }
}
