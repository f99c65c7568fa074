//! The planner itself: the decision for one tensor, written straight into the caller's
//! [`ArrayPlan`].
//!
//! An import plans once per call, so the planner is on the hot path: it works on the
//! descriptor's slices and a few stack arrays of bytes, and writes each answer once, into the
//! flat struct the bridge hands to Julia. Nothing per-dimension is built and then moved (the
//! 32-slot lists of a readable plan cost more to copy than to compute); the tests' readable
//! form (`LayoutPlan`, feature `readable-plans`) is derived from the flat one.

use super::flat::{ArrayPlan, PlanKind};
use super::nest::{self, Link};
use super::{CopyPolicy, CopyReason, IndexOrder};
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
    Copy { reason: CopyReason },
}

impl Decision {
    /// Why a copy (`None` for the other decisions).
    pub fn reason(self) -> Option<CopyReason> {
        match self {
            Self::Copy { reason } => Some(reason),
            _ => None,
        }
    }
}

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
        return Ok(packed_into(descriptor, policy, out));
    }
    let ndim = descriptor.ndim();
    let (mut reversed_shape, mut reversed_strides) = (DimVec::new(), DimVec::new());
    let (shape, strides) = in_order(
        descriptor,
        order,
        &mut reversed_shape,
        &mut reversed_strides,
    );
    out.ndims = ndim as i64;
    out.dims[..ndim].copy_from_slice(shape);
    if descriptor.element_count() == 0 {
        out.kind = PlanKind::Empty as u8;
        return Ok(Decision::Empty);
    }
    if policy == CopyPolicy::Always {
        return Ok(copy(out, CopyReason::Requested));
    }
    // Every element is as misaligned as the first (strides count whole elements).
    if !descriptor.is_aligned() {
        return misaligned(descriptor, policy, out);
    }
    let first_element = descriptor.first_element();
    if dense_view_into(shape, strides, first_element, out) {
        out.kind = PlanKind::View as u8;
        return Ok(Decision::View);
    }
    match view_into(
        shape,
        strides,
        descriptor.element().size(),
        first_element,
        out,
    ) {
        Ok(()) => {
            out.kind = PlanKind::View as u8;
            Ok(Decision::View)
        }
        Err(reason) => copy_or_refuse(policy, shape, strides, reason, out),
    }
}

/// The decision for misaligned data: a copy, or the error when none may be made.
fn misaligned(
    descriptor: &TensorDescriptor,
    policy: CopyPolicy,
    out: &mut ArrayPlan,
) -> Result<Decision> {
    match policy {
        CopyPolicy::Never => Err(Error::Misaligned {
            address: descriptor.first_element(),
            align: descriptor.element().alignment(),
            element: descriptor.element().julia_name(),
        }),
        _ => Ok(copy(out, CopyReason::Misaligned)),
    }
}

/// The decision when no view exists, for `reason`: a copy, or the error when none may be made
/// (`shape` and `strides` in result order, for its message).
fn copy_or_refuse(
    policy: CopyPolicy,
    shape: &[i64],
    strides: &[i64],
    reason: CopyReason,
    out: &mut ArrayPlan,
) -> Result<Decision> {
    match policy {
        CopyPolicy::Never => Err(Error::CopyRequired {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            reason,
        }),
        _ => Ok(copy(out, reason)),
    }
}

/// The descriptor's shape and strides in result order: its own slices in producer order, else
/// reversed into `shape` and `strides` (empty lists, filled here).
fn in_order<'a>(
    descriptor: &'a TensorDescriptor,
    order: IndexOrder,
    shape: &'a mut DimVec<i64>,
    strides: &'a mut DimVec<i64>,
) -> (&'a [i64], &'a [i64]) {
    match order {
        IndexOrder::Producer => (descriptor.shape(), descriptor.strides()),
        IndexOrder::Reversed => {
            for k in (0..descriptor.ndim()).rev() {
                shape.push(descriptor.shape()[k]);
                strides.push(descriptor.strides()[k]);
            }
            (&shape[..], &strides[..])
        }
    }
}

/// The plan of a packed sub-byte tensor: one run of bytes, which validation guaranteed (its
/// layout is compact), viewed as a byte vector.
fn packed_into(descriptor: &TensorDescriptor, policy: CopyPolicy, out: &mut ArrayPlan) -> Decision {
    let bytes = descriptor.dense_byte_size() as i64;
    out.ndims = 1;
    out.dims[0] = bytes;
    if bytes == 0 {
        // No element: nothing to share (the pointer may be anything, null included).
        out.kind = PlanKind::Empty as u8;
        return Decision::Empty;
    }
    if policy == CopyPolicy::Always {
        return copy(out, CopyReason::Requested);
    }
    out.kind = PlanKind::View as u8;
    out.parent_address = descriptor.first_element();
    (out.parent_dims[0], out.lengths[0]) = (bytes, bytes);
    (out.starts[0], out.steps[0], out.permutation[0]) = (1, 1, 1);
    Decision::View
}

/// Turns `out` into a copy plan (its dims are already the result's).
pub(crate) fn copy(out: &mut ArrayPlan, reason: CopyReason) -> Decision {
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
/// Per-dimension scratch lives on the stack: bytes in plain arrays, the links and the parent
/// strides in [`DimVec`]s, whose unused slots stay unwritten (zeroing 32 of each, 768 bytes, cost
/// more than the few pushes a real tensor makes).
fn view_into(
    shape: &[i64],
    strides: &[i64],
    element_size: usize,
    first_element: usize,
    out: &mut ArrayPlan,
) -> std::result::Result<(), CopyReason> {
    let mut varying = [0u8; MAX_NDIM];
    let mut links = DimVec::new();
    let count = rank_varying(shape, strides, &mut varying, &mut links)?;
    let (varying, links) = (&varying[..count], &links[..]);
    let mut parent_strides = DimVec::new();
    parent_strides.grow_to(count, 0);
    let parent_strides = &mut parent_strides[..];
    let last_step = nest::nest_with_last_step(links, parent_strides)?;
    let parent = Parent::new(links, parent_strides, last_step, element_size)?;
    let mut rank_of = [CONSTANT; MAX_NDIM];
    for (r, &k) in varying.iter().enumerate() {
        rank_of[usize::from(k)] = r as u8;
    }
    let mut slots = ParentOrder::new(&rank_of[..shape.len()], count);
    let offset_elements = write_view(shape, strides, &parent, &rank_of, &mut slots, out);
    out.parent_address = first_element.wrapping_add_signed(offset_elements * element_size as isize);
    Ok(())
}

/// `rank_of[k]` of a dimension of length 1, which no stride orders.
const CONSTANT: u8 = u8::MAX;

/// Writes the dims of length ≥ 2 (by position) and their links into `varying` and `links`,
/// ranked by |stride|, ties by position, and returns how many; a zero stride among them means
/// no view. The others decide nothing: the stride of a length-1 dimension never addresses
/// anything, so it may be any value.
///
/// The order is found first, and the links written in it: row-major order, the commonest
/// after column-major, is written back to front rather than reversed once written (reading
/// a link back whole right after its two halves were stored waits for those stores).
fn rank_varying(
    shape: &[i64],
    strides: &[i64],
    varying: &mut [u8; MAX_NDIM],
    links: &mut DimVec<Link>,
) -> std::result::Result<usize, CopyReason> {
    let mut count = 0;
    let (mut ascending, mut descending) = (true, true);
    let mut previous = 0u64;
    for k in 0..shape.len() {
        if shape[k] < 2 {
            continue;
        }
        if strides[k] == 0 {
            return Err(CopyReason::ZeroStride);
        }
        let stride = strides[k].unsigned_abs();
        if count > 0 {
            ascending &= previous <= stride;
            descending &= previous > stride;
        }
        previous = stride;
        count += 1;
    }
    let mut at = 0;
    let mut write = |k: usize| {
        if shape[k] >= 2 {
            varying[at] = k as u8;
            links.push(Link {
                len: shape[k] as u64,
                stride: strides[k].unsigned_abs(),
            });
            at += 1;
        }
    };
    // Descending with more than one varying dim: row-major order, ranked back to front.
    if descending && count > 1 {
        (0..shape.len()).rev().for_each(&mut write);
    } else {
        (0..shape.len()).for_each(&mut write);
        if !ascending {
            rank_by_stride(&mut varying[..count], links);
        }
    }
    Ok(count)
}

/// The parent the varying dims nest in, by rank: its strides (the first is 1), its last dim,
/// which is the last link's own reach (the others' are quotients of the strides), and the last
/// link's step, which the nesting found.
struct Parent<'a> {
    links: &'a [Link],
    strides: &'a [u64],
    last_dim: u64,
    last_step: u64,
}

impl<'a> Parent<'a> {
    /// The parent of `links` with `strides`, or why Julia cannot wrap it: its element count
    /// (its last stride times its last dim) must fit in `isize::MAX` bytes, which then bounds
    /// every quantity derived from it.
    fn new(
        links: &'a [Link],
        strides: &'a [u64],
        last_step: u64,
        element_size: usize,
    ) -> std::result::Result<Self, CopyReason> {
        debug_assert!(strides.first().is_none_or(|&first| first == 1));
        debug_assert!(
            (links.last().zip(strides.last()))
                .is_none_or(|(last, &p)| last.stride / p == last_step)
        );
        let mut last_dim = 1;
        if let Some(last) = links.last() {
            last_dim = (last.len - 1)
                .checked_mul(last_step)
                .and_then(|reach| reach.checked_add(1))
                .ok_or(CopyReason::ParentTooLarge)?;
        }
        let elements = strides
            .last()
            .map_or(Some(1), |&stride| stride.checked_mul(last_dim))
            .ok_or(CopyReason::ParentTooLarge)?;
        let fits = elements
            .checked_mul(element_size as u64)
            .is_some_and(|bytes| bytes <= isize::MAX as u64);
        if !fits {
            return Err(CopyReason::ParentTooLarge);
        }
        Ok(Self {
            links,
            strides,
            last_dim,
            last_step,
        })
    }

    /// The parent dim of rank `r`: `P[r+1] / P[r]`, the last one its own reach.
    fn dim(&self, r: usize) -> u64 {
        match self.strides.get(r + 1) {
            // `P[0] = 1`: nothing to divide.
            Some(&next) if r == 0 => next,
            Some(&next) => next / self.strides[r],
            None => self.last_dim,
        }
    }

    /// The step of rank `r` in its parent dim.
    fn step(&self, r: usize) -> usize {
        if r + 1 == self.links.len() {
            self.last_step as usize
        } else if r == 0 {
            self.links[0].stride as usize
        } else {
            (self.links[r].stride / self.strides[r]) as usize
        }
    }
}

/// Where each dim goes in the parent: the varying dims by rank, each length-1 dim right after
/// the varying dim that precedes it in result order (so F-order stays identity). A length-1
/// dim's group is 0 before any varying dim, else 1 + the rank of that dim; counting the
/// length-1 dims per group gives every position in one pass.
struct ParentOrder {
    group: [u8; MAX_NDIM],
    /// `constant_before[g]`: length-1 dims in groups below `g`.
    constant_before: [u8; MAX_NDIM + 2],
    /// Length-1 dims placed so far, per group.
    placed_in: [u8; MAX_NDIM + 1],
}

impl ParentOrder {
    /// The order for `rank_of` (one entry per dim) with `count` varying dims.
    fn new(rank_of: &[u8], count: usize) -> Self {
        // Written in place: byte stores into local arrays copied out whole afterwards stall
        // the wide loads of the copy.
        let mut order = Self {
            group: [0; MAX_NDIM],
            constant_before: [0; MAX_NDIM + 2],
            placed_in: [0; MAX_NDIM + 1],
        };
        let mut constant_in = [0u8; MAX_NDIM + 1];
        let mut current = 0u8;
        for (k, &rank) in rank_of.iter().enumerate() {
            if rank == CONSTANT {
                order.group[k] = current;
                constant_in[usize::from(current)] += 1;
            } else {
                current = rank + 1;
            }
        }
        let mut running = 0u8;
        for (g, &constant) in constant_in[..=count].iter().enumerate() {
            running += constant;
            order.constant_before[g + 1] = running;
        }
        order
    }

    /// The parent position of the varying dim of rank `r`.
    fn varying(&self, r: usize) -> usize {
        r + usize::from(self.constant_before[r + 1])
    }

    /// The parent position of length-1 dim `k`, the next one of its group.
    fn next_constant(&mut self, k: usize) -> usize {
        let g = usize::from(self.group[k]);
        let p = g + usize::from(self.constant_before[g] + self.placed_in[g]);
        self.placed_in[g] += 1;
        p
    }
}

/// Writes the parent dims, ranges and permutation of the view, and its two `needs_*` flags;
/// returns the elements from the tensor's first element to the parent's (≤ 0: a negative
/// stride puts the parent's start below the first element by that dim's reach).
fn write_view(
    shape: &[i64],
    strides: &[i64],
    parent: &Parent,
    rank_of: &[u8; MAX_NDIM],
    slots: &mut ParentOrder,
    out: &mut ArrayPlan,
) -> isize {
    // The parent's element count bounds every step, start and offset: no overflow below.
    let mut offset_elements: isize = 0;
    let (mut needs_view, mut needs_permutation) = (false, false);
    for k in 0..shape.len() {
        let p = if rank_of[k] == CONSTANT {
            let p = slots.next_constant(k);
            (
                out.parent_dims[p],
                out.starts[p],
                out.steps[p],
                out.lengths[p],
            ) = (1, 1, 1, 1);
            p
        } else {
            let r = usize::from(rank_of[k]);
            let p = slots.varying(r);
            let len = shape[k] as usize;
            let step = parent.step(r);
            let (start, signed_step) = if strides[k] > 0 {
                (1, step as isize)
            } else {
                offset_elements -= ((len - 1) * parent.links[r].stride as usize) as isize;
                ((len - 1) * step + 1, -(step as isize))
            };
            let parent_dim = parent.dim(r) as i64;
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
    out.needs_view = u8::from(needs_view);
    out.needs_permutation = u8::from(needs_permutation);
    offset_elements
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
