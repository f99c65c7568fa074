//! Julia arrays handed to Python consumers (`share`): the exported tensor's owner names the
//! array by a root id, and Julia keeps the array alive in a table under that id.
//!
//! A consumer may release the tensor on any thread (Python frees where it likes), and no Julia
//! code may run there, so the owner's drop only queues the id; Julia takes the queued ids
//! ([`take_released`]) when it next enters RsDLPack on a Julia thread and unroots them.

use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

static RELEASED: Mutex<Vec<u64>> = Mutex::new(Vec::new());
/// How many ids wait in `RELEASED`: read without the lock by every entry point.
static RELEASED_COUNT: AtomicUsize = AtomicUsize::new(0);

/// The owner inside an exported Julia array's tensor.
pub struct JuliaRoot(pub u64);

thread_local! {
    /// The id of the root last released on this thread (see [`last_released_here`]).
    static LAST_RELEASED: Cell<u64> = const { Cell::new(0) };
}

impl Drop for JuliaRoot {
    fn drop(&mut self) {
        LAST_RELEASED.set(self.0);
        let mut released = RELEASED.lock().unwrap_or_else(|p| p.into_inner());
        released.push(self.0);
        RELEASED_COUNT.store(released.len(), Ordering::Release);
    }
}

/// The id of the root whose owner was last dropped on this thread: tells whether a call that
/// was handed an owner released it before returning.
pub fn last_released_here() -> u64 {
    LAST_RELEASED.get()
}

/// How many released root ids wait for Julia (a hint: it may grow right after).
pub fn released_count() -> usize {
    RELEASED_COUNT.load(Ordering::Acquire)
}

/// Moves up to `out.len()` released ids into `out`; returns how many.
pub fn take_released(out: &mut [u64]) -> usize {
    let mut released = RELEASED.lock().unwrap_or_else(|p| p.into_inner());
    let n = released.len().min(out.len());
    let rest = released.len() - n;
    out[..n].copy_from_slice(&released[rest..]);
    released.truncate(rest);
    RELEASED_COUNT.store(rest, Ordering::Release);
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
}
