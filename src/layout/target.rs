//! What the caller wants the tensor to become, and the decision for it.
//!
//! [`plan`](super::plan) answers for any host-readable layout; [`plan_for`] adds what depends on
//! the target: which devices a target can hold, whether a copy can be made there, whether the
//! caller named the element type and rank (Julia's typed `from_dlpack(Array{T,N}, x)`), and
//! whether only a plain dense array will do. The bridges carry this request and the answer; they
//! decide nothing themselves.

use super::{Access, CopyPolicy, IndexOrder, LayoutPlan, check_access, plan};
use crate::descriptor::TensorDescriptor;
use crate::dtype::ElementType;
use crate::error::{Error, Result};

/// The kind of array the tensor becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A host array (Julia's `Array` and views of it): host-readable memory; copies are made
    /// on the host.
    HostArray,
    /// A CUDA device array (CUDA.jl's `CuArray` and views of it): CUDA memory, zero-copy only
    /// (no device copy engine here).
    CudaArray,
}

/// Everything the caller asks of the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrayRequest {
    pub target: Target,
    pub order: IndexOrder,
    pub policy: CopyPolicy,
    pub access: Access,
    /// Only a plain dense array in `order` (no `view`, no `PermutedDimsArray`): the typed forms,
    /// whose result type must not depend on the strides. Anything else is copied, or refused
    /// where no copy can be made.
    pub dense: bool,
    /// The element type the caller named, if any.
    pub element: Option<ElementType>,
    /// The rank the caller named, if any.
    pub ndim: Option<usize>,
}

impl ArrayRequest {
    /// A request with no typed constraints: any layout, zero-copy when possible.
    pub fn new(target: Target) -> Self {
        Self {
            target,
            order: IndexOrder::Producer,
            policy: CopyPolicy::IfNeeded,
            access: Access::Writable,
            dense: false,
            element: None,
            ndim: None,
        }
    }
}

/// Why a typed request wants a copy of a layout that has a view.
const NOT_DENSE: &str = "the typed form needs a dense array in the requested index order";

/// Decides how `descriptor` becomes the requested array, or why it cannot.
pub fn plan_for(descriptor: &TensorDescriptor, request: &ArrayRequest) -> Result<LayoutPlan> {
    check_type(descriptor, request)?;
    let on_target = match request.target {
        Target::HostArray => descriptor.device().kind.host_accessible(),
        Target::CudaArray => descriptor.device().kind.is_cuda(),
    };
    if !on_target {
        return Err(Error::NotOnTarget {
            device: descriptor.device().to_dlpack(),
            target: match request.target {
                Target::HostArray => "a host array (Array)",
                Target::CudaArray => "a CUDA array (CuArray)",
            },
        });
    }
    let policy = request.policy.given(descriptor.is_copied());
    let mut decided = plan(descriptor, request.order, policy)?;
    if request.dense
        && let LayoutPlan::View(view) = &decided
        && !(view.is_whole_parent() && view.is_identity_permutation())
    {
        decided = match policy {
            CopyPolicy::Never => {
                let (shape, strides) = super::ordered(descriptor, request.order);
                return Err(Error::CopyRequired {
                    shape: shape.to_vec(),
                    strides: strides.to_vec(),
                    reason: NOT_DENSE,
                });
            }
            _ => LayoutPlan::Copy {
                dims: view.result_dims(),
                reason: NOT_DENSE,
            },
        };
    }
    if let (LayoutPlan::Copy { reason, .. }, Target::CudaArray) = (&decided, request.target) {
        return Err(Error::DeviceCopyUnavailable { reason });
    }
    check_access(descriptor, request.access, &decided)?;
    Ok(decided)
}

/// Refuses a tensor whose element type or rank differ from what the caller named.
fn check_type(descriptor: &TensorDescriptor, request: &ArrayRequest) -> Result<()> {
    if let Some(expected) = request.element
        && expected.code() != descriptor.element().code()
    {
        return Err(Error::TypeMismatch {
            expected: expected.julia_name_full(),
            found: descriptor.element().julia_name_full(),
        });
    }
    let ndim = match descriptor.element() {
        // A packed sub-byte tensor arrives as one byte vector whatever its shape.
        ElementType::PackedBits { .. } => 1,
        _ => descriptor.shape().len(),
    };
    if let Some(expected) = request.ndim
        && expected != ndim
    {
        return Err(Error::RankMismatch {
            expected,
            found: ndim,
        });
    }
    Ok(())
}
