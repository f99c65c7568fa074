//! Exporting: tensors Rust owns (a Julia array, a copy, another producer's tensor) offered to
//! Python consumers.
//!
//! - [`exporter`]: the Python object `rsdlpack.DLPackTensor` over such a tensor, carrying out
//!   what the core's export plan decides for each request; [`methods`]: its Python face;
//! - [`dlpack_method`]: its `__dlpack__`, a vectorcall method that reads its keywords itself;
//! - [`exchange_api`]: the DLPack 1.3 C exchange API its type offers, with the table's
//!   [`allocator`];
//! - [`roots`]: Julia arrays kept alive until their consumers release them;
//! - [`share_into`]: a Julia array handed straight to a consumer type's own C exchange API.

mod allocator;
pub mod dlpack_method;
pub mod exchange_api;
pub mod exporter;
mod methods;
pub mod roots;
pub mod share_into;

pub use exporter::Exporter;
pub use methods::exporter_type;
