//! RsDLPack's Python bridge: the DLPack Python protocol over `PyObject*`.
//!
//! - [`import`]: any object with `__dlpack__` (or a capsule) → an owned, validated tensor;
//! - [`exchange_api`]: the DLPack 1.3 C exchange API of a producer's type (torch), used by
//!   [`import`] instead of `__dlpack__`; [`torch`]: what torch tensors carry that DLPack cannot;
//!   [`numpy`]: NumPy's arrays, read through NumPy's C ABI instead of its `__dlpack__`;
//! - [`exporter`]: a Python object with `__dlpack__` ([`dlpack_method`]) over a tensor Rust owns,
//!   whose type offers its own C exchange API ([`exporter_api`]);
//! - [`capsule`]: capsule ownership rules; [`request`]: the protocol's arguments, typed;
//!   [`negotiate`]: what `__dlpack__` hands out for them, decided as a pure function;
//! - [`release`]: Python producers' deleters run only under the GIL (deferred otherwise);
//!   `attach`: Python objects dropped where pyo3 does not know the GIL is held;
//! - [`entry`]: the `extern "C"` functions Julia's `ccall` and Python's ctypes call;
//! - [`arrays`]: the one-crossing entry points behind Julia's `from_dlpack` and `share`
//!   (import + validate + plan in one call; copy; release now or later), with [`roots`]
//!   keeping shared Julia arrays alive until their consumers release them, and [`share_into`]
//!   handing them to a type's own C exchange API (`share(A, torch.Tensor)`);
//! - [`abi`]: the C ABI's named option values and struct numbers (with [`ErrorCode`]), which
//!   include/rsdlpack.h carries to Julia and ctypes.
//!
//! The bridge speaks to the rest of RsDLPack in DLPack itself: it hands out and takes
//! `DLManagedTensorVersioned*`, so the Julia bridge never links Python. Built with
//! `PYO3_BUILD_EXTENSION_MODULE=1` (see `.ci/run`), the library does not link libpython: its
//! Python symbols resolve from the process that loads it, and abi3 makes one build serve every
//! CPython ≥ 3.10.

pub mod abi;
pub mod arrays;
mod attach;
pub mod call;
pub mod capsule;
pub mod dlpack_method;
pub mod entry;
pub mod error;
pub mod exchange_api;
pub mod exporter;
pub mod exporter_api;
pub mod import;
pub mod negotiate;
pub mod numpy;
pub mod release;
pub mod request;
pub mod roots;
pub mod share_into;
pub mod torch;

pub use error::{BridgeError, BridgeResult, ErrorCode};
pub use exporter::Exporter;
pub use import::{ImportRequest, import};
