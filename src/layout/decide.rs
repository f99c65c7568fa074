//! The planner itself: the decision for one tensor, written straight into the caller's
//! [`ArrayPlan`].
//!
//! An import plans once per call, so the planner is on the hot path: it works on the
//! descriptor's slices and a few stack arrays of bytes, and writes each answer once, into the
//! flat struct the bridge hands to Julia. Nothing per-dimension is built and then moved (the
//! 32-slot lists of the readable [`LayoutPlan`] cost more to copy than to compute); the readable
//! form is derived from the flat one when someone asks for it ([`super::plan`]).

use super::flat::{ArrayPlan, PlanKind};
use super::nest::{self, Link};
use super::{CopyPolicy, IndexOrder, MISALIGNED, PARENT_TOO_LARGE};
use crate::descriptor::TensorDescriptor;
use crate::dims::{DimVec, MAX_NDIM};
use crate::dtype::ElementType;
use crate::error::{Error, Result};

/// What the planner decided; the details are in the [`ArrayPlan`] it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Wrap the memory (see the module docs of [`super`]).
    View,
    /// No elements: allocate an empty array of `dims`, share nothing.
    Empty,
    /// Copy into a fresh column-major array of `dims`, for this reason.
    Copy { reason: &'static str },
}

impl Decision {
    /// Why a copy (empty for the other decisions).
    pub fn reason(self) -> &'static str {
        match self {
            Self::Copy { reason } => reason,
            _ => "",
        }
    }
}

/// Why a copy is made when one was asked for.
pub(crate) const COPY_REQUESTED: &str = "a copy was requested";

/// Why a view is impossible when a stride is zero.
const ZERO_STRIDE: &str = "a zero stride repeats elements";

/// Plans `descriptor` in `order` under `policy` into `out`: its kind, `ndims` and `dims`, and
/// for a view the parent address, dims, ranges, permutation and the two `needs_*` flags
/// (0 for the other kinds). The handle, element, device and read-only fields are the caller's.
pub(crate) fn plan_into(
    descriptor: &TensorDescriptor,
    order: IndexOrder,
    policy: CopyPolicy,
    out: &mut ArrayPlan,
) -> Result<Decision> {
    out.parent_address = 0;
    out.needs_view = 0;
    out.needs_permutation = 0;
    if let ElementType::PackedBits { .. } = descriptor.element() {
        // Validation guaranteed a compact layout: the data is one run of bytes.
        let bytes = descriptor.dense_byte_size() as i64;
        out.ndims = 1;
        out.dims[0] = bytes;
        if bytes == 0 {
            // No element: nothing to share (the pointer may be anything, null included).
            out.kind = PlanKind::Empty as u8;
            return Ok(Decision::Empty);
        }
        if policy == CopyPolicy::Always {
            return Ok(copy(out, COPY_REQUESTED));
        }
        out.kind = PlanKind::View as u8;
        out.parent_address = descriptor.first_element();
        (out.parent_dims[0], out.lengths[0]) = (bytes, bytes);
        (out.starts[0], out.steps[0], out.permutation[0]) = (1, 1, 1);
        return Ok(Decision::View);
    }

    let ndim = descriptor.ndim();
    let (mut reversed_shape, mut reversed_strides) = (DimVec::new(), DimVec::new());
    let (shape, strides) = match order {
        IndexOrder::Producer => (descriptor.shape(), descriptor.strides()),
        IndexOrder::Reversed => {
            for k in (0..ndim).rev() {
                reversed_shape.push(descriptor.shape()[k]);
                reversed_strides.push(descriptor.strides()[k]);
            }
            (&reversed_shape[..], &reversed_strides[..])
        }
    };
    out.ndims = ndim as i64;
    out.dims[..ndim].copy_from_slice(shape);
    if descriptor.element_count() == 0 {
        out.kind = PlanKind::Empty as u8;
        return Ok(Decision::Empty);
    }
    if policy == CopyPolicy::Always {
        return Ok(copy(out, COPY_REQUESTED));
    }
    // Every element is as misaligned as the first (strides count whole elements).
    if !descriptor.is_aligned() {
        return match policy {
            CopyPolicy::Never => Err(Error::Misaligned {
                address: descriptor.first_element(),
                align: descriptor.element().alignment(),
                element: descriptor.element().julia_name(),
            }),
            _ => Ok(copy(out, MISALIGNED)),
        };
    }
    let element_size = descriptor.element().size();
    if dense_view_into(shape, strides, descriptor.first_element(), out) {
        out.kind = PlanKind::View as u8;
        return Ok(Decision::View);
    }
    match view_into(
        shape,
        strides,
        element_size,
        descriptor.first_element(),
        out,
    ) {
        Ok(()) => {
            out.kind = PlanKind::View as u8;
            Ok(Decision::View)
        }
        Err(reason) if policy == CopyPolicy::IfNeeded => Ok(copy(out, reason)),
        Err(reason) => Err(Error::CopyRequired {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            reason,
        }),
    }
}

/// Turns `out` into a copy plan (its dims are already the result's).
pub(crate) fn copy(out: &mut ArrayPlan, reason: &'static str) -> Decision {
    out.kind = PlanKind::Copy as u8;
    out.parent_address = 0;
    out.needs_view = 0;
    out.needs_permutation = 0;
    Decision::Copy { reason }
}

/// The view of a tensor compact in column-major or row-major result order whose dims are all
/// of length ≥ 2 (most tensors), written in one pass; `false` for any other layout, which
/// [`view_into`] then plans. The answer is the one `view_into` would give: the tensor is its
/// own parent, in its own order or reversed.
fn dense_view_into(
    shape: &[i64],
    strides: &[i64],
    first_element: usize,
    out: &mut ArrayPlan,
) -> bool {
    let ndim = shape.len();
    if ndim == 0 {
        return false;
    }
    // One pass, each stride against its neighbour's span rather than a running product, and no
    // early exit: the comparisons are independent of each other and a compact tensor is
    // checked whole anyway. A wrapped product cannot pass falsely: when every equation holds,
    // induction from the stride-1 end makes each stride the exact product of the dims before
    // it, which the validated element count bounds.
    let (mut short, mut column_major, mut row_major) =
        (shape[0] < 2, strides[0] == 1, strides[ndim - 1] == 1);
    for k in 1..ndim {
        short |= shape[k] < 2;
        column_major &= strides[k] == strides[k - 1].wrapping_mul(shape[k - 1]);
        row_major &= strides[k - 1] == strides[k].wrapping_mul(shape[k]);
    }
    // A 1-d compact tensor is both: column-major is its own order.
    row_major &= !column_major;
    if short {
        return false;
    }
    if !column_major && !row_major {
        return false;
    }
    // The parent is the tensor itself, in its own order or reversed: parent dim `p` is result
    // dim `ndim - 1 - p`, and result dim `p` is parent dim `ndim - p` (1-based). Written as one
    // loop of contiguous stores, which vectorises.
    for p in 0..ndim {
        let len = if row_major {
            shape[ndim - 1 - p]
        } else {
            shape[p]
        };
        out.parent_dims[p] = len;
        out.lengths[p] = len;
        out.starts[p] = 1;
        out.steps[p] = 1;
        out.permutation[p] = if row_major {
            (ndim - p) as i64
        } else {
            p as i64 + 1
        };
    }
    out.parent_address = first_element;
    out.needs_view = 0;
    out.needs_permutation = u8::from(row_major && ndim > 1);
    true
}

/// `dividend / divisor` for a divisor known to divide it, trying the `likely` quotient first:
/// a dense tensor's parent dims are its lengths and its steps are 1, and a multiplication is
/// far cheaper than a 64-bit division.
fn exact_quotient(dividend: u64, divisor: u64, likely: u64) -> u64 {
    if divisor.checked_mul(likely) == Some(dividend) {
        likely
    } else {
        dividend / divisor
    }
}

/// Sorts `varying` (dims, in position order) and their `links` by stride, stably: an insertion
/// sort, cheap for the few dims of real tensors.
fn rank_by_stride(varying: &mut [u8], links: &mut [Link]) {
    for i in 1..varying.len() {
        let (dim, link) = (varying[i], links[i]);
        let mut at = i;
        while at > 0 && links[at - 1].stride > link.stride {
            varying[at] = varying[at - 1];
            links[at] = links[at - 1];
            at -= 1;
        }
        (varying[at], links[at]) = (dim, link);
    }
}

/// Writes the view of a non-empty, validated, aligned tensor into `out`, or says why there is
/// none. `shape`/`strides` in result order; `out.dims` already holds the shape.
///
/// Per-dimension scratch lives in plain stack arrays with a local count: growing a list whose
/// length lives in memory costs a store and a reload per entry on this path.
fn view_into(
    shape: &[i64],
    strides: &[i64],
    element_size: usize,
    first_element: usize,
    out: &mut ArrayPlan,
) -> std::result::Result<(), &'static str> {
    let ndim = shape.len();
    // Dimensions of length ≥ 2 decide the layout; the stride of a length-1 dimension is never
    // used to address anything, so it may be any value. They are ranked by |stride|, ties by
    // position.
    let mut varying = [0u8; MAX_NDIM];
    let mut links = [Link::default(); MAX_NDIM];
    let mut count = 0;
    let (mut ascending, mut descending) = (true, true);
    let mut previous = 0u64;
    for k in 0..ndim {
        if shape[k] < 2 {
            continue;
        }
        if strides[k] == 0 {
            return Err(ZERO_STRIDE);
        }
        let stride = strides[k].unsigned_abs();
        if count > 0 {
            ascending &= previous <= stride;
            descending &= previous > stride;
        }
        previous = stride;
        varying[count] = k as u8;
        links[count] = Link {
            len: shape[k] as u64,
            stride,
        };
        count += 1;
    }
    let (varying, links) = (&mut varying[..count], &mut links[..count]);
    if descending {
        // Row-major order, the commonest after column-major (already ascending): reversed.
        varying.reverse();
        links.reverse();
    } else if !ascending {
        rank_by_stride(varying, links);
    }
    let (varying, links) = (&*varying, &*links);
    let mut parent_strides = [0u64; MAX_NDIM];
    let parent_strides = &mut parent_strides[..count];
    nest::nest(links, parent_strides)?;
    let parent_strides = &*parent_strides;

    // Parent dims by rank; the parent's element count bounds every quantity derived below.
    const CONSTANT: u8 = u8::MAX;
    let mut rank_of = [CONSTANT; MAX_NDIM];
    // The parent dim of rank r is P[r+1] / P[r], but the last one's is its own reach.
    let mut last_dim = 1;
    if let Some(last) = links.last() {
        last_dim = (last.len - 1)
            .checked_mul(last.stride / parent_strides[count - 1])
            .and_then(|reach| reach.checked_add(1))
            .ok_or(PARENT_TOO_LARGE)?;
    }
    let parent_dim = |r: usize| match parent_strides.get(r + 1) {
        Some(&next) => exact_quotient(next, parent_strides[r], links[r].len),
        None => last_dim,
    };
    // The parent's element count is its last stride times its last dim.
    let parent_elements = parent_strides
        .last()
        .map_or(Some(1), |&stride| stride.checked_mul(last_dim))
        .ok_or(PARENT_TOO_LARGE)?;
    for (r, &k) in varying.iter().enumerate() {
        rank_of[usize::from(k)] = r as u8;
    }
    let fits = parent_elements
        .checked_mul(element_size as u64)
        .is_some_and(|bytes| bytes <= isize::MAX as u64);
    if !fits {
        return Err(PARENT_TOO_LARGE);
    }

    // Parent order: the varying dims by rank, each length-1 dim placed right after the varying
    // dim that precedes it in result order (so F-order stays identity). Its group is 0 before
    // any varying dim, else 1 + the rank of that dim; counting the length-1 dims per group
    // gives every position in one pass.
    let mut group = [0u8; MAX_NDIM];
    let mut constant_in = [0u8; MAX_NDIM + 1];
    let mut current = 0u8;
    for k in 0..ndim {
        if rank_of[k] == CONSTANT {
            group[k] = current;
            constant_in[usize::from(current)] += 1;
        } else {
            current = rank_of[k] + 1;
        }
    }
    // `constant_before[g]`: length-1 dims in groups below `g`.
    let mut constant_before = [0u8; MAX_NDIM + 2];
    let mut running = 0u8;
    for g in 0..=count {
        running += constant_in[g];
        constant_before[g + 1] = running;
    }
    let mut placed_in = [0u8; MAX_NDIM + 1];

    // Below, `parent_elements` ≤ isize::MAX: no step, start or offset can overflow.
    let mut offset_elements: isize = 0;
    let (mut needs_view, mut needs_permutation) = (false, false);
    for k in 0..ndim {
        let p = if rank_of[k] == CONSTANT {
            let g = usize::from(group[k]);
            let p = g + usize::from(constant_before[g] + placed_in[g]);
            placed_in[g] += 1;
            (
                out.parent_dims[p],
                out.starts[p],
                out.steps[p],
                out.lengths[p],
            ) = (1, 1, 1, 1);
            p
        } else {
            let r = usize::from(rank_of[k]);
            let p = r + usize::from(constant_before[r + 1]);
            let len = shape[k] as usize;
            let step = exact_quotient(links[r].stride, parent_strides[r], 1) as usize;
            let (start, signed_step) = if strides[k] > 0 {
                (1, step as isize)
            } else {
                offset_elements -= ((len - 1) * links[r].stride as usize) as isize;
                ((len - 1) * step + 1, -(step as isize))
            };
            let parent_dim = parent_dim(r) as i64;
            needs_view |= start != 1 || signed_step != 1 || len as i64 != parent_dim;
            out.parent_dims[p] = parent_dim;
            out.starts[p] = start as i64;
            out.steps[p] = signed_step as i64;
            out.lengths[p] = len as i64;
            p
        };
        out.permutation[k] = p as i64 + 1;
        needs_permutation |= p != k;
    }
    out.parent_address = first_element.wrapping_add_signed(offset_elements * element_size as isize);
    out.needs_view = u8::from(needs_view);
    out.needs_permutation = u8::from(needs_permutation);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The one-pass view of compact tensors is the general planner's answer.
        #[test]
        fn the_dense_shortcut_plans_what_the_general_planner_plans(
            shape in proptest::collection::vec(2i64..6, 1..8),
            row_major in any::<bool>(),
            first_element in (1usize..1 << 40).prop_map(|a| a * 8),
        ) {
            let ndim = shape.len();
            let mut strides = vec![0i64; ndim];
            let mut span = 1;
            for i in 0..ndim {
                let k = if row_major { ndim - 1 - i } else { i };
                strides[k] = span;
                span *= shape[k];
            }
            let (mut shortcut, mut general) = (ArrayPlan::zeroed(), ArrayPlan::zeroed());
            prop_assert!(dense_view_into(&shape, &strides, first_element, &mut shortcut));
            prop_assert_eq!(view_into(&shape, &strides, 8, first_element, &mut general), Ok(()));
            prop_assert_eq!(shortcut.parent_address, general.parent_address);
            prop_assert_eq!(
                (shortcut.needs_view, shortcut.needs_permutation),
                (general.needs_view, general.needs_permutation)
            );
            prop_assert_eq!(&shortcut.parent_dims[..ndim], &general.parent_dims[..ndim]);
            prop_assert_eq!(&shortcut.starts[..ndim], &general.starts[..ndim]);
            prop_assert_eq!(&shortcut.steps[..ndim], &general.steps[..ndim]);
            prop_assert_eq!(&shortcut.lengths[..ndim], &general.lengths[..ndim]);
            prop_assert_eq!(&shortcut.permutation[..ndim], &general.permutation[..ndim]);
        }

        /// Anything else is left to the general planner.
        #[test]
        fn the_dense_shortcut_declines_other_layouts(
            shape in proptest::collection::vec(1i64..6, 1..6),
            strides in proptest::collection::vec(-40i64..40, 6),
        ) {
            let strides = &strides[..shape.len()];
            let mut out = ArrayPlan::zeroed();
            let taken = dense_view_into(&shape, strides, 1 << 20, &mut out);
            let dense_in = |row_major: bool| {
                let mut span = 1;
                (0..shape.len()).all(|i| {
                    let k = if row_major { shape.len() - 1 - i } else { i };
                    let ok = shape[k] >= 2 && strides[k] == span;
                    span *= shape[k];
                    ok
                })
            };
            prop_assert_eq!(taken, dense_in(false) || dense_in(true));
        }
    }
}
