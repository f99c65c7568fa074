//! A plan as one flat C struct: everything the Julia glue needs to build the array, returned by
//! one call (`rsdlpack_py_import_plan`) instead of one call per number.
//!
//! The C header (include/rsdlpack.h, generated) names it `RsdlArrayPlan`. Julia mirrors it
//! field for field (`ArrayPlan` in julia/python_bridge.jl) and ctypes does too
//! (test/python/rsdlpack_ctypes.py); CI checks both mirrors against the header
//! (scripts/check_mirrors.py), and Julia checks the size again when it loads the library.
//! Julia indices are already 1-based here, so the glue only passes numbers on.

#[cfg(any(test, feature = "readable-plans"))]
use super::{Decision, DimRange, LayoutPlan, ViewPlan};
#[cfg(any(test, feature = "readable-plans"))]
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

impl TryFrom<u8> for PlanKind {
    /// The byte, which names no kind.
    type Error = u8;

    fn try_from(byte: u8) -> Result<Self, u8> {
        [Self::View, Self::Empty, Self::Copy]
            .into_iter()
            .find(|kind| *kind as u8 == byte)
            .ok_or(byte)
    }
}

/// The flat plan. Fixed-size arrays hold `ndims` meaningful entries (the rest are unspecified;
/// 0 from [`ArrayPlan::zeroed`]).
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
    /// A plan with every field zero (and a null handle), to be written by
    /// [`decide`](super::decide).
    pub fn zeroed() -> Self {
        Self {
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
        }
    }

    /// The plan's kind; `Err` with the byte when it names none (a plan no planner wrote).
    pub fn plan_kind(&self) -> Result<PlanKind, u8> {
        PlanKind::try_from(self.kind)
    }

    /// The readable form of this plan of `descriptor`, as `decision` (which wrote it) says.
    #[cfg(any(test, feature = "readable-plans"))]
    pub(crate) fn readable(&self, descriptor: &TensorDescriptor, decision: Decision) -> LayoutPlan {
        let n = self.ndims as usize;
        let dims = || self.dims[..n].iter().map(|&d| d as usize).collect();
        match decision {
            Decision::Empty => LayoutPlan::Empty { dims: dims() },
            Decision::Copy { reason } => LayoutPlan::Copy {
                dims: dims(),
                reason,
            },
            Decision::View => LayoutPlan::View(ViewPlan {
                parent_byte_offset: self.parent_address.wrapping_sub(descriptor.first_element())
                    as isize,
                parent_dims: self.parent_dims[..n].iter().map(|&d| d as usize).collect(),
                ranges: (0..n)
                    .map(|p| DimRange {
                        start: self.starts[p] as usize,
                        step: self.steps[p] as isize,
                        len: self.lengths[p] as usize,
                    })
                    .collect(),
                permutation: self.permutation[..n]
                    .iter()
                    .map(|&p| p as usize - 1)
                    .collect(),
            }),
        }
    }
}
