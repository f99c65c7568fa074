//! The one-crossing import of several tensors: what Julia's differentiable calls import their
//! outputs and input cotangents with, the tuple a forward or a pullback returned, in one call.

use super::border::{attach_for, entry_point, with_object_as};
use super::held::rsdlpack_imported_release;
use super::import_plan::{RsdlImportResult, RsdlPlanOptions, import_planned, plan_request};
use super::managed::RsdlImportOptions;
use super::values::{RSDLPACK_CALL_REFUSE_WITHOUT_GIL, RSDLPACK_PLAN_WRITABLE_TYPE};
use crate::error::{BridgeError, BridgeResult, refuse_null};
use crate::export::roots;
use crate::import::ImportRequest;
use crate::python::names;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use rsdlpack::layout::{ArrayRequest, Decision, decide};
use std::ffi::c_char;

const FUNCTION: &str = "rsdlpack_py_import_plans";

/// Imports each item of the tuple `objects` as `rsdlpack_py_import_plan_with_flags`
/// imports one, with the same options and `flags` (`RSDLPACK_CALL_REFUSE_WITHOUT_GIL`,
/// `RSDLPACK_PLAN_WRITABLE_TYPE`; other bits are refused), writing item `k`'s answer to
/// `out[k]`. An item that is `None` is skipped: `out[k].plan.tensor` is null, the rest of
/// `out[k]` means nothing. `objects` must hold exactly `count` items.
///
/// On error nothing is held: the tensors already imported are released (their deleters run
/// now), the message names the item (`item k of count: ...`) and its code is that item's.
///
/// # Safety
/// `objects` must be a live `PyObject*`; `plan_options` readable; `out` writable for `count`
/// results (null when `count` is 0); `error_out` null or writable; a stream handle in
/// `import_options` must be a live `CUstream` of every tensor's device until it is released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_py_import_plans(
    objects: *mut ffi::PyObject,
    import_options: *const RsdlImportOptions,
    plan_options: *const RsdlPlanOptions,
    flags: u32,
    out: *mut RsdlImportResult,
    count: usize,
    error_out: *mut *mut c_char,
) -> i32 {
    let body = || -> BridgeResult<()> {
        refuse_null!(FUNCTION, "objects and plan_options", objects, plan_options);
        if out.is_null() && count != 0 {
            return Err(BridgeError::NullArguments {
                function: FUNCTION,
                names: "out (with a count)",
            });
        }
        let attach = attach_for(
            FUNCTION,
            flags,
            RSDLPACK_CALL_REFUSE_WITHOUT_GIL | RSDLPACK_PLAN_WRITABLE_TYPE,
        )?;
        // SAFETY: `plan_options` is readable (checked non-null; this entry point's contract).
        let request = unsafe { plan_request(plan_options, flags) }?;
        // SAFETY: `import_options` is null or readable (this entry point's contract).
        let import_request = unsafe { RsdlImportOptions::read(import_options) }?;
        let call = Call {
            import_request,
            request,
            flags,
        };
        let results: &mut [RsdlImportResult] = if count == 0 {
            &mut []
        } else {
            // SAFETY: `out` is writable for `count` results (checked non-null; the contract).
            // Written field by field below, never read before.
            unsafe { std::slice::from_raw_parts_mut(out, count) }
        };
        // SAFETY: `objects` is a live object the caller lends us for the call.
        unsafe {
            with_object_as(attach, objects, |objects| {
                import_items(&call, objects, results)
            })
        }
    };
    // SAFETY: `error_out` is null or writable (this entry point's contract).
    unsafe { entry_point(error_out, body) }
}

/// What every item of a call is imported with.
struct Call {
    import_request: ImportRequest,
    request: ArrayRequest,
    flags: u32,
}

/// The items of `objects` (a tuple of `results.len()` items) imported into `results`; on an
/// item's error, the handles written before it released and the error named by the item.
fn import_items(
    call: &Call,
    objects: &Bound<'_, PyAny>,
    results: &mut [RsdlImportResult],
) -> BridgeResult<()> {
    let count = results.len();
    let items = objects
        .cast::<PyTuple>()
        .map_err(|_| BridgeError::BadValue {
            name: "rsdlpack_py_import_plans: objects",
            expected: "a tuple",
            got: names::of_object(objects),
        })?;
    if items.len() != count {
        return Err(BridgeError::BadValue {
            name: "rsdlpack_py_import_plans: objects",
            expected: "a tuple of `count` items",
            got: format!("{} items for a count of {count}", items.len()),
        });
    }
    for (k, item) in items.iter().enumerate() {
        let result = &mut results[k];
        if item.is_none() {
            result.plan.tensor = std::ptr::null_mut();
            continue;
        }
        let imported = import_planned(
            &item,
            &call.import_request,
            &call.request,
            call.flags,
            |descriptor, request| {
                Ok(decide(descriptor, request, &mut result.plan)? != Decision::Empty)
            },
        );
        match imported {
            Ok(handle) => result.plan.tensor = handle,
            Err(error) => {
                release_written(items, &results[..k]);
                return Err(BridgeError::Item {
                    index: k + 1,
                    count,
                    error: Box::new(error),
                });
            }
        }
    }
    let released_roots = roots::released_count() as u64;
    for (result, item) in results.iter_mut().zip(items.iter()) {
        if !item.is_none() {
            result.released_roots = released_roots;
        }
    }
    Ok(())
}

/// Releases the handles written for the items before a failed one (`None` items wrote none),
/// as `rsdlpack_imported_release` releases one.
fn release_written(items: &Bound<'_, PyTuple>, written: &[RsdlImportResult]) {
    for (result, item) in written.iter().zip(items.iter()) {
        if !item.is_none() {
            // SAFETY: written by `import_items` in this call (a handle, or null for an empty
            // plan) and handed to nobody yet: consumed here, once.
            unsafe { rsdlpack_imported_release(result.plan.tensor) };
        }
    }
}
