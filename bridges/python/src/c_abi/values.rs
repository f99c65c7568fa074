//! The C ABI's named values that no entry point's signature carries: what the option fields
//! of `RsdlImportOptions`, `RsdlPlanOptions` and `RsdlArrayExport` may hold, and the limits
//! the header states (the numbers `rsdlpack_struct_size` knows the structs by are
//! [`super::sizes::RsdlStructId`]).
//!
//! One source for every ABI constant: these enums and consts, with [`crate::ErrorCode`],
//! [`super::sizes::RsdlStructId`], the core's [`rsdlpack::dtype::ElementCode`] and
//! [`rsdlpack::layout::PlanKind`], are written into include/rsdlpack.h by cbindgen (`RsdlCopy` → `RSDL_COPY_IF_NEEDED`, …; cbindgen.toml lists
//! them). Julia's and ctypes' constants (julia/abi.jl, test/python/rsdlpack_abi.py) are
//! generated from the header by scripts/abi_constants.py, and CI fails when the header or
//! either file is stale (bridges/python/tests/c_header.rs, scripts/check_mirrors.py). The
//! numbers are ABI: add values, never renumber one.
//!
//! The struct fields keep their plain integer types (a C enum's size is the compiler's
//! choice): these name the values, and the tests beside the parsers hold them to these.

/// `RsdlImportOptions.copy` and `RsdlPlanOptions.copy`: Python's `copy=` argument.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RsdlCopy {
    /// No preference (`copy=None`): share when possible, copy when needed.
    IfNeeded = -1,
    /// Never copy (`copy=False`): refuse (code `RSDL_ERROR_CODE_BUFFER`) when a copy is needed.
    Never = 0,
    /// Always copy (`copy=True`).
    Always = 1,
}

/// `RsdlPlanOptions.order` and `RsdlArrayExport.order`: which index order the array has.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RsdlIndexOrder {
    /// The producer's (import) or Julia's (share) index order.
    Producer = 0,
    /// The reversed dims.
    Reversed = 1,
}

/// `RsdlPlanOptions.target`: what kind of array the plan is for.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RsdlTarget {
    /// A host array (Julia's `Array`).
    HostArray = 0,
    /// A CUDA array (`CuArray`).
    CudaArray = 1,
}

/// `RsdlPlanOptions.readonly` (read-only memory is acceptable: the caller wraps it read-only)
/// and `RsdlArrayExport.read_only` (exported with DLPack's READ_ONLY flag). Read as C booleans:
/// any value but 0 is `RSDL_ACCESS_READ_ONLY`.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RsdlAccess {
    Writable = 0,
    ReadOnly = 1,
}

/// `RsdlPlanOptions.dense`: whether only a plain dense array will do (Julia's typed forms;
/// other layouts are copied). Read as a C boolean: any value but 0 is `RSDL_DENSE_REQUIRED`.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RsdlDense {
    AnyLayout = 0,
    Required = 1,
}

impl RsdlCopy {
    /// The value an option field holds, if it is one of these.
    #[inline]
    pub fn from_field(value: i32) -> Option<Self> {
        [Self::IfNeeded, Self::Never, Self::Always]
            .into_iter()
            .find(|c| *c as i32 == value)
    }
}

impl RsdlIndexOrder {
    /// The value an option field holds, if it is one of these.
    #[inline]
    pub fn from_field(value: u32) -> Option<Self> {
        [Self::Producer, Self::Reversed]
            .into_iter()
            .find(|o| *o as u32 == value)
    }
}

impl RsdlTarget {
    /// The value an option field holds, if it is one of these.
    #[inline]
    pub fn from_field(value: u32) -> Option<Self> {
        [Self::HostArray, Self::CudaArray]
            .into_iter()
            .find(|t| *t as u32 == value)
    }
}

impl RsdlAccess {
    /// The field read as a C boolean: `Writable` only for its own value.
    #[inline]
    pub fn from_field(value: u32) -> Self {
        if value == Self::Writable as u32 {
            Self::Writable
        } else {
            Self::ReadOnly
        }
    }
}

impl RsdlDense {
    /// The field read as a C boolean: `AnyLayout` only for its own value.
    #[inline]
    pub fn from_field(value: u32) -> Self {
        if value == Self::AnyLayout as u32 {
            Self::AnyLayout
        } else {
            Self::Required
        }
    }
}

/// `flags` bit of the `*_with_flags` entry points: when the calling thread does not hold the
/// GIL, refuse (`RSDL_ERROR_CODE_INVALID`, saying to call from the thread that holds it) rather
/// than wait for it. For callers whose Python thread may be waiting for the calling one (Julia:
/// PyCall's and PythonCall's main thread holds the GIL for good), where waiting is a deadlock.
/// Without it an entry point takes the GIL, waiting as long as another thread holds it (a C
/// caller that released it on purpose, ctypes' `CDLL`).
pub const RSDLPACK_CALL_REFUSE_WITHOUT_GIL: u32 = 2;

/// `flags` bit of `rsdlpack_py_import_plan_with_flags`: the result's type has no read-only
/// form (Julia's typed `Array{T,N}` and `CuArray{T,N}`), so a view of read-only memory is
/// refused (`RSDL_ERROR_CODE_BUFFER`) whatever `RsdlPlanOptions.readonly` accepts; a copy
/// (`copy=1`) is writable and is made where the target allows copies.
pub const RSDLPACK_PLAN_WRITABLE_TYPE: u32 = 4;

/// `flags` bit of `rsdlpack_py_share_into_with_flags`: `type` may be any object; one that is
/// not a Python type gets an exporter, as from `rsdlpack_py_share`, to hand to it. So a caller
/// that must not touch Python before the GIL check (Julia, whose `share(A, consumer)` takes
/// types and functions alike) asks what `consumer` is only once the call has succeeded.
pub const RSDLPACK_SHARE_EXPORTER_FOR_NON_TYPES: u32 = 8;

/// `flags` bit of `rsdlpack_py_import_plan_with_flags`, `rsdlpack_py_import_strided_plan` and
/// `rsdlpack_py_tensor_device`: when the object is not one to import — not a tensor (no
/// `__dlpack__`, or a Python type object such as `torch.Tensor` itself), a tensor whose
/// producer refuses to export it (torch's `requires_grad`, `nn.Parameter`, conjugate- and
/// negative-bit or sparse tensors, a sharded JAX array), or one that cannot be exchanged as
/// asked (another device, element type, rank or layout) — answer `RSDL_ERROR_CODE_DECLINED`
/// instead of the import's own code (`NOT_DLPACK`, `PRODUCER` or `BUFFER`; the message is the
/// same). Every other error keeps its code. For a converter that passes such objects on to
/// other converters (Julia's PythonCall `pyconvert` rules).
pub const RSDLPACK_CALL_DECLINE_REFUSALS: u32 = 16;

/// `flags` bit of `rsdlpack_py_share_with_flags` and `rsdlpack_py_share_into_with_flags`: the
/// root `array.root_id` keeps the stream `array.stream` alive too (Julia roots the task's
/// `CuStream` with the array), so an exporter of CUDA memory records a new event on that stream
/// at each `__dlpack__` (each consumer then waits for the writes enqueued up to its own call,
/// not only up to the share). Without it, one event at the share, after which the stream may
/// be gone.
pub const RSDLPACK_SHARE_STREAM_KEPT: u32 = 32;

/// `RsdlPlanOptions.element_code` and `RsdlPlanOptions.ndims`: any element type, any rank.
pub const RSDLPACK_PLAN_ANY: i64 = -1;

/// Where raw-byte element codes start: a raw element's code is `RSDLPACK_RAW_CODE_BASE` +
/// its DLPack type code × 256 + its bits (the named types' codes are `RsdlElementCode`).
// Repeated here for include/rsdlpack.h, as `RSDLPACK_MAX_NDIM` is: cbindgen emits only this
// crate's constants.
pub const RSDLPACK_RAW_CODE_BASE: u32 = 0x1_0000;
const _: () = assert!(RSDLPACK_RAW_CODE_BASE == rsdlpack::dtype::RAW_CODE_BASE);

/// The most dims a tensor has here (`rsdlpack::MAX_NDIM`): the length of `RsdlArrayPlan`'s
/// per-dimension arrays.
// Repeated here for include/rsdlpack.h: cbindgen emits only this crate's constants.
pub const RSDLPACK_MAX_NDIM: usize = 32;
const _: () = assert!(RSDLPACK_MAX_NDIM == rsdlpack::MAX_NDIM);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_fields_read_as_their_enums() {
        for copy in [RsdlCopy::IfNeeded, RsdlCopy::Never, RsdlCopy::Always] {
            assert_eq!(RsdlCopy::from_field(copy as i32), Some(copy));
        }
        assert_eq!(RsdlCopy::from_field(2), None);
        assert_eq!(RsdlCopy::from_field(-2), None);
        for order in [RsdlIndexOrder::Producer, RsdlIndexOrder::Reversed] {
            assert_eq!(RsdlIndexOrder::from_field(order as u32), Some(order));
        }
        assert_eq!(RsdlIndexOrder::from_field(2), None);
        for target in [RsdlTarget::HostArray, RsdlTarget::CudaArray] {
            assert_eq!(RsdlTarget::from_field(target as u32), Some(target));
        }
        assert_eq!(RsdlTarget::from_field(2), None);
        // C booleans: any value but the zero one.
        assert_eq!(RsdlAccess::from_field(0), RsdlAccess::Writable);
        assert_eq!(RsdlAccess::from_field(1), RsdlAccess::ReadOnly);
        assert_eq!(RsdlAccess::from_field(7), RsdlAccess::ReadOnly);
        assert_eq!(RsdlDense::from_field(0), RsdlDense::AnyLayout);
        assert_eq!(RsdlDense::from_field(9), RsdlDense::Required);
    }
}
