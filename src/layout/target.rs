//! What the caller wants the tensor to become, and the decision for it.
//!
//! [`plan`](super::plan) answers for any host-readable layout; [`decide`] adds what depends on
//! the target: which devices a target can hold, whether a copy can be made there, whether the
//! caller named the element type and rank (Julia's typed `from_dlpack(Array{T,N}, x)`), and
//! whether only a plain dense array will do. The bridges carry this request and the answer; they
//! decide nothing themselves.

use super::planner::{Decision, copy, plan_into};
use super::{Access, ArrayPlan, CopyPolicy, CopyReason, IndexOrder, LayoutPlan};
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

/// Decides how `descriptor` becomes the requested array, or why it cannot, and writes the
/// whole answer into `out` (every field but the handle, which is left null, and the array
/// entries past `ndims`, which keep whatever they held).
pub fn decide(
    descriptor: &TensorDescriptor,
    request: &ArrayRequest,
    out: &mut ArrayPlan,
) -> Result<Decision> {
    check_type(descriptor, request)?;
    let device = descriptor.device();
    let on_target = match request.target {
        Target::HostArray => device.kind.host_accessible(),
        Target::CudaArray => device.kind.is_cuda(),
    };
    if !on_target {
        return Err(Error::NotOnTarget {
            device: device.to_dlpack(),
            target: match request.target {
                Target::HostArray => "a host array (Array)",
                Target::CudaArray => "a CUDA array (CuArray)",
            },
        });
    }
    let policy = request.policy.given(descriptor.is_copied());
    let mut decision = plan_into(descriptor, request.order, policy, out)?;
    let plain = out.needs_view == 0 && out.needs_permutation == 0;
    if request.dense && decision == Decision::View && !plain {
        if policy == CopyPolicy::Never {
            let (shape, strides) = super::ordered(descriptor, request.order);
            return Err(Error::CopyRequired {
                shape: shape.to_vec(),
                strides: strides.to_vec(),
                reason: CopyReason::NotDense,
            });
        }
        decision = copy(out, CopyReason::NotDense);
    }
    if let (Decision::Copy { reason }, Target::CudaArray) = (decision, request.target) {
        return Err(Error::DeviceCopyUnavailable { reason });
    }
    // A copy is always writable; a view of read-only memory only for a caller who accepts it.
    let shares_read_only = decision == Decision::View && descriptor.read_only();
    if shares_read_only {
        match request.access {
            Access::ReadOnly => {}
            Access::Writable => return Err(Error::ReadOnly),
            Access::WritableType => return Err(Error::ReadOnlyIntoWritableType),
        }
    }
    let dl_device = device.to_dlpack();
    out.tensor = std::ptr::null_mut();
    out.element_code = descriptor.element().code();
    out.device_type = dl_device.device_type.0;
    out.device_id = dl_device.device_id;
    out.read_only = u8::from(shares_read_only);
    Ok(decision)
}

/// [`decide`], in readable form.
pub fn plan_for(descriptor: &TensorDescriptor, request: &ArrayRequest) -> Result<LayoutPlan> {
    let mut flat = ArrayPlan::zeroed();
    let decision = decide(descriptor, request, &mut flat)?;
    Ok(flat.readable(descriptor, decision))
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
        _ => descriptor.ndim(),
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
