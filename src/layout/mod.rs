//! The layout planner: how a DLPack tensor (any shape and strides) becomes a Julia array.
//!
//! Julia has no general strided array type in Base, but it composes one: a dense column-major
//! parent (`unsafe_wrap(Array, ptr, parent_dims)`), a `view` with one range per parent
//! dimension, and a `PermutedDimsArray`. [`decide`] decides whether such a composition can address
//! exactly the tensor's elements, and returns its parts; the Julia glue only assembles them:
//!
//! ```text
//! P = unsafe_wrap(Array, Ptr{T}(first_element + parent_byte_offset), parent_dims)
//! V = view(P, (start:step:start+step*(len-1) for each parent dim)...)   # skipped when all full
//! R = PermutedDimsArray(V, permutation .+ 1)                            # skipped when identity
//! ```
//!
//! so that `R[i₁, …, iₙ]` is the tensor element at DLPack index `(i₁-1, …, iₙ-1)`
//! ([`IndexOrder::Producer`]) or at `(iₙ-1, …, i₁-1)` ([`IndexOrder::Reversed`]).
//!
//! When no composition exists (a zero stride repeats elements, strides overlap, strides do
//! not nest into a parent, or the data is not aligned for the element type — Julia's arrays
//! are) the plan says a copy is needed, and [`crate::copy`] makes one (it reads unaligned
//! memory correctly). With [`CopyPolicy::Never`] that is an error instead: [`Error::Misaligned`]
//! for misaligned data, [`Error::CopyRequired`] for the rest.
//!
//! The parent is the smallest dense parent that holds the view (see [`nest`]): it starts at
//! the lowest element the tensor touches and ends at its last element whenever each stride,
//! sorted by magnitude, is a multiple of the element span of the faster dimensions — true of
//! every contiguous tensor in any dimension order and of many slices. Otherwise no parent ends
//! there, and the least one reaches past the last element: a view of `a[:, 3:5]` of a 2×5
//! row-major array needs a 5×2 parent starting at element 3, whose last three elements lie
//! beyond the tensor. The view never touches them, but the parent (`parent(parent(R))` in
//! Julia) claims them: index the array, never its parent (the tests measure how many bytes that
//! is: `ViewPlan::parent_overhang`).
//!
//! Planning takes O(ndim²) steps (sorting ≤ 32 dimensions; no loop depends on extent values)
//! and allocates nothing; when the parent cannot end at the last element, the least parent is
//! searched among the divisors of the largest stride ([`divisors`]), within a work bound that
//! keeps any layout's plan near 10 µs (see [`nest`]). It writes its
//! answer once, into the caller's [`ArrayPlan`] ([`decide`]), the one production form of the
//! plan; with the `readable-plans` feature (the tests, the fuzz targets and the demo have it),
//! `plan` and `plan_for` give the same answer as a `LayoutPlan`.

mod divisors;
#[cfg(test)]
mod exhaustive;
mod flat;
mod nest;
mod planner;
mod strided;
mod target;

pub use flat::{ArrayPlan, PlanKind};
pub use planner::Decision;
pub use strided::{StridedPlan, strided_plan};
#[cfg(any(test, feature = "readable-plans"))]
pub use target::plan_for;
pub use target::{ArrayRequest, StridedDecision, Target, decide, decide_strided};

// Both defined below this module: the descriptor speaks of the order, errors of the reason.
pub use crate::copy_reason::CopyReason;
pub use crate::dims::IndexOrder;

use crate::descriptor::TensorDescriptor;
use crate::dims::DimVec;
#[cfg(any(test, feature = "readable-plans"))]
use crate::error::Result;

/// When a copy may be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyPolicy {
    /// Zero-copy or an error (`copy=false`).
    Never,
    /// Zero-copy when possible, else a copy (`copy=nothing`).
    IfNeeded,
    /// Always a fresh copy (`copy=true`).
    Always,
}

impl CopyPolicy {
    /// The policy once the tensor is known: a tensor the producer already copied for us
    /// (`IS_COPIED`) satisfies `copy=true` without a second copy.
    pub fn given(self, is_copied: bool) -> Self {
        if self == Self::Always && is_copied {
            Self::IfNeeded
        } else {
            self
        }
    }
}

/// Whether the caller will write to the array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A writable array: a view of read-only memory is refused ([`Error::ReadOnly`]: import it
    /// read-only, or copy).
    ///
    /// [`Error::ReadOnly`]: crate::Error::ReadOnly
    Writable,
    /// Read-only memory may be viewed: the caller marks the result read-only.
    ReadOnly,
    /// The result's type has no read-only form (Julia's typed `Array{T,N}` and `CuArray{T,N}`),
    /// whatever the caller would accept: a view of read-only memory is refused
    /// ([`Error::ReadOnlyIntoWritableType`]), a copy (`copy=true`) is not.
    ///
    /// [`Error::ReadOnlyIntoWritableType`]: crate::Error::ReadOnlyIntoWritableType
    WritableType,
}

#[cfg(any(test, feature = "readable-plans"))]
/// One range of a `view`, in Julia's 1-based terms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DimRange {
    pub start: usize,
    pub step: isize,
    pub len: usize,
}

#[cfg(any(test, feature = "readable-plans"))]
impl DimRange {
    fn is_full_of(&self, parent_dim: usize) -> bool {
        self.start == 1 && self.step == 1 && self.len == parent_dim
    }
}

#[cfg(any(test, feature = "readable-plans"))]
/// A zero-copy composition (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewPlan {
    /// Bytes from the tensor's first element to the parent's first element (≤ 0: negative
    /// strides put the parent's start below the first element).
    pub parent_byte_offset: isize,
    pub parent_dims: DimVec<usize>,
    /// One range per parent dimension.
    pub ranges: DimVec<DimRange>,
    /// `permutation[k]` is the parent dimension (0-based) of result dimension `k`.
    pub permutation: DimVec<usize>,
}

#[cfg(any(test, feature = "readable-plans"))]
impl ViewPlan {
    /// Whether the view is the whole parent (no `view` needed).
    pub fn is_whole_parent(&self) -> bool {
        self.ranges
            .iter()
            .zip(&self.parent_dims)
            .all(|(r, &d)| r.is_full_of(d))
    }

    /// Whether the permutation is the identity (no `PermutedDimsArray` needed).
    pub fn is_identity_permutation(&self) -> bool {
        self.permutation.iter().enumerate().all(|(k, &p)| k == p)
    }

    /// Bytes the parent claims beyond the tensor's last element (see the module docs); 0 for
    /// contiguous tensors in either order.
    pub fn parent_overhang(&self, descriptor: &TensorDescriptor) -> usize {
        // The planner bounds the parent's bytes by isize::MAX, and validation the span.
        let parent_bytes = self
            .parent_dims
            .iter()
            .map(|&d| d as i128)
            .product::<i128>()
            * descriptor.element().size() as i128;
        let (_, end) = descriptor.byte_span();
        let parent_end = self.parent_byte_offset as i128 + parent_bytes;
        (parent_end - i128::from(end)).max(0) as usize
    }

    /// The dims of the resulting Julia array.
    pub fn result_dims(&self) -> DimVec<usize> {
        self.permutation
            .iter()
            .map(|&p| self.ranges[p].len)
            .collect()
    }
}

#[cfg(any(test, feature = "readable-plans"))]
/// The planner's decision, in readable form.
#[allow(
    clippy::large_enum_variant,
    reason = "inline on purpose: one plan per import, and planning allocates nothing"
)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutPlan {
    /// Wrap the memory.
    View(ViewPlan),
    /// The tensor has no elements: allocate an empty array of these dims, share nothing.
    Empty { dims: DimVec<usize> },
    /// Copy into a fresh column-major array of these dims (see [`crate::copy`]).
    Copy {
        dims: DimVec<usize>,
        reason: CopyReason,
    },
}

#[cfg(any(test, feature = "readable-plans"))]
/// Decides how `descriptor` becomes a Julia array, in readable form (the bridges use
/// [`decide`], which writes the same decision straight into an [`ArrayPlan`]).
pub fn plan(
    descriptor: &TensorDescriptor,
    order: IndexOrder,
    policy: CopyPolicy,
) -> Result<LayoutPlan> {
    let mut flat = ArrayPlan::zeroed();
    let decision = planner::plan_into(descriptor, order, policy, &mut flat)?;
    Ok(flat.readable(descriptor, decision))
}

/// Shape and strides in result order (for the copy engine and error messages).
pub(crate) fn ordered(
    descriptor: &TensorDescriptor,
    order: IndexOrder,
) -> (DimVec<i64>, DimVec<i64>) {
    let (mut shape, mut strides) = (
        DimVec::from_slice(descriptor.shape()).expect("validated rank"),
        DimVec::from_slice(descriptor.strides()).expect("validated rank"),
    );
    if order == IndexOrder::Reversed {
        shape.reverse();
        strides.reverse();
    }
    (shape, strides)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_target;
