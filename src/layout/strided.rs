//! The strided plan: any layout DLPack allows as one flat parent span, an offset and the
//! strides — what a strided array type holds (StridedViews.jl's `StridedView(parent, size,
//! strides, offset)`). Zero, negative, permuted, stepped and non-nesting strides all have one,
//! so unlike [`plan`](super::plan) it never needs a copy: the span runs from the lowest element
//! any index reaches to the highest, and the element at 0-based index `(i₁, …, iₙ)` is span
//! element `offset + Σ iₖ·stridesₖ` (0-based).

use super::IndexOrder;
use crate::descriptor::TensorDescriptor;
use crate::dims::DimVec;
use crate::dtype::ElementType;
use crate::error::{Error, Result};

/// A strided plan (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StridedPlan {
    /// Bytes from the tensor's first element to the span's first element (≤ 0: negative
    /// strides reach below the first element).
    pub span_byte_offset: i64,
    /// Elements in the span; 0 for an empty tensor.
    pub span_len: usize,
    /// Elements from the span's first element to the tensor's element at index `(0, …, 0)`.
    pub offset: usize,
    /// Extents and strides (in elements) in result order.
    pub dims: DimVec<usize>,
    pub strides: DimVec<i64>,
}

/// The strided plan for `descriptor` in `order`. Refused only where no element type can index
/// the span: packed sub-byte elements, and a first element misaligned for the element type (an
/// empty tensor reads no element, so its address does not matter).
pub fn strided_plan(descriptor: &TensorDescriptor, order: IndexOrder) -> Result<StridedPlan> {
    let element = descriptor.element();
    if let ElementType::PackedBits { code, bits } = element {
        return Err(Error::PackedSubbyteStrided { code, bits });
    }
    let (shape, strides) = super::ordered(descriptor, order);
    // Validated extents are non-negative.
    let dims = shape.iter().map(|&n| n as usize).collect();
    if descriptor.element_count() == 0 {
        return Ok(StridedPlan {
            span_byte_offset: 0,
            span_len: 0,
            offset: 0,
            dims,
            strides,
        });
    }
    if !descriptor.is_aligned() {
        return Err(Error::Misaligned {
            address: descriptor.first_element(),
            align: element.alignment(),
            element: element.julia_name(),
        });
    }
    // Whole elements: strides count elements, so both ends are multiples of the size.
    let (low, high) = descriptor.byte_span();
    let size = element.size() as i64;
    Ok(StridedPlan {
        span_byte_offset: low,
        span_len: ((high - low) / size) as usize,
        offset: (-low / size) as usize,
        dims,
        strides,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::indices;
    use super::*;
    use proptest::prelude::*;

    /// Shapes of 0-4 dims with extents 0-4, strides -7..=7 (zero included), either order.
    fn layouts() -> impl Strategy<Value = (Vec<i64>, Vec<i64>, bool)> {
        (0usize..=4)
            .prop_flat_map(|n| {
                (
                    proptest::collection::vec(0i64..=4, n),
                    proptest::collection::vec(-7i64..=7, n),
                    any::<bool>(),
                )
            })
            .prop_map(|(shape, strides, reversed)| (shape, strides, reversed))
    }

    proptest! {
        /// Over real memory: every element the plan's span, offset and strides address is the
        /// producer's element at the same index, and the span is exactly what the indices reach.
        #[test]
        fn every_element_is_the_producers_at_the_same_index((shape, strides, reversed) in layouts()) {
            let reach: i64 = shape.iter().zip(&strides).map(|(&n, &s)| (n - 1).max(0) * s.abs()).sum();
            let values: Vec<i64> = (0..2 * reach + 1).collect();
            let first = values.as_ptr() as usize + reach as usize * 8;
            let descriptor = crate::test_support::host_descriptor(first, &shape, &strides, ElementType::Int64);
            let order = if reversed { IndexOrder::Reversed } else { IndexOrder::Producer };
            let plan = strided_plan(&descriptor, order).unwrap();
            let span_start = (reach + plan.span_byte_offset / 8) as usize;
            let span = &values[span_start..span_start + plan.span_len];
            let (mut low, mut high) = (usize::MAX, 0);
            for index in indices(&plan.dims) {
                let reached = plan.offset as i64
                    + index.iter().zip(&plan.strides).map(|(&i, &s)| i as i64 * s).sum::<i64>();
                prop_assert!(reached >= 0 && (reached as usize) < plan.span_len);
                let producer_index: Vec<usize> =
                    if reversed { index.iter().rev().copied().collect() } else { index.clone() };
                let producer = reach
                    + producer_index.iter().zip(&strides).map(|(&i, &s)| i as i64 * s).sum::<i64>();
                prop_assert_eq!(span[reached as usize], values[producer as usize]);
                low = low.min(reached as usize);
                high = high.max(reached as usize);
            }
            if descriptor.element_count() > 0 {
                prop_assert_eq!((low, high + 1), (0, plan.span_len));
            } else {
                prop_assert_eq!(plan.span_len, 0);
            }
        }
    }

    #[test]
    fn a_broadcast_is_one_element_and_a_reversal_starts_at_its_last() {
        let at = 1 << 20;
        let broadcast =
            crate::test_support::host_descriptor(at, &[3, 4], &[0, 1], ElementType::Float64);
        let plan = strided_plan(&broadcast, IndexOrder::Producer).unwrap();
        assert_eq!(
            (plan.span_byte_offset, plan.span_len, plan.offset),
            (0, 4, 0)
        );
        assert_eq!(&plan.strides[..], &[0, 1]);
        let reversed = crate::test_support::host_descriptor(at, &[5], &[-2], ElementType::Float32);
        let plan = strided_plan(&reversed, IndexOrder::Producer).unwrap();
        assert_eq!(
            (plan.span_byte_offset, plan.span_len, plan.offset),
            (-32, 9, 8)
        );
    }

    #[test]
    fn misaligned_and_packed_elements_are_refused_by_name() {
        let misaligned =
            crate::test_support::host_descriptor((1 << 20) + 4, &[2], &[1], ElementType::Float64);
        let error = strided_plan(&misaligned, IndexOrder::Producer).unwrap_err();
        assert!(
            matches!(error, Error::Misaligned { align: 8, .. }),
            "{error}"
        );
        let packed = ElementType::PackedBits { code: 17, bits: 4 };
        let error = strided_plan(
            &crate::test_support::host_descriptor(1 << 20, &[2], &[1], packed),
            IndexOrder::Producer,
        )
        .unwrap_err();
        assert!(
            matches!(error, Error::PackedSubbyteStrided { code: 17, bits: 4 }),
            "{error}"
        );
        // An empty tensor reads nothing: its address may be anything.
        let empty = crate::test_support::host_descriptor(
            (1 << 20) + 4,
            &[0, 2],
            &[2, 1],
            ElementType::Float64,
        );
        let plan = strided_plan(&empty, IndexOrder::Producer).unwrap();
        assert_eq!((plan.span_len, &plan.dims[..]), (0, &[0, 2][..]));
    }
}
