//! The C entry points: what Julia's `ccall` (and Python's ctypes) call, and the C ABI they
//! define (include/rsdlpack.h is generated from these modules by cbindgen).
//!
//! - [`import_plan`]: `rsdlpack_py_import_plan`, import + validate + plan in one call (Julia's
//!   `from_dlpack`), whose handles [`held`] copies and releases, now or later; [`import_plans`]:
//!   the same for each tensor of a tuple, in one call (a differentiable call's results);
//!   [`strided_plan`]: the same call answering with the strided plan (Julia's
//!   `from_dlpack(StridedView, t)`), with the same handles; [`tensor_device`]: where an
//!   object's tensor lives, asked before an import whose target depends on it (Julia's
//!   `pyconvert` rules), declining objects that are not tensors;
//! - [`share`]: a Julia array exported in one call (Julia's `share`), into an exporter or a
//!   consumer's type;
//! - [`managed`]: one `DLManagedTensorVersioned*` in or out (`rsdlpack_py_import`,
//!   `rsdlpack_py_export`); [`releases`]: releasing managed tensors; [`cuda`]: the driver's
//!   services (stream descriptions, ordering);
//! - [`values`] and [`sizes`]: the ABI's named values and struct numbers;
//! - [`border`]: what every entry point runs through (panics caught, errors turned into a
//!   return code and a message, the interpreter attached).
//!
//! The modules are declared in the order cbindgen writes their functions and constants into
//! the header: reordering them reorders the header.

pub mod values;

pub mod import_plan;

pub mod import_plans;

pub mod strided_plan;

pub mod tensor_device;

pub mod held;

pub mod share;

pub mod sizes;

pub mod managed;

pub mod cuda;

pub mod releases;

pub mod border;

pub use border::rsdlpack_error_free;
pub use cuda::{
    rsdlpack_cuda_describe_stream, rsdlpack_cuda_driver_available, rsdlpack_cuda_order_streams,
};
pub use held::{
    rsdlpack_imported_copy_into, rsdlpack_imported_release, rsdlpack_imported_release_after,
    rsdlpack_imported_release_after_kept, rsdlpack_imported_release_later,
};
pub use import_plan::{
    RsdlImportResult, RsdlPlanOptions, rsdlpack_py_import_plan, rsdlpack_py_import_plan_with_flags,
};
pub use managed::{
    RSDLPACK_IMPORT_ACCEPT_UNKNOWN_DEVICE_TYPES, RsdlImportOptions, rsdlpack_py_export,
    rsdlpack_py_export_with_stream, rsdlpack_py_import, rsdlpack_py_import_with_flags,
};
pub use releases::{
    rsdlpack_py_flush_releases, rsdlpack_py_flush_releases_with_flags,
    rsdlpack_py_pending_releases, rsdlpack_tensor_release,
};
pub use share::{
    RsdlArrayExport, RsdlShareResult, rsdlpack_py_share, rsdlpack_py_share_into,
    rsdlpack_py_share_into_with_flags, rsdlpack_py_share_with_flags,
    rsdlpack_py_take_released_roots,
};
pub use sizes::{RsdlStructId, rsdlpack_struct_size};
pub use strided_plan::{RsdlStridedPlan, rsdlpack_py_import_strided_plan};
pub use tensor_device::rsdlpack_py_tensor_device;
pub use values::{
    RSDLPACK_CALL_DECLINE_REFUSALS, RSDLPACK_CALL_REFUSE_WITHOUT_GIL, RSDLPACK_MAX_NDIM,
    RSDLPACK_PLAN_ANY, RSDLPACK_PLAN_WRITABLE_TYPE, RSDLPACK_RAW_CODE_BASE,
    RSDLPACK_SHARE_EXPORTER_FOR_NON_TYPES, RSDLPACK_SHARE_STREAM_KEPT, RsdlAccess, RsdlCopy,
    RsdlDense, RsdlIndexOrder, RsdlTarget,
};
