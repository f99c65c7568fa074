//! What the caller wants the tensor to become, and the decision for it.
//!
//! [`plan`](super::plan) answers for any host-readable layout; [`decide`] adds what depends on
//! the target: which devices a target can hold, whether a copy can be made there, whether the
//! caller named the element type and rank (Julia's typed `from_dlpack(Array{T,N}, x)`), and
//! whether only a plain dense array will do. The bridges carry this request and the answer; they
//! decide nothing themselves.

#[cfg(any(test, feature = "readable-plans"))]
use super::LayoutPlan;
use super::planner::{Decision, copy, plan_into};
use super::strided::{StridedPlan, strided_plan};
use super::{Access, ArrayPlan, CopyPolicy, CopyReason, IndexOrder};
use crate::descriptor::TensorDescriptor;
use crate::dims::DimVec;
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
    check_target(descriptor, request.target)?;
    let device = descriptor.device();
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
        check_read_only_access(request.access)?;
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
#[cfg(any(test, feature = "readable-plans"))]
pub fn plan_for(descriptor: &TensorDescriptor, request: &ArrayRequest) -> Result<LayoutPlan> {
    let mut flat = ArrayPlan::zeroed();
    let decision = decide(descriptor, request, &mut flat)?;
    Ok(flat.readable(descriptor, decision))
}

/// What [`decide_strided`] decided.
#[allow(
    clippy::large_enum_variant,
    reason = "inline on purpose: one plan per import, and planning allocates nothing"
)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StridedDecision {
    /// Share the memory: a strided array over the plan's span. `read_only`: the producer marked
    /// it read-only (and the request accepts that).
    View { plan: StridedPlan, read_only: bool },
    /// No elements: allocate an empty array of `dims` (result order), share nothing.
    Empty { dims: DimVec<usize> },
    /// Copy into a fresh column-major array of `dims` (result order), for this reason.
    Copy {
        dims: DimVec<usize>,
        reason: CopyReason,
    },
}

/// [`decide`] for a strided array type (StridedViews.jl's `StridedView`), which holds any
/// layout: every non-empty, aligned tensor is a view ([`strided_plan`]), zero, negative and
/// overlapping strides included. A copy is made only when asked for ([`CopyPolicy::Always`])
/// or, under [`CopyPolicy::IfNeeded`], for misaligned data, and only for a host target. The
/// element type, rank, target and read-only rules are [`decide`]'s; `request.dense` is not
/// read (the array type is the same whatever the layout).
pub fn decide_strided(
    descriptor: &TensorDescriptor,
    request: &ArrayRequest,
) -> Result<StridedDecision> {
    if let ElementType::PackedBits { code, bits } = descriptor.element() {
        return Err(Error::PackedSubbyteStrided { code, bits });
    }
    check_type(descriptor, request)?;
    check_target(descriptor, request.target)?;
    let dims = || {
        let (shape, _) = super::ordered(descriptor, request.order);
        // Validated extents are non-negative.
        shape.iter().map(|&n| n as usize).collect()
    };
    if descriptor.element_count() == 0 {
        return Ok(StridedDecision::Empty { dims: dims() });
    }
    let policy = request.policy.given(descriptor.is_copied());
    let reason = if policy == CopyPolicy::Always {
        CopyReason::Requested
    } else {
        match strided_plan(descriptor, request.order) {
            Ok(plan) => {
                let read_only = descriptor.read_only();
                if read_only {
                    check_read_only_access(request.access)?;
                }
                return Ok(StridedDecision::View { plan, read_only });
            }
            Err(Error::Misaligned { .. }) if policy == CopyPolicy::IfNeeded => {
                CopyReason::Misaligned
            }
            Err(error) => return Err(error),
        }
    };
    if request.target == Target::CudaArray {
        return Err(Error::DeviceCopyUnavailable { reason });
    }
    Ok(StridedDecision::Copy {
        dims: dims(),
        reason,
    })
}

/// Refuses memory on a device the target cannot hold.
fn check_target(descriptor: &TensorDescriptor, target: Target) -> Result<()> {
    let device = descriptor.device();
    let on_target = match target {
        Target::HostArray => device.kind.host_accessible(),
        Target::CudaArray => device.kind.is_cuda(),
    };
    if on_target {
        return Ok(());
    }
    Err(Error::NotOnTarget {
        device: device.to_dlpack(),
        target: match target {
            Target::HostArray => "a host array (Array)",
            Target::CudaArray => "a CUDA array (CuArray)",
        },
    })
}

/// Refuses a view of read-only memory unless the caller accepts one.
fn check_read_only_access(access: Access) -> Result<()> {
    match access {
        Access::ReadOnly => Ok(()),
        Access::Writable => Err(Error::ReadOnly),
        Access::WritableType => Err(Error::ReadOnlyIntoWritableType),
    }
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
