//! Dimension merging: the fewest dims through which the source steps as the output does.

use crate::descriptor::TensorDescriptor;
use crate::dims::{DimVec, IndexOrder};

/// The tensor's dims in `order` without its size-1 dims, each merged into the dim before it
/// where the source steps through the two as through one (its stride is the previous stride
/// times the previous extent). The output is dense column-major, so it steps through such a
/// pair as one too: a column-major source becomes a single dim of stride 1, and a transpose
/// of several dims the fewest planes. Empty for a one-element tensor. Written into the
/// caller's empty lists: returned, the two 32-slot lists would be moved whole, a `memcpy` that
/// small copies feel (BENCHMARKS.md, "Measured choices").
pub(super) fn merge_dims(
    descriptor: &TensorDescriptor,
    order: IndexOrder,
    merged_shape: &mut DimVec<i64>,
    merged_strides: &mut DimVec<i64>,
) {
    let mut merge = |(&n, &s): (&i64, &i64)| {
        if n == 1 {
            return;
        }
        if let (Some(last_n), Some(&last_s)) = (merged_shape.last_mut(), merged_strides.last()) {
            // The merged extent is a product of extents, at most the element count.
            if last_s.checked_mul(*last_n) == Some(s) {
                *last_n *= n;
                return;
            }
        }
        merged_shape.push(n);
        merged_strides.push(s);
    };
    let dims = descriptor.shape().iter().zip(descriptor.strides());
    match order {
        IndexOrder::Producer => dims.for_each(&mut merge),
        IndexOrder::Reversed => dims.rev().for_each(&mut merge),
    }
}
