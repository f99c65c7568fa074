//! RsDLPack's Python bridge: the DLPack Python protocol over `PyObject*`.
//!
//! Three parts over shared plumbing, each a folder; dependencies only point down this list:
//! - [`c_abi`]: the `extern "C"` entry points Julia's `ccall` and Python's ctypes call, and
//!   the C ABI they define (include/rsdlpack.h);
//! - [`export`]: tensors Rust owns offered to Python consumers: the exporter object
//!   `rsdlpack.DLPackTensor` (`__dlpack__`, and its type's DLPack 1.3 C exchange API), Julia
//!   arrays kept alive until released, and arrays shared straight into a consumer's type;
//! - [`import`]: any object with `__dlpack__` (or a capsule) → an owned, validated tensor,
//!   through NumPy's C ABI fields, a producer type's C exchange API (torch), or the Python
//!   protocol; torch tensors checked for what DLPack cannot carry;
//! - [`protocol`]: capsule ownership rules, and the protocol's arguments typed (what
//!   `__dlpack__` hands out for them is the core's decision, [`rsdlpack::export::plan`]);
//!   [`python`]: cheap calls into Python, releases of Python producers' tensors under the GIL
//!   only, objects dropped where pyo3 does not know the GIL is held; [`error`]: the one error
//!   type and its two ways out (a Python exception, a return code).
//!
//! The bridge speaks to the rest of RsDLPack in DLPack itself: it hands out and takes
//! `DLManagedTensorVersioned*`, so the Julia bridge never links Python. Built with
//! `PYO3_BUILD_EXTENSION_MODULE=1` (see `.ci/run`), the library does not link libpython: its
//! Python symbols resolve from the process that loads it, and abi3 makes one build serve every
//! CPython ≥ 3.10.

pub mod c_abi;
pub mod error;
pub mod export;
pub mod import;
pub mod protocol;
pub mod python;

#[cfg(test)]
mod test_support;

pub use error::{BridgeError, BridgeResult, ErrorCode};
pub use export::{Exporter, exporter_type};
pub use import::{ImportRequest, import};
