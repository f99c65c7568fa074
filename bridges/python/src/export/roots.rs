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
pub struct NotedRoot {
    _root: JuliaRoot,
    released: Arc<AtomicBool>,
}

impl NotedRoot {
    /// The root, and the flag its drop sets.
    pub fn new(root: JuliaRoot) -> (Self, Arc<AtomicBool>) {
        let released = Arc::new(AtomicBool::new(false));
        let noted = Self {
            _root: root,
            released: Arc::clone(&released),
        };
        (noted, released)
    }
}

impl Drop for NotedRoot {
    fn drop(&mut self) {
        // Release: pairs with the Acquire load of whoever reads the flag; the root itself is
        // queued just after (the field's drop), which the reader does not need.
        self.released.store(true, Ordering::Release);
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
