//! The target-aware decision ([`plan_for`]) and its flat C form ([`ArrayPlan`]).

use super::*;
use crate::device::{Device, DeviceKind};
use crate::dims::MAX_NDIM;
use crate::dtype::ElementType;
use crate::error::Error;

fn on(kind: DeviceKind, shape: &[i64], strides: &[i64]) -> TensorDescriptor {
    crate::test_support::descriptor_on(
        Device { kind, id: 0 },
        1 << 20,
        shape,
        strides,
        ElementType::Float32,
    )
}

fn typed(order: IndexOrder, policy: CopyPolicy) -> ArrayRequest {
    ArrayRequest {
        order,
        policy,
        dense: true,
        element: Some(ElementType::Float32),
        ndim: Some(2),
        ..ArrayRequest::new(Target::HostArray)
    }
}

#[test]
fn each_target_holds_only_its_memory() {
    let host = on(DeviceKind::Cpu, &[2, 3], &[3, 1]);
    let cuda = on(DeviceKind::Cuda, &[2, 3], &[3, 1]);
    let other = on(DeviceKind::Other(8), &[2, 3], &[3, 1]);
    let to_host = ArrayRequest::new(Target::HostArray);
    let to_cuda = ArrayRequest::new(Target::CudaArray);
    assert!(matches!(plan_for(&host, &to_host), Ok(LayoutPlan::View(_))));
    assert!(matches!(plan_for(&cuda, &to_cuda), Ok(LayoutPlan::View(_))));
    for (descriptor, request, target) in [
        (&cuda, &to_host, "a host array"),
        (&host, &to_cuda, "a CUDA array"),
        (&other, &to_host, "a host array"),
        (&other, &to_cuda, "a CUDA array"),
    ] {
        let message = plan_for(descriptor, request).unwrap_err().to_string();
        assert!(message.contains(target), "{message}");
        assert!(
            message.contains(&format!(
                "type {}",
                descriptor.device().to_dlpack().device_type.0
            )),
            "{message}"
        );
    }
    // Pinned and managed memory are host-readable and belong to CUDA: both targets take them.
    for kind in [DeviceKind::CudaHost, DeviceKind::CudaManaged] {
        let pinned = on(kind, &[2, 3], &[3, 1]);
        assert!(plan_for(&pinned, &to_host).is_ok());
        assert!(plan_for(&pinned, &to_cuda).is_ok());
    }
}

#[test]
fn a_cuda_array_never_gets_a_copy_plan() {
    let overlapping = on(DeviceKind::Cuda, &[3, 3], &[1, 1]);
    let message = plan_for(&overlapping, &ArrayRequest::new(Target::CudaArray))
        .unwrap_err()
        .to_string();
    assert!(message.contains("copies on the host only"), "{message}");
    let copy = ArrayRequest {
        policy: CopyPolicy::Always,
        ..ArrayRequest::new(Target::CudaArray)
    };
    let compact = on(DeviceKind::Cuda, &[2, 3], &[3, 1]);
    assert!(matches!(
        plan_for(&compact, &copy),
        Err(Error::DeviceCopyUnavailable { .. })
    ));
    // Empty tensors share nothing and need no copy.
    let empty = on(DeviceKind::Cuda, &[0, 3], &[3, 1]);
    assert!(matches!(
        plan_for(&empty, &copy),
        Ok(LayoutPlan::Empty { .. })
    ));
}

#[test]
fn typed_requests_check_element_type_and_rank_first() {
    let t = on(DeviceKind::Cpu, &[2, 3], &[1, 2]);
    let mut request = typed(IndexOrder::Producer, CopyPolicy::IfNeeded);
    assert!(matches!(plan_for(&t, &request), Ok(LayoutPlan::View(_))));
    request.element = Some(ElementType::Float64);
    let message = plan_for(&t, &request).unwrap_err().to_string();
    assert!(
        message.contains("Float32, not the requested Float64"),
        "{message}"
    );
    request.element = Some(ElementType::Float32);
    request.ndim = Some(3);
    let message = plan_for(&t, &request).unwrap_err().to_string();
    assert!(
        message.contains("2 dimensions, not the requested 3"),
        "{message}"
    );
    // Raw fp8 bytes are their own element type, not UInt8.
    let fp8 = crate::test_support::host_descriptor(
        t.first_element(),
        t.shape(),
        t.strides(),
        ElementType::RawBytes { code: 10, bits: 8 },
    );
    request.ndim = Some(2);
    request.element = Some(ElementType::UInt8);
    let message = plan_for(&fp8, &request).unwrap_err().to_string();
    assert!(message.contains("DLPackRaw{10, 8}"), "{message}");
    request.element = Some(fp8.element());
    assert!(plan_for(&fp8, &request).is_ok());
    // A packed sub-byte tensor arrives as one byte vector, whatever its shape: rank 1.
    let fp4 = ElementType::PackedBits { code: 17, bits: 4 };
    let packed = crate::test_support::host_descriptor(1 << 20, &[2, 4], &[4, 1], fp4);
    request.element = Some(fp4);
    request.ndim = Some(1);
    assert!(plan_for(&packed, &request).is_ok());
    request.ndim = Some(2);
    assert!(matches!(
        plan_for(&packed, &request),
        Err(Error::RankMismatch {
            expected: 2,
            found: 1
        })
    ));
}

#[test]
fn typed_requests_get_a_plain_array_or_a_copy() {
    let column_major = on(DeviceKind::Cpu, &[2, 3], &[1, 2]);
    let row_major = on(DeviceKind::Cpu, &[2, 3], &[3, 1]);
    let stepped = on(DeviceKind::Cpu, &[2, 3], &[1, 4]);
    let view = |d: &TensorDescriptor, r: &ArrayRequest| match plan_for(d, r) {
        Ok(LayoutPlan::View(v)) => v.is_whole_parent() && v.is_identity_permutation(),
        Ok(LayoutPlan::Copy { reason, .. }) => {
            assert!(reason.message().contains("dense"), "{reason}");
            false
        }
        other => panic!("{other:?}"),
    };
    let producer = typed(IndexOrder::Producer, CopyPolicy::IfNeeded);
    let reversed = typed(IndexOrder::Reversed, CopyPolicy::IfNeeded);
    assert!(view(&column_major, &producer));
    assert!(!view(&row_major, &producer));
    assert!(view(&row_major, &reversed));
    assert!(!view(&column_major, &reversed));
    assert!(!view(&stepped, &producer));
    // Without typing, the same layouts are views.
    let untyped = ArrayRequest::new(Target::HostArray);
    assert!(matches!(
        plan_for(&row_major, &untyped),
        Ok(LayoutPlan::View(_))
    ));
    assert!(matches!(
        plan_for(&stepped, &untyped),
        Ok(LayoutPlan::View(_))
    ));
    // copy=false: the refusal says why.
    let never = typed(IndexOrder::Producer, CopyPolicy::Never);
    let message = plan_for(&row_major, &never).unwrap_err().to_string();
    assert!(
        message.contains("dense array in the requested index order"),
        "{message}"
    );
    // A copy of a read-only tensor is writable; a view is refused unless read-only is accepted.
    let read_only = column_major.with_read_only(true);
    assert!(matches!(
        plan_for(&read_only, &producer),
        Err(Error::ReadOnly)
    ));
    let accepting = ArrayRequest {
        access: Access::ReadOnly,
        ..producer
    };
    assert!(plan_for(&read_only, &accepting).is_ok());
    let stepped_read_only = stepped.with_read_only(true);
    assert!(matches!(
        plan_for(&stepped_read_only, &producer),
        Ok(LayoutPlan::Copy { .. })
    ));
}

/// `decide` for an untyped host request, into a fresh plan.
fn decided(t: &TensorDescriptor, order: IndexOrder) -> (Result<Decision>, ArrayPlan) {
    let request = ArrayRequest {
        order,
        access: Access::ReadOnly,
        ..ArrayRequest::new(Target::HostArray)
    };
    let mut flat = ArrayPlan::zeroed();
    (decide(t, &request, &mut flat), flat)
}

#[test]
fn the_flat_plan_carries_the_view_with_one_based_indices() {
    // A reversed, stepped row-major slice: a view, a permutation and ranges with negative steps.
    let t = on(DeviceKind::Cpu, &[3, 2], &[-8, 2]).with_read_only(true);
    let (decision, flat) = decided(&t, IndexOrder::Producer);
    assert_eq!(decision.unwrap(), Decision::View);
    let readable = plan(&t, IndexOrder::Producer, CopyPolicy::IfNeeded).unwrap();
    let LayoutPlan::View(view) = &readable else {
        panic!("{readable:?}")
    };
    assert_eq!(flat.plan_kind(), Ok(PlanKind::View));
    assert_eq!(flat.ndims, 2);
    assert!(flat.tensor.is_null());
    assert_eq!(flat.element_code, ElementType::Float32.code());
    assert_eq!((flat.device_type, flat.device_id), (1, 0));
    assert_eq!(flat.read_only, 1);
    assert_eq!(flat.needs_view, u8::from(!view.is_whole_parent()));
    assert_eq!(flat.needs_permutation, 1);
    assert_eq!(
        flat.parent_address,
        t.first_element()
            .wrapping_add_signed(view.parent_byte_offset)
    );
    for p in 0..2 {
        assert_eq!(flat.parent_dims[p], view.parent_dims[p] as i64);
        assert_eq!(flat.starts[p], view.ranges[p].start as i64);
        assert_eq!(flat.steps[p], view.ranges[p].step as i64);
        assert_eq!(flat.lengths[p], view.ranges[p].len as i64);
        assert_eq!(flat.permutation[p], view.permutation[p] as i64 + 1);
    }
    assert_eq!(&flat.dims[..2], &[3, 2]);
    assert!(
        flat.dims[2..]
            .iter()
            .chain(&flat.parent_dims[2..])
            .all(|&x| x == 0)
    );
    // Written in place over an older plan: every field but the unused entries is rewritten.
    let mut reused = flat;
    reused.tensor = 8 as *mut std::ffi::c_void;
    let empty = on(DeviceKind::Cpu, &[0], &[1]);
    let request = ArrayRequest::new(Target::HostArray);
    assert_eq!(
        decide(&empty, &request, &mut reused).unwrap(),
        Decision::Empty
    );
    assert_eq!(
        (reused.plan_kind(), reused.ndims, reused.dims[0]),
        (Ok(PlanKind::Empty), 1, 0)
    );
    assert!(reused.tensor.is_null());
    assert_eq!(
        (
            reused.read_only,
            reused.needs_permutation,
            reused.parent_address
        ),
        (0, 0, 0)
    );
}

#[test]
fn the_flat_plan_of_copies_and_empties_has_dims_only() {
    let overlapping = on(DeviceKind::Cpu, &[3, 4], &[1, 1]);
    let (decision, copy) = decided(&overlapping, IndexOrder::Reversed);
    assert!(
        matches!(decision, Ok(Decision::Copy { .. })),
        "{decision:?}"
    );
    assert_eq!(copy.plan_kind(), Ok(PlanKind::Copy));
    assert_eq!((copy.ndims, &copy.dims[..3]), (2, &[4, 3, 0][..]));
    assert_eq!((copy.parent_address, copy.read_only), (0, 0));
    let empty = on(DeviceKind::Cpu, &[0, 5, 2], &[10, 2, 1]);
    let (_, flat) = decided(&empty, IndexOrder::Producer);
    assert_eq!(flat.plan_kind(), Ok(PlanKind::Empty));
    assert_eq!((flat.ndims, &flat.dims[..3]), (3, &[0, 5, 2][..]));
    // The C layout: 3 words, six arrays of MAX_NDIM words, three u32 and four u8, no padding.
    assert_eq!(MAX_NDIM, 32);
    assert_eq!(
        std::mem::size_of::<ArrayPlan>(),
        8 * 3 + 6 * 8 * 32 + 3 * 4 + 4
    );
    assert_eq!(std::mem::align_of::<ArrayPlan>(), 8);
}

#[test]
fn a_plan_kind_byte_is_read_through_a_checked_conversion() {
    let mut flat = ArrayPlan::zeroed();
    for kind in [PlanKind::View, PlanKind::Empty, PlanKind::Copy] {
        flat.kind = kind as u8;
        assert_eq!(flat.plan_kind(), Ok(kind));
    }
    for byte in [3, 7, u8::MAX] {
        flat.kind = byte;
        assert_eq!(flat.plan_kind(), Err(byte), "no kind, not a copy");
    }
}

#[test]
fn a_writable_type_refuses_read_only_memory_on_either_target_unless_copied() {
    // Julia's typed `Array{T,N}` / `CuArray{T,N}` with `readonly=true`: the caller accepts
    // read-only memory, the result's type cannot carry it.
    for (kind, target) in [
        (DeviceKind::Cpu, Target::HostArray),
        (DeviceKind::Cuda, Target::CudaArray),
    ] {
        let column_major = on(kind, &[2, 3], &[1, 2]);
        let request = ArrayRequest {
            access: Access::WritableType,
            target,
            ..typed(IndexOrder::Producer, CopyPolicy::IfNeeded)
        };
        let read_only = column_major.with_read_only(true);
        let refused = plan_for(&read_only, &request);
        assert!(
            matches!(refused, Err(Error::ReadOnlyIntoWritableType)),
            "{target:?}: {refused:?}"
        );
        let message = refused.unwrap_err().to_string();
        assert!(message.contains("ReadOnlyArray{T,N}") && message.contains("copy=true"));
        // Writable memory is viewed as usual.
        assert!(matches!(
            plan_for(&column_major, &request),
            Ok(LayoutPlan::View(_))
        ));
        // copy=true: a host copy, or the refusal of a device copy (never a read-only view).
        let copied = plan_for(
            &read_only,
            &ArrayRequest {
                policy: CopyPolicy::Always,
                ..request
            },
        );
        match target {
            Target::HostArray => assert!(matches!(copied, Ok(LayoutPlan::Copy { .. }))),
            Target::CudaArray => {
                assert!(matches!(copied, Err(Error::DeviceCopyUnavailable { .. })))
            }
        }
    }
}

/// The strided decision ([`decide_strided`]): a view for every layout the composed views
/// copy, under the same request rules.
mod strided {
    use super::*;

    fn strided(target: Target, policy: CopyPolicy, access: Access) -> ArrayRequest {
        ArrayRequest {
            policy,
            access,
            ..ArrayRequest::new(target)
        }
    }

    fn view_of(decision: Result<StridedDecision>) -> (StridedPlan, bool) {
        match decision {
            Ok(StridedDecision::View { plan, read_only }) => (plan, read_only),
            other => panic!("expected a view, got {other:?}"),
        }
    }

    #[test]
    fn broadcasts_and_overlaps_are_views_on_either_target() {
        let host = ArrayRequest::new(Target::HostArray);
        let cuda = ArrayRequest::new(Target::CudaArray);
        for (shape, strides) in [
            (&[3, 4][..], &[0, 1][..]),
            (&[3, 3], &[1, 1]),
            (&[4], &[-2]),
        ] {
            for (kind, request) in [(DeviceKind::Cpu, &host), (DeviceKind::Cuda, &cuda)] {
                let t = on(kind, shape, strides);
                let (plan, read_only) = view_of(decide_strided(&t, request));
                assert!(!read_only);
                assert_eq!(plan, strided_plan(&t, IndexOrder::Producer).unwrap());
            }
        }
        // Where the composed views need a copy, and so refuse a CUDA target.
        for (shape, strides) in [(&[3, 4][..], &[0, 1][..]), (&[3, 3], &[1, 1])] {
            assert!(matches!(
                plan_for(&on(DeviceKind::Cuda, shape, strides), &cuda),
                Err(Error::DeviceCopyUnavailable { .. })
            ));
        }
        // Reversed order: dims and strides in result order.
        let t = on(DeviceKind::Cpu, &[2, 3], &[0, 1]);
        let reversed = ArrayRequest {
            order: IndexOrder::Reversed,
            ..host
        };
        let (plan, _) = view_of(decide_strided(&t, &reversed));
        assert_eq!(
            (&plan.dims[..], &plan.strides[..]),
            (&[3, 2][..], &[1, 0][..])
        );
    }

    #[test]
    fn read_only_memory_follows_the_requests_access() {
        let broadcast = on(DeviceKind::Cpu, &[3, 4], &[0, 1]).with_read_only(true);
        let ask = |access| {
            decide_strided(
                &broadcast,
                &strided(Target::HostArray, CopyPolicy::IfNeeded, access),
            )
        };
        assert!(matches!(ask(Access::Writable), Err(Error::ReadOnly)));
        assert!(matches!(
            ask(Access::WritableType),
            Err(Error::ReadOnlyIntoWritableType)
        ));
        assert!(view_of(ask(Access::ReadOnly)).1, "read-only, and said so");
        // A copy is writable whatever the access.
        let copied = decide_strided(
            &broadcast,
            &strided(Target::HostArray, CopyPolicy::Always, Access::WritableType),
        );
        assert_eq!(
            copied.unwrap(),
            StridedDecision::Copy {
                dims: DimVec::from_slice(&[3, 4]).unwrap(),
                reason: CopyReason::Requested
            }
        );
    }

    #[test]
    fn copies_only_when_asked_or_misaligned_and_only_on_the_host() {
        let writable = Access::Writable;
        let compact = on(DeviceKind::Cpu, &[2, 3], &[3, 1]);
        // A tensor the producer copied already satisfies copy=true as a view.
        let copied_already = on(DeviceKind::Cpu, &[2, 3], &[3, 1]).with_is_copied(true);
        let always = strided(Target::HostArray, CopyPolicy::Always, writable);
        assert!(matches!(
            decide_strided(&compact, &always),
            Ok(StridedDecision::Copy {
                reason: CopyReason::Requested,
                ..
            })
        ));
        view_of(decide_strided(&copied_already, &always));
        let misaligned =
            crate::test_support::host_descriptor((1 << 20) + 2, &[2], &[1], ElementType::Float32);
        assert!(matches!(
            decide_strided(
                &misaligned,
                &strided(Target::HostArray, CopyPolicy::IfNeeded, writable)
            ),
            Ok(StridedDecision::Copy {
                reason: CopyReason::Misaligned,
                ..
            })
        ));
        assert!(matches!(
            decide_strided(
                &misaligned,
                &strided(Target::HostArray, CopyPolicy::Never, writable)
            ),
            Err(Error::Misaligned { align: 4, .. })
        ));
        let cuda = on(DeviceKind::Cuda, &[2, 3], &[3, 1]);
        assert!(matches!(
            decide_strided(
                &cuda,
                &strided(Target::CudaArray, CopyPolicy::Always, writable)
            ),
            Err(Error::DeviceCopyUnavailable {
                reason: CopyReason::Requested
            })
        ));
    }

    #[test]
    fn empty_tensors_share_nothing_even_when_a_copy_is_asked_for() {
        for (kind, target) in [
            (DeviceKind::Cpu, Target::HostArray),
            (DeviceKind::Cuda, Target::CudaArray),
        ] {
            let empty = on(kind, &[0, 3], &[0, -1]).with_read_only(true);
            let request = strided(target, CopyPolicy::Always, Access::Writable);
            assert_eq!(
                decide_strided(
                    &empty,
                    &ArrayRequest {
                        order: IndexOrder::Reversed,
                        ..request
                    }
                )
                .unwrap(),
                StridedDecision::Empty {
                    dims: DimVec::from_slice(&[3, 0]).unwrap()
                }
            );
        }
    }

    #[test]
    fn type_rank_device_and_packed_elements_are_refused_by_name() {
        let t = on(DeviceKind::Cpu, &[2, 3], &[3, 1]);
        let typed = |element, ndim| ArrayRequest {
            element: Some(element),
            ndim: Some(ndim),
            ..ArrayRequest::new(Target::HostArray)
        };
        view_of(decide_strided(&t, &typed(ElementType::Float32, 2)));
        assert!(matches!(
            decide_strided(&t, &typed(ElementType::Float64, 2)),
            Err(Error::TypeMismatch { .. })
        ));
        assert!(matches!(
            decide_strided(&t, &typed(ElementType::Float32, 3)),
            Err(Error::RankMismatch {
                expected: 3,
                found: 2
            })
        ));
        assert!(matches!(
            decide_strided(&t, &ArrayRequest::new(Target::CudaArray)),
            Err(Error::NotOnTarget { .. })
        ));
        let packed = crate::test_support::host_descriptor(
            1 << 20,
            &[4],
            &[1],
            ElementType::PackedBits { code: 17, bits: 4 },
        );
        let error = decide_strided(&packed, &ArrayRequest::new(Target::HostArray)).unwrap_err();
        assert!(
            matches!(error, Error::PackedSubbyteStrided { code: 17, bits: 4 }),
            "{error}"
        );
        assert!(
            error.to_string().contains("from_dlpack(Array, t)"),
            "{error}"
        );
    }
}
