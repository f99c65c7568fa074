//! Plumbing for talking to CPython from code that Julia (or C) calls: cheap method calls,
//! Python objects dropped where pyo3 does not know the GIL is held, releases of Python
//! producers' tensors that wait for a thread holding the GIL, type names for messages, and the
//! interpreters the bridge refuses.

pub(crate) mod attach;
pub mod call;
pub(crate) mod interpreter;
pub(crate) mod names;
pub mod release;
