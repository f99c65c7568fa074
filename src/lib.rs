//! RsDLPack core: everything about DLPack tensors that can be decided without Python or Julia.
//!
//! - [`imported`]: owning a tensor someone else produced (the producer's deleter runs once;
//!   [`managed`]: the producer's managed tensor itself, in either DLPack ABI);
//! - [`descriptor`]: validating its metadata once, at the border;
//! - [`dtype`] and [`device`]: what its elements and memory are, in Julia terms; [`dims`]:
//!   per-dimension lists and which Julia index is which dimension;
//! - [`layout`]: how any shape and strides become a zero-copy Julia array, or why not
//!   ([`copy_reason`]);
//! - [`copy`]: a fresh column-major copy when a view is impossible or a copy is asked for;
//! - [`export`]: every way of handing a managed tensor out — over memory owned elsewhere;
//!   [`export::described`]: whose owner keeps the descriptor, its metadata not copied;
//!   [`export::forward`]: an imported tensor handed on with a deleter of ours, its metadata not
//!   copied either; [`export::plan`]: what an exporter hands out for a consumer's request;
//! - [`stream`]: DLPack's stream values, typed; [`cuda`]: pointer checks, stream ordering by
//!   events, stream descriptions and device → host copies, on a driver loaded at run time;
//! - [`release`]: an imported tensor's deleter ordered after its consumer's GPU work.
//!
//! The bridges above (Python, Julia) only translate: they never decide layout or ownership.
//! Inside the crate, too, modules only depend downwards (`scripts/module_cycles.py` checks it;
//! the order is in docs/src/architecture.md).

pub mod copy;
pub mod copy_reason;
pub mod cuda;
pub mod descriptor;
pub mod device;
pub mod dims;
pub mod dtype;
pub mod error;
pub mod export;
pub mod imported;
pub mod layout;
pub mod managed;
pub mod release;
pub mod stream;

#[cfg(test)]
mod test_support;

pub use descriptor::TensorDescriptor;
pub use device::{Device, DeviceKind};
pub use dims::{DimVec, IndexOrder, MAX_NDIM};
pub use dtype::ElementType;
pub use error::{Error, ErrorCode, ErrorKind, Result};
pub use imported::{ImportedTensor, ManagedTensor};
pub use layout::{Access, CopyPolicy};
#[cfg(any(test, feature = "readable-plans"))]
pub use layout::{LayoutPlan, ViewPlan};
pub use release::{PendingRelease, StreamKeeper};

/// Re-exported so that the bridges name the same DLPack types.
pub use dlpark;
