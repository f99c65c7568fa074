//! The layout planner: how a DLPack tensor (any shape and strides) becomes a Julia array.
//!
//! Julia has no general strided array type in Base, but it composes one: a dense column-major
//! parent (`unsafe_wrap(Array, ptr, parent_dims)`), a `view` with one range per parent
//! dimension, and a `PermutedDimsArray`. [`plan`] decides whether such a composition can address
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
//! The parent is chosen to cover as little memory as the layout allows (see [`nest`]): it
//! starts at the lowest element the tensor touches and ends at its last element whenever each
//! stride, sorted by magnitude, is a multiple of the element span of the faster dimensions —
//! true of every contiguous tensor in any dimension order and of many slices. Otherwise it
//! reaches past the last element: a view of `a[:, 3:5]` of a 2×5 row-major array needs a 5×2
//! parent starting at element 3, whose last three elements lie beyond the tensor. The view never
//! touches them, but the parent (`parent(parent(R))` in Julia) claims them: index the array,
//! never its parent. [`ViewPlan::parent_overhang`] says how many bytes that is.
//!
//! Planning takes O(ndim²) steps at most (sorting ≤ 32 dimensions; no loop depends on extent
//! values) and allocates nothing: every per-dimension list is a [`DimVec`].

#[cfg(test)]
mod exhaustive;
mod flat;
mod nest;
mod target;

pub use flat::{ArrayPlan, PlanKind};
pub use target::{ArrayRequest, Target, plan_for};

use crate::descriptor::TensorDescriptor;
use crate::dims::DimVec;
use crate::dtype::ElementType;
use crate::error::{Error, Result};

/// Which index of the Julia array corresponds to which DLPack index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexOrder {
    /// `R[i, j]` is DLPack element `[i-1, j-1]`: a (2, 3) torch tensor is a 2×3 Julia array.
    Producer,
    /// Dims reversed: a row-major (2, 3) tensor is a plain 3×2 `Array`, no wrapper type.
    Reversed,
}

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
    Writable,
    ReadOnly,
}

/// Refuses a writable zero-copy view of a read-only tensor. A copy is always writable.
pub fn check_access(
    descriptor: &TensorDescriptor,
    access: Access,
    plan: &LayoutPlan,
) -> Result<()> {
    let shares_memory = matches!(plan, LayoutPlan::View(_));
    if descriptor.read_only() && access == Access::Writable && shares_memory {
        return Err(Error::ReadOnly);
    }
    Ok(())
}

/// One range of a `view`, in Julia's 1-based terms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DimRange {
    pub start: usize,
    pub step: isize,
    pub len: usize,
}

impl DimRange {
    fn full(len: usize) -> Self {
        Self {
            start: 1,
            step: 1,
            len,
        }
    }

    fn is_full_of(&self, parent_dim: usize) -> bool {
        self.start == 1 && self.step == 1 && self.len == parent_dim
    }
}

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

/// The planner's decision.
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
        reason: &'static str,
    },
}

/// Why a view needs a copy because its parent would be too large for Julia to wrap.
const PARENT_TOO_LARGE: &str = "the view's parent array would exceed isize::MAX bytes";

/// Why a view needs a copy because the data is not aligned for the element type.
pub const MISALIGNED: &str = "misaligned: the data is not aligned for the element type";

/// Decides how `descriptor` becomes a Julia array.
pub fn plan(
    descriptor: &TensorDescriptor,
    order: IndexOrder,
    policy: CopyPolicy,
) -> Result<LayoutPlan> {
    if let ElementType::PackedBits { .. } = descriptor.element() {
        // Validation guaranteed a compact layout: the data is one run of bytes.
        let bytes = descriptor.dense_byte_size();
        let dims = DimVec::filled(bytes, 1).expect("one dimension");
        if policy == CopyPolicy::Always {
            return Ok(LayoutPlan::Copy {
                dims,
                reason: "a copy was requested",
            });
        }
        return Ok(LayoutPlan::View(ViewPlan {
            parent_byte_offset: 0,
            parent_dims: dims,
            ranges: DimVec::filled(DimRange::full(bytes), 1).expect("one dimension"),
            permutation: DimVec::filled(0, 1).expect("one dimension"),
        }));
    }
    let (shape, strides) = ordered(descriptor, order);
    // Validated: dims are non-negative and their product fits in usize.
    let dims: DimVec<usize> = shape.iter().map(|&n| n as usize).collect();
    if dims.contains(&0) {
        return Ok(LayoutPlan::Empty { dims });
    }
    if policy == CopyPolicy::Always {
        return Ok(LayoutPlan::Copy {
            dims,
            reason: "a copy was requested",
        });
    }
    // Every element is as misaligned as the first (strides count whole elements).
    if !descriptor.is_aligned() {
        return match policy {
            CopyPolicy::Never => Err(Error::Misaligned {
                address: descriptor.first_element(),
                align: descriptor.element().alignment(),
                element: descriptor.element().julia_name(),
            }),
            _ => Ok(LayoutPlan::Copy {
                dims,
                reason: MISALIGNED,
            }),
        };
    }
    match plan_view(&shape, &strides, descriptor.element().size()) {
        Ok(view) => Ok(LayoutPlan::View(view)),
        Err(reason) if policy == CopyPolicy::IfNeeded => Ok(LayoutPlan::Copy { dims, reason }),
        Err(reason) => Err(Error::CopyRequired {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            reason,
        }),
    }
}

/// Shape and strides in result order.
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

/// The view for a non-empty, validated tensor, or why there is none. `shape`/`strides` in
/// result order.
fn plan_view(
    shape: &[i64],
    strides: &[i64],
    element_size: usize,
) -> std::result::Result<ViewPlan, &'static str> {
    let ndim = shape.len();
    // Dimensions of length ≥ 2 decide the layout; the stride of a length-1 dimension is never
    // used to address anything, so it may be any value.
    let mut varying: DimVec<usize> = (0..ndim).filter(|&k| shape[k] >= 2).collect();
    if varying.iter().any(|&k| strides[k] == 0) {
        return Err("a zero stride repeats elements");
    }
    varying.sort_unstable_by_key(|&k| (strides[k].unsigned_abs(), k));
    let links: DimVec<nest::Link> = varying
        .iter()
        .map(|&k| nest::Link {
            len: shape[k] as u64,
            stride: strides[k].unsigned_abs(),
        })
        .collect();
    let parent_strides = nest::nest(&links)?;
    let mut rank_of = [usize::MAX; crate::dims::MAX_NDIM];
    for (r, &k) in varying.iter().enumerate() {
        rank_of[k] = r;
    }

    // Parent dims by rank; the parent's element count bounds every quantity derived below.
    let mut varying_dims: DimVec<usize> = DimVec::new();
    let mut parent_elements: u64 = 1;
    for (r, link) in links.iter().enumerate() {
        let dim = match parent_strides.get(r + 1) {
            Some(next) => next / parent_strides[r],
            None => (link.len - 1)
                .checked_mul(link.stride / parent_strides[r])
                .and_then(|reach| reach.checked_add(1))
                .ok_or(PARENT_TOO_LARGE)?,
        };
        parent_elements = parent_elements.checked_mul(dim).ok_or(PARENT_TOO_LARGE)?;
        varying_dims.push(dim as usize);
    }
    let fits = parent_elements
        .checked_mul(element_size as u64)
        .is_some_and(|bytes| bytes <= isize::MAX as u64);
    if !fits {
        return Err(PARENT_TOO_LARGE);
    }

    // Parent order: the varying dims by increasing stride, each length-1 dim placed right
    // after the varying dim that precedes it in result order (so F-order stays identity).
    // `group[k]`: 0 before any varying dim, else 1 + the rank of that preceding varying dim.
    let mut group = [0usize; crate::dims::MAX_NDIM];
    let mut current = 0;
    for k in 0..ndim {
        if rank_of[k] != usize::MAX {
            current = rank_of[k] + 1;
        }
        group[k] = current;
    }
    let mut parent_order: DimVec<usize> = DimVec::new();
    for g in 0..=varying.len() {
        if g > 0 {
            parent_order.push(varying[g - 1]);
        }
        for k in 0..ndim {
            if rank_of[k] == usize::MAX && group[k] == g {
                parent_order.push(k);
            }
        }
    }

    let mut parent_dims = DimVec::new();
    let mut ranges = DimVec::new();
    // Below `parent_elements` ≤ isize::MAX: no step, start or offset can overflow.
    let mut offset_elements: isize = 0;
    for &k in parent_order.iter() {
        let r = rank_of[k];
        if r == usize::MAX {
            parent_dims.push(1);
            ranges.push(DimRange::full(1));
            continue;
        }
        let len = shape[k] as usize;
        let step = (links[r].stride / parent_strides[r]) as usize;
        parent_dims.push(varying_dims[r]);
        if strides[k] > 0 {
            ranges.push(DimRange {
                start: 1,
                step: step as isize,
                len,
            });
        } else {
            offset_elements -= ((len - 1) * links[r].stride as usize) as isize;
            ranges.push(DimRange {
                start: (len - 1) * step + 1,
                step: -(step as isize),
                len,
            });
        }
    }
    let mut permutation = DimVec::filled(0, ndim).expect("ndim ≤ MAX_NDIM");
    for (position, &k) in parent_order.iter().enumerate() {
        permutation[k] = position;
    }
    Ok(ViewPlan {
        parent_byte_offset: offset_elements * element_size as isize,
        parent_dims,
        ranges,
        permutation,
    })
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_target;
