//! Python objects dropped where pyo3 does not count the thread as attached.
//!
//! The entry points' fast path (the caller holds the GIL, see `c_abi::border::with_python`) and the
//! exporter's `__dlpack__` (which Python calls directly) run under `Python::assume_attached`:
//! the GIL is held, but pyo3 does not know it, so a `Py` or `PyErr` dropped there is only
//! queued, to be released at pyo3's next attach — which a caller that always holds the GIL
//! (Julia) may never bring. The queued object keeps alive whatever it references: an
//! `AttributeError` its type, a traceback its frames. So code there that drops a `PyErr` runs
//! inside [`releasing`]; a `Py` is released through `Bound` (whose drop needs no bookkeeping);
//! and the entry points drain the queue after an error ([`drain_deferred`]), since error paths
//! drop exceptions everywhere.

use pyo3::prelude::*;

/// Runs `body` with pyo3 counting this thread as attached, so that the Python objects it drops
/// are released at once. The caller holds the GIL, so the nested attach does not wait.
pub(crate) fn releasing<T>(body: impl FnOnce() -> T) -> T {
    Python::attach(|_| body())
}

/// Releases what earlier drops on this path queued (every attach drains pyo3's queue).
pub(crate) fn drain_deferred() {
    Python::attach(|_| ());
}
