//! The one-crossing import behind Julia's `from_dlpack`: one call imports, validates once
//! and plans, and answers with everything the caller needs in one struct. A view or a copy
//! comes with a handle to the imported tensor, released by the functions of [`super::held`].
//! [`import_then`] is that call less the plan, which [`super::strided_plan`] shares.

use super::border::{attach_for, entry_point, with_object_as};
use super::held::Held;
use super::managed::RsdlImportOptions;
use super::values::{
    RSDLPACK_CALL_DECLINE_REFUSALS, RSDLPACK_CALL_REFUSE_WITHOUT_GIL, RSDLPACK_PLAN_ANY,
    RSDLPACK_PLAN_WRITABLE_TYPE, RsdlAccess, RsdlCopy, RsdlDense, RsdlIndexOrder, RsdlTarget,
};
use crate::error::refuse_null;
use crate::error::{BridgeError, BridgeResult};
use crate::export::roots;
use crate::import::{ImportRequest, import};
use crate::python::names;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;
use rsdlpack::layout::{
    Access, ArrayPlan, ArrayRequest, CopyPolicy, Decision, IndexOrder, Target, decide,
};
use rsdlpack::{ElementType, TensorDescriptor};
use std::ffi::{c_char, c_void};

/// What the caller wants the tensor to become (see `rsdlpack::layout::ArrayRequest`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RsdlPlanOptions {
    /// `RSDLPACK_PLAN_ANY` (-1): any element type; else the `ElementType::code` the caller names.
    pub element_code: i64,
    /// `RSDLPACK_PLAN_ANY` (-1): any rank; else the rank the caller names.
    pub ndims: i64,
    /// An `RsdlTarget`: 0 a host array, 1 a CUDA array.
    pub target: u32,
    /// An `RsdlIndexOrder`: 0 the producer's index order, 1 reversed.
    pub order: u32,
    /// An `RsdlCopy`: -1 copy when needed (`copy=nothing`), 0 never, 1 always.
    pub copy: i32,
    /// An `RsdlAccess`: 1 a view of read-only memory is acceptable (the caller wraps it
    /// read-only).
    pub readonly: u32,
    /// An `RsdlDense`: 1 only a plain dense array will do (the typed forms); other layouts are
    /// copied.
    pub dense: u32,
    pub reserved: u32,
}

impl RsdlPlanOptions {
    /// Any element type and rank, as a host array in the producer's order, copied only when
    /// needed, read-only memory refused, any layout: what Julia's untyped `from_dlpack(Array, t)`
    /// asks for. (A function, not an associated const: cbindgen would write that into the
    /// header.)
    pub const fn any() -> Self {
        Self {
            element_code: RSDLPACK_PLAN_ANY,
            ndims: RSDLPACK_PLAN_ANY,
            target: RsdlTarget::HostArray as u32,
            order: RsdlIndexOrder::Producer as u32,
            copy: RsdlCopy::IfNeeded as i32,
            readonly: RsdlAccess::Writable as u32,
            dense: RsdlDense::AnyLayout as u32,
            reserved: 0,
        }
    }

    // Inlined, as `RsdlImportOptions::read`: its `Result` would come back through memory.
    #[inline]
    fn parse(&self) -> BridgeResult<ArrayRequest> {
        let bad = |what: &'static str, value: i64| BridgeError::PlanOption { what, value };
        let target = match RsdlTarget::from_field(self.target) {
            Some(RsdlTarget::HostArray) => Target::HostArray,
            Some(RsdlTarget::CudaArray) => Target::CudaArray,
            None => return Err(bad("target (0 host, 1 CUDA)", self.target.into())),
        };
        let order = index_order(self.order)?;
        let policy = match RsdlCopy::from_field(self.copy) {
            Some(RsdlCopy::IfNeeded) => CopyPolicy::IfNeeded,
            Some(RsdlCopy::Never) => CopyPolicy::Never,
            Some(RsdlCopy::Always) => CopyPolicy::Always,
            None => return Err(bad("copy (-1, 0 or 1)", self.copy.into())),
        };
        let element = match self.element_code {
            RSDLPACK_PLAN_ANY => None,
            code => Some(
                u32::try_from(code)
                    .ok()
                    .and_then(ElementType::from_code)
                    .ok_or_else(|| bad("element_code", code))?,
            ),
        };
        let ndim = match self.ndims {
            RSDLPACK_PLAN_ANY => None,
            n => Some(usize::try_from(n).map_err(|_| bad("ndims", n))?),
        };
        Ok(ArrayRequest {
            target,
            order,
            policy,
            access: match RsdlAccess::from_field(self.readonly) {
                RsdlAccess::ReadOnly => Access::ReadOnly,
                RsdlAccess::Writable => Access::Writable,
            },
            dense: RsdlDense::from_field(self.dense) == RsdlDense::Required,
            element,
            ndim,
        })
    }
}

/// The index order a C caller names (an `RsdlIndexOrder`).
pub(crate) fn index_order(code: u32) -> BridgeResult<IndexOrder> {
    match RsdlIndexOrder::from_field(code) {
        Some(RsdlIndexOrder::Producer) => Ok(IndexOrder::Producer),
        Some(RsdlIndexOrder::Reversed) => Ok(IndexOrder::Reversed),
        None => Err(BridgeError::BadValue {
            name: "order",
            expected: "0 (producer) or 1 (reversed)",
            got: code.to_string(),
        }),
    }
}

/// The answer of [`rsdlpack_py_import_plan`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RsdlImportResult {
    pub plan: ArrayPlan,
    /// How many Julia arrays that `share` exported were released since the caller last took
    /// them (`rsdlpack_py_take_released_roots`); 0 means there is nothing to take.
    pub released_roots: u64,
}

/// Imports `object` (anything with `__dlpack__`, or a capsule), validates it once and plans the
/// array `plan_options` describes, all in one call, and writes the whole answer to `*out`.
///
/// When `out->plan.kind` is 0 (a view) or 2 (a copy), `out->plan.tensor` is an owned handle
/// for the release functions of this module; for 1 (empty) it is null and nothing is held. On
/// error nothing is held either (the producer's deleter has run) and `*out` means nothing.
/// `import_options` may be null (no stream, device or copy request to the producer). A CUDA
/// tensor remembers the stream `import_options` names (the legacy default stream when none; no
/// stream for -1): its release waits for the work enqueued there.
///
/// # Safety
/// `object` must be a live `PyObject*`; `plan_options` readable; `out` writable; `error_out`
/// null or writable; a stream handle in `import_options` must be a live `CUstream` of the
/// tensor's device until the tensor is released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_py_import_plan(
    object: *mut ffi::PyObject,
    import_options: *const RsdlImportOptions,
    plan_options: *const RsdlPlanOptions,
    out: *mut RsdlImportResult,
    error_out: *mut *mut c_char,
) -> i32 {
    // SAFETY: forwarded contract; no flags.
    unsafe {
        rsdlpack_py_import_plan_with_flags(object, import_options, plan_options, 0, out, error_out)
    }
}

/// As `rsdlpack_py_import_plan`, with `flags` (a bitwise or of `RSDLPACK_CALL_REFUSE_WITHOUT_GIL`,
/// `RSDLPACK_PLAN_WRITABLE_TYPE` and `RSDLPACK_CALL_DECLINE_REFUSALS`; other bits are refused
/// with `RSDL_ERROR_CODE_INVALID`).
/// A separate entry point, so that `RsdlPlanOptions` keeps its layout for existing callers.
///
/// # Safety
/// As `rsdlpack_py_import_plan`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_py_import_plan_with_flags(
    object: *mut ffi::PyObject,
    import_options: *const RsdlImportOptions,
    plan_options: *const RsdlPlanOptions,
    flags: u32,
    out: *mut RsdlImportResult,
    error_out: *mut *mut c_char,
) -> i32 {
    let body = || -> BridgeResult<()> {
        refuse_null!(
            "rsdlpack_py_import_plan",
            "object, plan_options and out",
            object,
            plan_options,
            out,
        );
        // SAFETY: `out` is writable (checked non-null; caller's contract). The plan is written
        // in place: the struct is 1.6 KB.
        let out = unsafe { &mut *out };
        // SAFETY: forwarded from this entry point's contract; both pointers checked non-null.
        let handle = unsafe {
            import_then(
                "rsdlpack_py_import_plan_with_flags",
                object,
                import_options,
                plan_options,
                flags,
                |descriptor, request| {
                    let decision = decide(descriptor, request, &mut out.plan)?;
                    Ok(decision != Decision::Empty)
                },
            )
        }?;
        out.plan.tensor = handle;
        out.released_roots = roots::released_count() as u64;
        Ok(())
    };
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    unsafe { entry_point(error_out, body) }
}

/// The import both one-crossing entry points make, less the plan: `flags` checked
/// (`RSDLPACK_CALL_REFUSE_WITHOUT_GIL`, `RSDLPACK_PLAN_WRITABLE_TYPE`, which sets
/// [`Access::WritableType`], and `RSDLPACK_CALL_DECLINE_REFUSALS`; other bits refused, naming
/// `function`), the options read, `object` imported (under the GIL, as `flags` allow) and
/// `plan` run on the tensor with the request ([`import_planned`]).
///
/// # Safety
/// `object` must be a live `PyObject*`; `plan_options` readable (non-null); `import_options`
/// null or readable, its stream handle (if any) a live `CUstream` of the tensor's device until
/// the tensor is released.
#[inline]
pub(super) unsafe fn import_then(
    function: &'static str,
    object: *mut ffi::PyObject,
    import_options: *const RsdlImportOptions,
    plan_options: *const RsdlPlanOptions,
    flags: u32,
    plan: impl FnOnce(&TensorDescriptor, &ArrayRequest) -> BridgeResult<bool>,
) -> BridgeResult<*mut c_void> {
    let attach = attach_for(
        function,
        flags,
        RSDLPACK_CALL_REFUSE_WITHOUT_GIL
            | RSDLPACK_PLAN_WRITABLE_TYPE
            | RSDLPACK_CALL_DECLINE_REFUSALS,
    )?;
    // SAFETY: `plan_options` is readable (this function's contract).
    let request = unsafe { plan_request(plan_options, flags) }?;
    // SAFETY: `import_options` is null or readable (this function's contract).
    let import_request = unsafe { RsdlImportOptions::read(import_options) }?;
    // SAFETY: `object` is a live object the caller lends us for the call.
    unsafe {
        with_object_as(attach, object, |object| {
            import_planned(object, &import_request, &request, flags, plan)
        })
    }
}

/// The plan request of `plan_options`, `RSDLPACK_PLAN_WRITABLE_TYPE` in `flags` making it
/// [`Access::WritableType`].
///
/// # Safety
/// `plan_options` must be readable.
#[inline]
pub(super) unsafe fn plan_request(
    plan_options: *const RsdlPlanOptions,
    flags: u32,
) -> BridgeResult<ArrayRequest> {
    // SAFETY: readable (this function's contract).
    let mut request = unsafe { *plan_options }.parse()?;
    if flags & RSDLPACK_PLAN_WRITABLE_TYPE != 0 {
        request.access = Access::WritableType;
    }
    Ok(request)
}

/// `object` (the GIL held) imported as `import_request` asks and `plan` run on the tensor with
/// `request`. When `plan` answers `true` the caller holds the tensor: its handle for the
/// functions of [`super::held`] comes back. Otherwise, and on every error, the tensor is dropped
/// here (its deleter runs now) and the answer is null or the error ([`refusal`]'s, as `flags`
/// ask). A stream handle in `import_request` must be a live `CUstream` of the tensor's device
/// until its release (the import entry points' contract).
#[inline]
pub(super) fn import_planned(
    object: &Bound<'_, PyAny>,
    import_request: &ImportRequest,
    request: &ArrayRequest,
    flags: u32,
    plan: impl FnOnce(&TensorDescriptor, &ArrayRequest) -> BridgeResult<bool>,
) -> BridgeResult<*mut c_void> {
    let tensor = import(object, import_request).map_err(|e| refusal(object, flags, e))?;
    // On error or `false`, `tensor` drops here, under the GIL: its deleter runs now.
    if !plan(tensor.descriptor(), request).map_err(|e| refusal(object, flags, e))? {
        return Ok(std::ptr::null_mut());
    }
    let held = Held {
        tensor,
        order: request.order,
    };
    Ok(held.into_handle())
}

/// What an import of `object` that failed with `error` reports, decided on the error path
/// only: for a Python type object (`torch.Tensor` itself, whose `__dlpack__` is an unbound
/// method), that it is a class, whatever the call raised; then, when `flags` carry
/// `RSDLPACK_CALL_DECLINE_REFUSALS`, a [`BridgeError::declinable`] error as
/// [`BridgeError::Declined`].
#[cold]
pub(super) fn refusal(object: &Bound<'_, PyAny>, flags: u32, error: BridgeError) -> BridgeError {
    let error = match object.cast::<PyType>() {
        Ok(ty) => BridgeError::TypeObject {
            type_name: names::with_module(ty, false),
        },
        Err(_) => error,
    };
    if flags & RSDLPACK_CALL_DECLINE_REFUSALS != 0 && error.declinable() {
        BridgeError::Declined(Box::new(error))
    } else {
        error
    }
}
