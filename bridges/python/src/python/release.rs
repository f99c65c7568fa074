//! Releasing tensors that Python produced, without deadlocks, after their consumers' GPU work.
//!
//! A Python producer's deleter (NumPy's, for instance) takes the GIL. Julia runs finalizers on
//! whichever thread triggered a collection; if that thread does not hold the GIL while another
//! thread does (and that thread waits for the first), calling the deleter there deadlocks. So a
//! Python-produced tensor is released at once only on a thread that already holds the GIL
//! ([`release_here_or_defer`]); anywhere else it goes to a queue that the next bridge call
//! holding the GIL drains, or that [`drain`] empties on request (`rsdlpack_py_flush_releases`).
//!
//! Each release is a [`PendingRelease`]: for a CUDA tensor, events recorded on the streams its
//! consumer used (see [`rsdlpack::release`]). No host wait ever happens with the GIL held: a
//! release at once from an entry point waits with the GIL released meanwhile, and a deleter's
//! (which cannot let go of a GIL its caller may rely on) queues a release whose events have not
//! completed. A queued one never waits for its events in the call that drains it: a bridge
//! call runs the deleters whose events have completed and leaves the rest queued, so that an
//! import does not stall on unrelated GPU work. That holds for a release that could record no
//! event and falls back to synchronising its device's context too: an ordinary call cannot
//! know that no stream of that context is being captured into a graph (synchronising the
//! context would break the capture), so such releases wait for the explicit flush. [`drain`]
//! with [`Wait::Yes`] (the explicit flush) waits for them all, except those whose stream is
//! being captured into a graph (for the fallback: while a blocking stream of its context
//! captures, or when the synchronisation is refused for a capture), which stay queued until
//! the capture has ended.
//!
//! Every tensor the bridge hands out is forwarded as a versioned managed tensor whose deleter
//! releases the producer's this way ([`forward`], [`forward_owned`]), so that consumers of the
//! bridge (the Julia bridge) never see a Python deleter and need not care about the GIL.

use rsdlpack::dlpark::Managed;
use rsdlpack::dlpark::ffi::DLManagedTensorVersioned;
use rsdlpack::export::forward::forward_versioned;
use rsdlpack::{ImportedTensor, PendingRelease};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Python-produced tensors waiting for a thread that holds the GIL (or for their consumers'
/// GPU work).
static PENDING: Mutex<Vec<PendingRelease>> = Mutex::new(Vec::new());

/// Whether `PENDING` may be non-empty: lets every bridge call skip the lock when it is not.
static MAYBE_PENDING: AtomicBool = AtomicBool::new(false);

/// Whether the calling thread holds the GIL of the interpreter the bridge serves, through its
/// own thread state: where a Python producer's deleter may run (see
/// [`super::interpreter::this_thread`]). Never answers yes for a thread that holds no GIL,
/// before or after a sub-interpreter has existed (`PyGILState_Check` alone would: CPython
/// disables it then), on any version (3.10 and 3.11 keep one current thread state for the
/// process). It answers no, and the release waits in the queue, for a thread that holds the GIL
/// in a sub-interpreter (on 3.10 and 3.11, after one has existed, nothing tells that thread from
/// one that does not hold the GIL).
#[inline]
pub fn this_thread_holds_the_gil() -> bool {
    super::interpreter::this_thread().holds_the_served_gil()
}

/// Releases `tensor` now when this thread holds the GIL (an explicit release from a C entry
/// point, not a finalizer): waits for its consumer's GPU work with the GIL released, so that
/// other Python threads run meanwhile, then runs the deleter, and returns what failed on the
/// way (the deleter has run regardless). Else queues it like [`defer`]; so is a release that
/// must synchronise its device's context (the conservative fallback), which only the explicit
/// flush waits for (see the module docs: a capture on a non-blocking stream of that context
/// cannot be seen from here, and the synchronisation would break it).
pub fn release_here_or_defer(mut tensor: PendingRelease) -> rsdlpack::Result<()> {
    if tensor.is_conservative() {
        // Said now (what to pass instead), not when the flush runs it.
        let said = tensor.take_error();
        defer(tensor);
        return said.map_or(Ok(()), Err);
    }
    if !this_thread_holds_the_gil() || !tensor.can_wait() {
        defer(tensor);
        return Ok(());
    }
    if !tensor.is_ready() {
        // SAFETY: this thread holds the GIL through its own thread state (just checked, see
        // `this_thread_holds_the_gil`), which `PyEval_SaveThread` needs.
        let py = unsafe { pyo3::Python::assume_attached() };
        py.detach(|| tensor.wait());
        if !tensor.is_waited() {
            // A capture refused the wait: never an unordered deleter; queued until it ends.
            defer(tensor);
            return Ok(());
        }
    }
    tensor.complete()
}

/// [`release_here_or_defer`] for an imported tensor: on a thread that holds the GIL, host
/// memory (which orders after nothing) is released at once, without a pending release.
pub fn release_imported_here_or_defer(tensor: ImportedTensor) -> rsdlpack::Result<()> {
    let tensor = if this_thread_holds_the_gil() {
        match tensor.release_if_unordered() {
            Ok(()) => return Ok(()),
            Err(tensor) => tensor,
        }
    } else {
        tensor
    };
    release_here_or_defer(tensor.into_release())
}

/// A forwarded tensor's release (see [`forward`]): at once when nothing needs waiting for and this
/// thread holds the GIL (host memory without a pending release, as
/// [`release_imported_here_or_defer`] does), else queued. A deleter may be called with locks of
/// its caller held that another Python thread could need, so it neither lets go of the GIL to
/// wait nor waits holding it (every Python thread would stall, and a stream whose host function
/// takes the GIL would never finish); it has no caller to tell of a failure either.
fn release_forwarded(tensor: ImportedTensor) {
    let holds_the_gil = this_thread_holds_the_gil();
    let tensor = if holds_the_gil {
        match tensor.release_if_unordered() {
            Ok(()) => return,
            Err(tensor) => tensor,
        }
    } else {
        tensor
    };
    let mut release = tensor.into_release();
    if holds_the_gil && release.is_ready() {
        let _ = release.complete();
    } else {
        defer(release);
    }
}

/// Queues `tensor` for the next bridge call that holds the GIL (or [`drain`]): never runs
/// Python code and never waits for the GIL or the GPU, so a garbage collector's finalizer may
/// call it on any thread, including the one that holds the GIL.
pub fn defer(tensor: PendingRelease) {
    // A poisoned lock only means another thread panicked mid-push; the Vec is intact.
    let mut pending = PENDING.lock().unwrap_or_else(|p| p.into_inner());
    pending.push(tensor);
    MAYBE_PENDING.store(true, Ordering::Release);
}

/// Whether [`drain`] waits for queued tensors whose consumers' GPU work is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Every bridge call: release what is ready, keep the rest queued.
    No,
    /// The explicit flush: wait (on the host) for each, and release them all.
    Yes,
}

/// Releases queued tensors (all of them with [`Wait::Yes`], waiting for their GPU work with the
/// GIL released) and returns how many. Call with the GIL held (a `Python` token proves it),
/// from an entry point rather than a deleter (see `release_forwarded`).
#[inline]
pub fn drain(py: pyo3::Python<'_>, wait: Wait) -> usize {
    // Set under the lock after each push, cleared under the lock here: a push that this load
    // misses is drained by the next call.
    if !MAYBE_PENDING.load(Ordering::Acquire) {
        return 0;
    }
    drain_queued(py, wait)
}

/// [`drain`] past its check (out of line: every bridge call makes the check).
#[inline(never)]
fn drain_queued(py: pyo3::Python<'_>, wait: Wait) -> usize {
    let batch = {
        let mut pending = PENDING.lock().unwrap_or_else(|p| p.into_inner());
        // Asking does not wait; host tensors and completed fences are ready. A fallback (a
        // context to synchronise) is never ready by itself: only a flush takes it (see the
        // module docs). A flush takes all it can wait for.
        let take: fn(&mut PendingRelease) -> bool = match wait {
            Wait::Yes => PendingRelease::can_wait,
            Wait::No => PendingRelease::is_ready,
        };
        let (batch, waiting) = split(std::mem::take(&mut *pending), take);
        *pending = waiting;
        MAYBE_PENDING.store(!pending.is_empty(), Ordering::Release);
        batch
    };
    let mut batch = batch;
    if !batch.iter_mut().all(PendingRelease::is_ready) {
        py.detach(|| batch.iter_mut().for_each(PendingRelease::wait));
        // A wait a capture refused (a context synchronisation while a stream of it captures)
        // leaves its release pending: queued again, its deleter not run.
        let (waited, refused): (Vec<_>, Vec<_>) =
            batch.into_iter().partition(PendingRelease::is_waited);
        refused.into_iter().for_each(defer);
        batch = waited;
    }
    let released = batch.len();
    // Dropped outside the lock: a deleter may itself release a Python-produced tensor.
    drop(batch);
    released
}

/// Splits `queued` into the releases `take` picks and the rest, dropping none: it runs under
/// `PENDING`'s lock, where a dropped release would run its deleter, and a deleter that queues
/// again would wait for that lock forever. A check that panics (a driver query) picks its
/// release, which the caller then waits for and releases outside the lock.
fn split<R>(queued: Vec<R>, take: impl Fn(&mut R) -> bool) -> (Vec<R>, Vec<R>) {
    let mut batch = Vec::new();
    let mut waiting = Vec::with_capacity(queued.len());
    for mut release in queued {
        let check = std::panic::AssertUnwindSafe(|| take(&mut release));
        if std::panic::catch_unwind(check).unwrap_or(true) {
            batch.push(release);
        } else {
            waiting.push(release);
        }
    }
    (batch, waiting)
}

/// How many tensors wait for the GIL (or for their consumers' GPU work).
pub fn pending() -> usize {
    PENDING.lock().unwrap_or_else(|p| p.into_inner()).len()
}

/// [`forward`], kept with its descriptor (not validated again).
pub fn forward_owned(tensor: ImportedTensor) -> rsdlpack::Result<ImportedTensor> {
    rsdlpack::export::forward::forward_owned(tensor, release_forwarded)
}

/// Forwards a Python-produced tensor: a versioned managed tensor over the same memory, whose
/// deleter releases the original under the GIL (see the module docs). Its metadata is not
/// copied (see [`rsdlpack::export::forward`]).
pub fn forward(tensor: ImportedTensor) -> rsdlpack::Result<Managed<DLManagedTensorVersioned>> {
    forward_versioned(tensor, release_forwarded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A queued release that counts its drops (a deleter run).
    struct Counted<'a>(u32, &'a AtomicUsize);

    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_panicking_readiness_check_drops_nothing_and_picks_its_release() {
        let drops = AtomicUsize::new(0);
        let queued: Vec<Counted<'_>> = (0..6).map(|i| Counted(i, &drops)).collect();
        // 0, 2, 4 ready; 3 panics (as a driver query might); 1, 5 wait.
        let (batch, waiting) = split(queued, |release| match release.0 {
            3 => panic!("a readiness check that panics"),
            n => n % 2 == 0,
        });
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "nothing dropped while splitting"
        );
        let ids = |v: &[Counted<'_>]| v.iter().map(|r| r.0).collect::<Vec<_>>();
        assert_eq!(ids(&batch), [0, 2, 3, 4]);
        assert_eq!(ids(&waiting), [1, 5]);
        drop((batch, waiting));
        assert_eq!(drops.load(Ordering::SeqCst), 6);
    }
}
