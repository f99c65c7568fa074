//! A plan as one flat C struct: everything the Julia glue needs to build the array, returned by
//! one call (`rsdlpack_py_import_plan`) instead of one call per number.
//!
//! Julia mirrors this struct field for field (`ArrayPlan` in julia/python_bridge.jl) and
//! ctypes does too (test/python/rsdlpack_ctypes.py); `size_of` is checked by both. Julia
//! indices are already 1-based here, so the glue only passes numbers on.

use super::{LayoutPlan, ViewPlan};
use crate::descriptor::TensorDescriptor;
use crate::dims::MAX_NDIM;
use std::ffi::c_void;

/// [`ArrayPlan::kind`]'s values.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanKind {
    /// Wrap `parent_address` as an array of `parent_dims`, then view `ranges`, then permute.
    View = 0,
    /// Allocate an array of `dims`; nothing is shared (the tensor was already released).
    Empty = 1,
    /// Allocate an array of `dims` and have the bridge copy the tensor into it.
    Copy = 2,
}

/// The flat plan. Fixed-size arrays hold `ndims` meaningful entries (the rest are unspecified;
/// 0 from [`ArrayPlan::new`]).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ArrayPlan {
    /// The bridge's owned handle for the tensor (views and copies), null for empty results.
    pub tensor: *mut c_void,
    /// Address of the view's parent array (views only).
    pub parent_address: usize,
    /// Rank of the result (equal to the parent's for views).
    pub ndims: i64,
    /// The result's dims.
    pub dims: [i64; MAX_NDIM],
    /// The parent array's dims (views).
    pub parent_dims: [i64; MAX_NDIM],
    /// Per parent dim: the view's range `start:step:start+step*(len-1)`, 1-based (views).
    pub starts: [i64; MAX_NDIM],
    pub steps: [i64; MAX_NDIM],
    pub lengths: [i64; MAX_NDIM],
    /// Per result dim: its parent dim, 1-based, as `PermutedDimsArray` takes it (views).
    pub permutation: [i64; MAX_NDIM],
    /// [`crate::ElementType::code`].
    pub element_code: u32,
    /// DLPack's device type and id of the memory.
    pub device_type: u32,
    pub device_id: i32,
    /// A [`PlanKind`].
    pub kind: u8,
    /// 1 when the result shares memory the producer marked read-only.
    pub read_only: u8,
    /// 1 when the view is not the whole parent (a `view` is needed).
    pub needs_view: u8,
    /// 1 when the permutation is not the identity (a `PermutedDimsArray` is needed).
    pub needs_permutation: u8,
}

impl ArrayPlan {
    /// The flat form of `plan` for `descriptor`; `tensor` is left null for the bridge to set.
    pub fn new(descriptor: &TensorDescriptor, plan: &LayoutPlan) -> Self {
        let mut flat = Self {
            tensor: std::ptr::null_mut(),
            parent_address: 0,
            ndims: 0,
            dims: [0; MAX_NDIM],
            parent_dims: [0; MAX_NDIM],
            starts: [0; MAX_NDIM],
            steps: [0; MAX_NDIM],
            lengths: [0; MAX_NDIM],
            permutation: [0; MAX_NDIM],
            element_code: 0,
            device_type: 0,
            device_id: 0,
            kind: 0,
            read_only: 0,
            needs_view: 0,
            needs_permutation: 0,
        };
        flat.fill(descriptor, plan);
        flat
    }

    /// Writes the flat form of `plan` into `self` in place (the struct is large: an import
    /// writes it straight into the caller's memory). Sets every field but `tensor` (null) and
    /// the array entries past `ndims`, which keep whatever they held.
    pub fn fill(&mut self, descriptor: &TensorDescriptor, plan: &LayoutPlan) {
        let device = descriptor.device().to_dlpack();
        self.tensor = std::ptr::null_mut();
        self.element_code = descriptor.element().code();
        self.device_type = device.device_type.0;
        self.device_id = device.device_id;
        self.parent_address = 0;
        self.read_only = 0;
        self.needs_view = 0;
        self.needs_permutation = 0;
        match plan {
            LayoutPlan::View(view) => {
                self.kind = PlanKind::View as u8;
                self.fill_view(descriptor, view);
            }
            LayoutPlan::Empty { dims } | LayoutPlan::Copy { dims, .. } => {
                self.kind = if matches!(plan, LayoutPlan::Empty { .. }) {
                    PlanKind::Empty
                } else {
                    PlanKind::Copy
                } as u8;
                self.ndims = dims.len() as i64;
                for (out, &d) in self.dims.iter_mut().zip(dims.iter()) {
                    *out = d as i64;
                }
            }
        }
    }

    fn fill_view(&mut self, descriptor: &TensorDescriptor, view: &ViewPlan) {
        self.parent_address = descriptor
            .first_element()
            .wrapping_add_signed(view.parent_byte_offset);
        self.read_only = u8::from(descriptor.read_only());
        self.needs_view = u8::from(!view.is_whole_parent());
        self.needs_permutation = u8::from(!view.is_identity_permutation());
        self.ndims = view.parent_dims.len() as i64;
        // The planner bounds every dim, start and step by the parent's element count, which is
        // at most isize::MAX: each fits an i64.
        for (p, (&dim, range)) in view.parent_dims.iter().zip(view.ranges.iter()).enumerate() {
            self.parent_dims[p] = dim as i64;
            self.starts[p] = range.start as i64;
            self.steps[p] = range.step as i64;
            self.lengths[p] = range.len as i64;
        }
        for (k, &p) in view.permutation.iter().enumerate() {
            self.permutation[k] = p as i64 + 1;
            self.dims[k] = view.ranges[p].len as i64;
        }
    }

    /// The plan's kind.
    pub fn plan_kind(&self) -> PlanKind {
        match self.kind {
            0 => PlanKind::View,
            1 => PlanKind::Empty,
            _ => PlanKind::Copy,
        }
    }
}
