//! The one-crossing import behind Julia's `from_dlpack(StridedView, t)`: as
//! [`super::import_plan`], but the answer is the core's strided plan
//! ([`rsdlpack::layout::decide_strided`]) — one flat span over every element the strides reach,
//! the offset of the tensor's first element in it, and the strides — which a strided array type
//! holds for any layout, zero, negative and overlapping strides included. The handle is the
//! same as `rsdlpack_py_import_plan`'s, released by the functions of [`super::held`].

use super::border::entry_point;
use super::import_plan::{RsdlPlanOptions, import_then};
use super::managed::RsdlImportOptions;
use super::values::RsdlDense;
use crate::error::refuse_null;
use crate::error::{BridgeError, BridgeResult};
use crate::export::roots;
use pyo3::ffi;
use rsdlpack::MAX_NDIM;
use rsdlpack::TensorDescriptor;
use rsdlpack::layout::{PlanKind, StridedDecision, decide_strided};
use std::ffi::{c_char, c_void};

/// The answer of [`rsdlpack_py_import_strided_plan`]. Arrays hold `ndims` meaningful entries.
///
/// For a view (`kind` `RSDL_PLAN_KIND_VIEW`), the element at 0-based index `(i₁, …, iₙ)` is
/// span element `offset + Σ iₖ·stridesₖ` (0-based), and the span is exactly the elements the
/// indices reach. For an empty result or a copy (`RSDL_PLAN_KIND_EMPTY`, `RSDL_PLAN_KIND_COPY`)
/// nothing is shared: the caller allocates `span_len` elements (0 when empty), which
/// `rsdlpack_imported_copy_into` fills column-major for a copy, and `strides` and `offset` (0)
/// describe that array of `dims`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RsdlStridedPlan {
    /// The owned handle (views and copies) for `rsdlpack_imported_*`; null for empty results.
    pub tensor: *mut c_void,
    /// Address of the span's first element (views; 0 otherwise): the tensor's first element
    /// plus `span_byte_offset`.
    pub span_address: usize,
    /// Bytes from the tensor's first element to the span's first element (≤ 0: negative strides
    /// reach below the first element; 0 for the other kinds).
    pub span_byte_offset: i64,
    /// Elements in the span (views), or in the array the caller allocates (the other kinds).
    pub span_len: i64,
    /// Elements from the span's first element to the tensor's element at index `(0, …, 0)`.
    pub offset: i64,
    pub ndims: i64,
    /// Extents and strides (in elements) in result order (the requested index order).
    pub dims: [i64; MAX_NDIM],
    pub strides: [i64; MAX_NDIM],
    /// As in `RsdlImportResult`.
    pub released_roots: u64,
    /// `ElementType::code` of the elements.
    pub element_code: u32,
    /// DLPack's device type and id of the memory.
    pub device_type: u32,
    pub device_id: i32,
    /// An `RsdlPlanKind`: view, empty or copy.
    pub kind: u8,
    /// 1 when the view shares memory the producer marked read-only.
    pub read_only: u8,
    pub reserved: u16,
}

impl RsdlStridedPlan {
    /// The whole answer for `decision` about `descriptor`, with no handle yet.
    fn of(descriptor: &TensorDescriptor, decision: &StridedDecision) -> Self {
        let device = descriptor.device().to_dlpack();
        let mut out = Self {
            tensor: std::ptr::null_mut(),
            span_address: 0,
            span_byte_offset: 0,
            span_len: 0,
            offset: 0,
            ndims: 0,
            dims: [0; MAX_NDIM],
            strides: [0; MAX_NDIM],
            released_roots: 0,
            element_code: descriptor.element().code(),
            device_type: device.device_type.0,
            device_id: device.device_id,
            kind: PlanKind::View as u8,
            read_only: 0,
            reserved: 0,
        };
        // Validated: extents and element counts fit in isize, so in i64.
        let (dims, strides): (&[usize], Option<&[i64]>) = match decision {
            StridedDecision::View { plan, read_only } => {
                out.span_address = descriptor
                    .first_element()
                    .wrapping_add_signed(plan.span_byte_offset as isize);
                out.span_byte_offset = plan.span_byte_offset;
                out.span_len = plan.span_len as i64;
                out.offset = plan.offset as i64;
                out.read_only = u8::from(*read_only);
                (&plan.dims, Some(&plan.strides))
            }
            StridedDecision::Empty { dims } => {
                out.kind = PlanKind::Empty as u8;
                (dims, None)
            }
            StridedDecision::Copy { dims, .. } => {
                out.kind = PlanKind::Copy as u8;
                out.span_len = dims.iter().product::<usize>() as i64;
                (dims, None)
            }
        };
        out.ndims = dims.len() as i64;
        for (k, &d) in dims.iter().enumerate() {
            out.dims[k] = d as i64;
        }
        match strides {
            Some(strides) => out.strides[..strides.len()].copy_from_slice(strides),
            // The column-major strides of the array the caller allocates.
            None => {
                let mut step = 1i64;
                for (k, &d) in dims.iter().enumerate() {
                    out.strides[k] = step;
                    step = step.saturating_mul(d as i64);
                }
            }
        }
        out
    }
}

/// Imports `object` (anything with `__dlpack__`, or a capsule), validates it once and answers
/// with its strided plan for the array `plan_options` describes, all in one call, written to
/// `*out`. `plan_options` and `flags` mean what they mean for
/// `rsdlpack_py_import_plan_with_flags` (`RSDLPACK_CALL_REFUSE_WITHOUT_GIL`,
/// `RSDLPACK_PLAN_WRITABLE_TYPE`, `RSDLPACK_CALL_DECLINE_REFUSALS`), except that every layout
/// is a view: a copy is made only for `copy=1`, or for misaligned data under `copy=-1` (host
/// targets only), and `dense` must be 0.
///
/// When `out->kind` is a view or a copy, `out->tensor` is an owned handle for
/// `rsdlpack_imported_copy_into` and the release functions; for empty results it is null and
/// nothing is held. On error nothing is held (the producer's deleter has run) and `*out` means
/// nothing. A CUDA tensor remembers the stream `import_options` names, as for
/// `rsdlpack_py_import_plan`.
///
/// # Safety
/// As `rsdlpack_py_import_plan` (`out` writable for an `RsdlStridedPlan`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_py_import_strided_plan(
    object: *mut ffi::PyObject,
    import_options: *const RsdlImportOptions,
    plan_options: *const RsdlPlanOptions,
    flags: u32,
    out: *mut RsdlStridedPlan,
    error_out: *mut *mut c_char,
) -> i32 {
    let body = || -> BridgeResult<()> {
        refuse_null!(
            "rsdlpack_py_import_strided_plan",
            "object, plan_options and out",
            object,
            plan_options,
            out,
        );
        // SAFETY: `plan_options` is readable (checked non-null; caller's contract).
        let dense = unsafe { (*plan_options).dense };
        if RsdlDense::from_field(dense) == RsdlDense::Required {
            return Err(BridgeError::PlanOption {
                what: "dense (a strided plan holds any layout: pass 0)",
                value: dense.into(),
            });
        }
        let mut answer = None;
        // SAFETY: forwarded from this entry point's contract; both pointers checked non-null.
        let handle = unsafe {
            import_then(
                "rsdlpack_py_import_strided_plan",
                object,
                import_options,
                plan_options,
                flags,
                |descriptor, request| {
                    let decision = decide_strided(descriptor, request)?;
                    let plan = RsdlStridedPlan::of(descriptor, &decision);
                    answer = Some(plan);
                    Ok(!matches!(decision, StridedDecision::Empty { .. }))
                },
            )
        }?;
        let mut plan = answer.expect("a successful import planned");
        plan.tensor = handle;
        plan.released_roots = roots::released_count() as u64;
        // SAFETY: `out` is writable (checked non-null; caller's contract).
        unsafe { out.write(plan) };
        Ok(())
    };
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    unsafe { entry_point(error_out, body) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsdlpack::layout::{ArrayRequest, Target};
    use rsdlpack::{Device, ElementType};

    fn descriptor(first: usize, shape: &[i64], strides: &[i64]) -> TensorDescriptor {
        let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        let steps: Vec<isize> = strides.iter().map(|&s| s as isize).collect();
        let layout = rsdlpack::IndexOrder::Producer;
        *TensorDescriptor::from_julia_layout(
            first,
            Device::CPU,
            ElementType::Float64,
            &dims,
            &steps,
            layout,
        )
        .unwrap()
    }

    #[test]
    fn a_view_carries_the_span_address_and_the_strides_in_result_order() {
        let t = descriptor(0x10_000, &[3, 4], &[-4, 0]);
        let decision = decide_strided(&t, &ArrayRequest::new(Target::HostArray)).unwrap();
        let plan = RsdlStridedPlan::of(&t, &decision);
        assert_eq!(plan.kind, PlanKind::View as u8);
        assert_eq!(
            (plan.span_byte_offset, plan.span_len, plan.offset),
            (-64, 9, 8)
        );
        assert_eq!(plan.span_address, 0x10_000 - 64);
        assert_eq!(
            (plan.ndims, &plan.dims[..2], &plan.strides[..2]),
            (2, &[3, 4][..], &[-4, 0][..])
        );
        assert_eq!(
            (plan.element_code, plan.device_type, plan.device_id),
            (ElementType::Float64.code(), 1, 0)
        );
    }

    #[test]
    fn copies_and_empty_results_describe_the_column_major_array_to_allocate() {
        let t = descriptor(0x10_000, &[2, 3, 4], &[1, 2, 6]);
        let copy = ArrayRequest {
            policy: rsdlpack::CopyPolicy::Always,
            ..ArrayRequest::new(Target::HostArray)
        };
        let plan = RsdlStridedPlan::of(&t, &decide_strided(&t, &copy).unwrap());
        assert_eq!(
            (plan.kind, plan.span_address, plan.span_len, plan.offset),
            (PlanKind::Copy as u8, 0, 24, 0)
        );
        assert_eq!(&plan.strides[..3], &[1, 2, 6]);
        let empty = descriptor(0x10_000, &[2, 0, 4], &[-5, 9, 1]);
        let plan = RsdlStridedPlan::of(&empty, &decide_strided(&empty, &copy).unwrap());
        assert_eq!(
            (plan.kind, plan.span_len, &plan.dims[..3]),
            (PlanKind::Empty as u8, 0, &[2, 0, 4][..])
        );
        assert_eq!(&plan.strides[..3], &[1, 2, 0]);
    }
}
