use super::*;
use proptest::prelude::*;

/// A descriptor at a fake address: planning never reads memory.
fn descriptor(shape: &[i64], strides: &[i64], element: ElementType) -> TensorDescriptor {
    crate::test_support::host_descriptor(1 << 20, shape, strides, element)
}

/// Every multi-index of `dims`, first index fastest.
fn indices(dims: &[usize]) -> Vec<Vec<usize>> {
    let total: usize = dims.iter().product();
    (0..total)
        .map(|mut flat| {
            dims.iter()
                .map(|&d| {
                    let i = flat % d;
                    flat /= d;
                    i
                })
                .collect()
        })
        .collect()
}

/// Checks that the Julia composition addresses exactly what DLPack addresses, in bytes
/// relative to the first element, and stays inside the parent.
fn assert_view_addresses(view: &ViewPlan, shape: &[i64], strides: &[i64], size: usize) {
    let dims: Vec<usize> = shape.iter().map(|&n| n as usize).collect();
    assert_eq!(view.result_dims(), dims);
    let mut parent_strides = vec![1usize; view.parent_dims.len()];
    for p in 1..parent_strides.len() {
        parent_strides[p] = parent_strides[p - 1] * view.parent_dims[p - 1];
    }
    for index in indices(&dims) {
        let dlpack: i64 = index
            .iter()
            .zip(strides)
            .map(|(&i, &s)| i as i64 * s)
            .sum::<i64>()
            * size as i64;
        let mut julia = view.parent_byte_offset as i64;
        for (k, &i) in index.iter().enumerate() {
            let p = view.permutation[k];
            let range = view.ranges[p];
            let parent_index = range.start as i64 - 1 + i as i64 * range.step as i64;
            assert!(
                (0..view.parent_dims[p] as i64).contains(&parent_index),
                "index {index:?} leaves parent dim {p} ({view:?})"
            );
            julia += parent_index * (parent_strides[p] * size) as i64;
        }
        assert_eq!(
            julia, dlpack,
            "index {index:?}, shape {shape:?}, strides {strides:?}, {view:?}"
        );
    }
}

#[test]
fn row_major_is_a_permuted_array_or_a_plain_reversed_one() {
    let d = descriptor(&[2, 3], &[3, 1], ElementType::Float32);
    let LayoutPlan::View(producer) = plan(&d, IndexOrder::Producer, CopyPolicy::Never).unwrap()
    else {
        panic!()
    };
    assert_eq!(producer.parent_dims, vec![3, 2]);
    assert_eq!(producer.permutation, vec![1, 0]);
    assert!(producer.is_whole_parent());
    let LayoutPlan::View(raw) = plan(&d, IndexOrder::Reversed, CopyPolicy::Never).unwrap() else {
        panic!()
    };
    assert_eq!(raw.parent_dims, vec![3, 2]);
    assert!(
        raw.is_identity_permutation() && raw.is_whole_parent(),
        "{raw:?}"
    );
}

#[test]
fn column_major_with_unit_dims_stays_a_plain_array() {
    let d = descriptor(&[4, 1, 5, 1], &[1, 99, 4, -7], ElementType::Float64);
    let LayoutPlan::View(view) = plan(&d, IndexOrder::Producer, CopyPolicy::Never).unwrap() else {
        panic!()
    };
    assert!(
        view.is_identity_permutation() && view.is_whole_parent(),
        "{view:?}"
    );
    assert_eq!(view.parent_dims, vec![4, 1, 5, 1]);
}

#[test]
fn contiguous_tensors_have_no_overhang_and_column_slices_do() {
    let dense = descriptor(&[2, 5], &[5, 1], ElementType::Float32);
    let LayoutPlan::View(view) = plan(&dense, IndexOrder::Producer, CopyPolicy::Never).unwrap()
    else {
        panic!()
    };
    assert_eq!(view.parent_overhang(&dense), 0);
    let columns = descriptor(&[2, 2], &[5, 1], ElementType::Float32); // a[:, 3:5] of 2×5
    let LayoutPlan::View(view) = plan(&columns, IndexOrder::Producer, CopyPolicy::Never).unwrap()
    else {
        panic!()
    };
    assert_eq!(view.parent_overhang(&columns), 3 * 4);
}

#[test]
fn reversed_vector_starts_below_the_first_element() {
    let d = descriptor(&[5], &[-1], ElementType::Int32);
    let LayoutPlan::View(view) = plan(&d, IndexOrder::Producer, CopyPolicy::Never).unwrap() else {
        panic!()
    };
    assert_eq!(view.parent_byte_offset, -16);
    assert_eq!(
        view.ranges,
        vec![DimRange {
            start: 5,
            step: -1,
            len: 5
        }]
    );
}

#[test]
fn broadcast_and_overlap_need_copies_and_say_why() {
    let broadcast = descriptor(&[3, 4], &[0, 1], ElementType::Float32);
    let err = plan(&broadcast, IndexOrder::Producer, CopyPolicy::Never)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("zero stride") && err.contains("[0, 1]"),
        "{err}"
    );
    assert!(matches!(
        plan(&broadcast, IndexOrder::Producer, CopyPolicy::IfNeeded).unwrap(),
        LayoutPlan::Copy { dims, .. } if dims == vec![3, 4]
    ));
    let overlap = descriptor(&[3, 3], &[1, 1], ElementType::Float32);
    assert!(matches!(
        plan(&overlap, IndexOrder::Producer, CopyPolicy::Never),
        Err(Error::CopyRequired { .. })
    ));
}

#[test]
fn empty_scalar_packed_and_forced_copies() {
    let empty = descriptor(&[0, 3], &[3, 1], ElementType::Float32);
    assert_eq!(
        plan(&empty, IndexOrder::Producer, CopyPolicy::Never).unwrap(),
        LayoutPlan::Empty { dims: vec![0, 3] }
    );
    let scalar = descriptor(&[], &[], ElementType::Float32);
    let LayoutPlan::View(view) = plan(&scalar, IndexOrder::Producer, CopyPolicy::Never).unwrap()
    else {
        panic!()
    };
    assert!(view.parent_dims.is_empty());
    let packed = descriptor(
        &[3, 3],
        &[3, 1],
        ElementType::PackedBits { code: 17, bits: 4 },
    );
    let LayoutPlan::View(bytes) = plan(&packed, IndexOrder::Producer, CopyPolicy::Never).unwrap()
    else {
        panic!()
    };
    assert_eq!(bytes.parent_dims, vec![5]);
    let dense = descriptor(&[2, 3], &[3, 1], ElementType::Float32);
    assert!(matches!(
        plan(&dense, IndexOrder::Producer, CopyPolicy::Always).unwrap(),
        LayoutPlan::Copy { .. }
    ));
}

fn arbitrary_layout() -> impl Strategy<Value = (Vec<i64>, Vec<i64>)> {
    (0usize..=4).prop_flat_map(|ndim| {
        (
            prop::collection::vec(1i64..=4, ndim),
            prop::collection::vec(-10i64..=10, ndim),
        )
    })
}

/// A strided slice of a dense row-major array with permuted axes: always viewable.
fn sliced_layout() -> impl Strategy<Value = (Vec<i64>, Vec<i64>)> {
    (1usize..=4)
        .prop_flat_map(|ndim| {
            (
                prop::collection::vec(1i64..=7, ndim),
                Just((0..ndim).collect::<Vec<_>>()).prop_shuffle(),
                prop::collection::vec((1i64..=3, any::<bool>(), 0.0f64..1.0), ndim),
            )
        })
        .prop_map(|(parent, axes, slices)| {
            let dense = crate::descriptor::compact_row_major_strides(&parent).unwrap();
            let mut shape = Vec::new();
            let mut strides = Vec::new();
            for (&axis, &(step, backwards, fraction)) in axes.iter().zip(&slices) {
                let max_len = (parent[axis] - 1) / step + 1;
                let len = 1 + ((max_len - 1) as f64 * fraction) as i64;
                shape.push(len);
                strides.push(if backwards { -step } else { step } * dense[axis]);
            }
            (shape, strides)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_view_addresses_exactly_the_dlpack_elements((shape, strides) in arbitrary_layout(), reversed in any::<bool>(), size in prop::sample::select(vec![1usize, 2, 4, 8, 16])) {
        let element = [ElementType::UInt8, ElementType::Int16, ElementType::Float32, ElementType::Float64, ElementType::ComplexF64]
            .into_iter().find(|e| e.size() == size).unwrap();
        let d = descriptor(&shape, &strides, element);
        let order = if reversed { IndexOrder::Reversed } else { IndexOrder::Producer };
        let (rs, rt) = ordered(&d, order);
        match plan(&d, order, CopyPolicy::IfNeeded).unwrap() {
            LayoutPlan::View(view) => assert_view_addresses(&view, &rs, &rt, size),
            LayoutPlan::Copy { dims, .. } => prop_assert_eq!(dims, rs.iter().map(|&n| n as usize).collect::<Vec<_>>()),
            LayoutPlan::Empty { .. } => prop_assert!(false, "no dim is 0"),
        }
    }

    #[test]
    fn every_slice_of_a_dense_array_is_a_view((shape, strides) in sliced_layout(), reversed in any::<bool>()) {
        let d = descriptor(&shape, &strides, ElementType::Float32);
        let order = if reversed { IndexOrder::Reversed } else { IndexOrder::Producer };
        let (rs, rt) = ordered(&d, order);
        match plan(&d, order, CopyPolicy::Never) {
            Ok(LayoutPlan::View(view)) => assert_view_addresses(&view, &rs, &rt, 4),
            other => prop_assert!(false, "shape {:?} strides {:?}: {:?}", shape, strides, other),
        }
    }
}

#[test]
fn read_only_tensors_refuse_writable_views_but_not_copies() {
    let mut d = descriptor(&[3], &[1], ElementType::Float32);
    d.read_only = true;
    let view = plan(&d, IndexOrder::Producer, CopyPolicy::Never).unwrap();
    assert!(matches!(
        check_access(&d, Access::Writable, &view),
        Err(Error::ReadOnly)
    ));
    assert!(check_access(&d, Access::ReadOnly, &view).is_ok());
    let copy = plan(&d, IndexOrder::Producer, CopyPolicy::Always).unwrap();
    assert!(check_access(&d, Access::Writable, &copy).is_ok());
}

#[test]
fn a_producer_copy_satisfies_copy_true() {
    assert_eq!(CopyPolicy::Always.given(true), CopyPolicy::IfNeeded);
    assert_eq!(CopyPolicy::Always.given(false), CopyPolicy::Always);
    assert_eq!(CopyPolicy::Never.given(true), CopyPolicy::Never);
}
