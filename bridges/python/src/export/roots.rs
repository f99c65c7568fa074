//! Julia arrays handed to Python consumers (`share`): the exported tensor's owner names the
//! array by a root id, and Julia keeps the array alive in a table under that id.
//!
//! A consumer may release the tensor on any thread (Python frees where it likes), and no Julia
//! code may run there, so the owner's drop only queues the id; Julia takes the queued ids
//! ([`take_released`]) when it next enters RsDLPack on a Julia thread and unroots them.
//!
//! The queue has a slot in front of it: an id released while the slot is empty goes there with
//! one atomic exchange, and the next take empties it with another. A share consumed at once
//! (the common pattern: `np.from_dlpack(share(A))`, each call's released root taken by the
//! next) never touches the lock. Ids released while the slot is full, and the slot's own
//! sentinel id, go to the queue under its lock.

use rsdlpack::cuda::fence::FenceStream;
use rsdlpack::export::given_back::give_back_after;
use rsdlpack::release::ConsumerFences;
use rsdlpack::{PendingRelease, TensorDescriptor};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The slot: one released id, or [`VACANT`].
static LATEST: AtomicU64 = AtomicU64::new(VACANT);
/// The id the slot reads as empty; an id equal to it is queued instead.
const VACANT: u64 = u64::MAX;
/// Ids released while the slot was full.
static RELEASED: Mutex<Vec<u64>> = Mutex::new(Vec::new());
/// How many ids wait in `RELEASED` (set under its lock): read without the lock.
static QUEUED: AtomicUsize = AtomicUsize::new(0);

/// The owner inside an exported Julia array's tensor.
pub struct JuliaRoot(pub u64);

/// A [`JuliaRoot`] whose release sets a flag that the call which handed it out keeps
/// ([`Self::new`]): the owner handed to a consumer's C API, which may release it before
/// returning, on whichever thread it likes (see [`super::share_into`]).
///
/// For device memory the consumer works on it on a stream, and calls the deleter without
/// waiting for that stream (torch's storage deleter), while CUDA.jl's pool reuses the block
/// as soon as the root comes back: the root then comes back only once an event recorded on
/// that stream at the release has completed ([`ConsumerFence`], queued as an exporter's memory
/// is: [`rsdlpack::export::given_back::give_back_after`]). Host memory has none, and its release
/// stays a flag store and the root's queueing.
pub struct NotedRoot {
    released: Arc<AtomicBool>,
    /// `Some` until dropped.
    root: Option<JuliaRoot>,
    /// Where the release is ordered, for device memory; `None` for host memory.
    fence: Option<Box<ConsumerFence>>,
}

/// What a [`NotedRoot`] of device memory orders its release after: the consumer's `stream` (a
/// `CUstream` value, [`rsdlpack::export::plan::exchange_api_release_stream`], an alias with the
/// context current at the share: [`FenceStream::named_now`]), recorded on for the memory
/// `descriptor` describes when the root is released, as an exporter's capsule records its
/// consumer's.
pub struct ConsumerFence {
    pub descriptor: TensorDescriptor,
    pub stream: FenceStream,
}

impl NotedRoot {
    /// The root, and the flag its drop sets. `fence`: where the release waits for the
    /// consumer's work (`None`: given back at once).
    ///
    /// # Safety
    /// `fence`'s stream must be 1, 2 or a `CUstream` of its memory's device that is live until
    /// the root is dropped (the consumer's current work stream: it works on the memory there,
    /// until it releases it).
    pub unsafe fn new(
        root: JuliaRoot,
        fence: Option<Box<ConsumerFence>>,
    ) -> (Self, Arc<AtomicBool>) {
        let released = Arc::new(AtomicBool::new(false));
        let noted = Self {
            released: Arc::clone(&released),
            root: Some(root),
            fence,
        };
        (noted, released)
    }
}

impl NotedRoot {
    /// Gives the root back, as the drop does: at once for host memory (`None`), else the
    /// release to queue, fenced on the consumer's stream.
    fn give_back(&mut self) -> Option<PendingRelease> {
        let root = self.root.take();
        let Some(fence) = self.fence.take() else {
            drop(root);
            return None;
        };
        let ConsumerFence { descriptor, stream } = *fence;
        let fences = ConsumerFences::new();
        // SAFETY: the stream is live until now (`new`'s contract), and the event recorded on
        // it here orders the root's return after the work enqueued there so far.
        unsafe { fences.record(&descriptor, stream) };
        // A root with nothing to wait for is dropped here: its drop only queues its id.
        give_back_after(root, &fences).queued()
    }
}

impl Drop for NotedRoot {
    fn drop(&mut self) {
        // Release: pairs with the Acquire load of whoever reads the flag; the root itself is
        // given back just after, which the reader does not need.
        self.released.store(true, Ordering::Release);
        if let Some(release) = self.give_back() {
            // Never waits and runs no Python: the deleter may run on any thread.
            crate::python::release::defer(release);
        }
    }
}

impl Drop for JuliaRoot {
    fn drop(&mut self) {
        let id = self.0;
        // Release: the id is published with whatever the consumer did before dropping it.
        if id == VACANT
            || LATEST
                .compare_exchange(VACANT, id, Ordering::Release, Ordering::Relaxed)
                .is_err()
        {
            let mut released = RELEASED.lock().unwrap_or_else(|p| p.into_inner());
            released.push(id);
            QUEUED.store(released.len(), Ordering::Release);
        }
    }
}

/// How many released root ids wait for Julia (a hint: it may change right after).
pub fn released_count() -> usize {
    QUEUED.load(Ordering::Acquire) + usize::from(LATEST.load(Ordering::Acquire) != VACANT)
}

/// Moves up to `out.len()` released ids into `out`; returns how many.
pub fn take_released(out: &mut [u64]) -> usize {
    let mut n = 0;
    if QUEUED.load(Ordering::Acquire) > 0 {
        let mut released = RELEASED.lock().unwrap_or_else(|p| p.into_inner());
        n = released.len().min(out.len());
        let rest = released.len() - n;
        out[..n].copy_from_slice(&released[rest..]);
        released.truncate(rest);
        QUEUED.store(rest, Ordering::Release);
    }
    if n < out.len() {
        // Acquire: pairs with the drop's Release.
        let id = LATEST.swap(VACANT, Ordering::Acquire);
        if id != VACANT {
            out[n] = id;
            n += 1;
        }
    }
    n
}

/// Held by the tests that take from the process-wide queue, so that none takes another's ids.
#[cfg(test)]
pub(crate) static QUEUE_TESTS: Mutex<()> = Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn released_roots_are_taken_once_in_batches() {
        let _queue = QUEUE_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        // The queue is process-wide: start from what other tests may have left.
        let mut sink = [0u64; 64];
        while take_released(&mut sink) > 0 {}
        for id in 1..=5 {
            drop(JuliaRoot(id));
        }
        assert_eq!(released_count(), 5);
        let mut batch = [0u64; 3];
        let first = take_released(&mut batch);
        assert_eq!(first, 3);
        let mut taken = batch[..first].to_vec();
        assert_eq!(released_count(), 2);
        let second = take_released(&mut batch);
        taken.extend_from_slice(&batch[..second]);
        taken.sort_unstable();
        assert_eq!(taken, [1, 2, 3, 4, 5]);
        assert_eq!((released_count(), take_released(&mut batch)), (0, 0));
    }

    /// A share into a type of host memory gives its root back at the drop; of device memory,
    /// only when the release fenced on the consumer's stream completes (here, without a
    /// driver, nothing can be recorded: the release completes at once when asked).
    #[test]
    fn without_a_driver_a_noted_root_of_device_memory_comes_back_with_its_release() {
        // The stream below is made up: only without a driver is it never recorded on.
        crate::test_support::require_no_driver();
        let _queue = QUEUE_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        let mut sink = [0u64; 64];
        while take_released(&mut sink) > 0 {}
        let on = |kind| {
            let device = rsdlpack::Device { kind, id: 0 };
            let mut descriptor = TensorDescriptor::empty();
            descriptor
                .julia_layout_into(
                    0x1000,
                    device,
                    rsdlpack::ElementType::Float32,
                    &[4],
                    &[1],
                    rsdlpack::IndexOrder::Producer,
                )
                .expect("a valid layout");
            descriptor
        };
        let fence = |kind| {
            Some(Box::new(ConsumerFence {
                descriptor: on(kind),
                stream: FenceStream::named_now(0x7f00),
            }))
        };

        // SAFETY: no fence: nothing is recorded.
        let (mut host, flag) = unsafe { NotedRoot::new(JuliaRoot(31), None) };
        assert!(host.give_back().is_none(), "host memory: no release");
        drop(host);
        assert!(flag.load(Ordering::Acquire));
        assert_eq!(take_released(&mut sink), 1);
        assert_eq!(sink[0], 31, "given back at once");

        for kind in [
            rsdlpack::DeviceKind::Cuda,
            rsdlpack::DeviceKind::CudaManaged,
        ] {
            // SAFETY: without a driver no stream is dereferenced.
            let (mut device, flag) = unsafe { NotedRoot::new(JuliaRoot(32), fence(kind)) };
            let release = device.give_back().expect("device memory: a fenced release");
            drop(device);
            assert!(flag.load(Ordering::Acquire), "the deleter ran");
            let early = take_released(&mut sink);
            assert_eq!(
                early,
                0,
                "{:?} came back before the release",
                &sink[..early]
            );
            assert!(release.is_ordered());
            let outcome = release.complete();
            assert!(
                matches!(outcome, Err(rsdlpack::Error::NoCudaDriver)),
                "{outcome:?}"
            );
            assert_eq!(take_released(&mut sink), 1);
            assert_eq!(sink[0], 32, "given back once the release completed");
        }
    }

    #[test]
    fn the_slot_sentinel_is_an_id_like_any_other() {
        let _queue = QUEUE_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        let mut sink = [0u64; 64];
        while take_released(&mut sink) > 0 {}
        drop(JuliaRoot(VACANT));
        drop(JuliaRoot(0));
        assert_eq!(released_count(), 2);
        let mut batch = [0u64; 1];
        let mut taken = Vec::new();
        while take_released(&mut batch) == 1 {
            taken.push(batch[0]);
        }
        taken.sort_unstable();
        assert_eq!(taken, [0, VACANT]);
        assert_eq!(released_count(), 0);
    }
}
