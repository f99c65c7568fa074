//! Where every C entry point meets its caller.
//!
//! An entry point that reports errors runs its body through [`entry_point`]: panics are
//! caught and every error becomes a return code ([`ErrorCode`], 0 on success) plus a message
//! the caller frees with `rsdlpack_error_free`. One that cannot report (a release, a count)
//! runs through [`quietly`], which answers a fallback on a panic. Either attaches to the
//! interpreter through [`with_python`] (taking the GIL if the caller released it), refuses an
//! interpreter the bridge cannot serve ([`crate::python::interpreter`]), and first drains the
//! queue of deferred releases (see [`crate::python::release`]).
//!
//! Whether a call may wait for the GIL is the caller's choice ([`Attach`], from the `flags` of
//! the `*_with_flags` entry points): a C caller that released the GIL on purpose (ctypes'
//! `CDLL`) wants it taken; Julia, whose Python thread holds the GIL for good and may be
//! waiting for the very task that calls, wants a refusal instead of a deadlock.

use super::values::RSDLPACK_CALL_REFUSE_WITHOUT_GIL;
use crate::error::{BridgeError, BridgeResult};
use crate::python::interpreter::ThisThread;
use crate::python::release;
use pyo3::{Bound, PyAny, Python, ffi};
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, UnwindSafe, catch_unwind};

/// Where an entry point writes its error message: a `char**` the caller lent, or nowhere.
#[derive(Clone, Copy)]
struct ErrorOut(*mut *mut c_char);

impl ErrorOut {
    fn write(self, message: String) {
        if self.0.is_null() {
            return;
        }
        let message = CString::new(message.replace('\0', " ")).expect("NULs were replaced");
        // SAFETY: non-null, and writable by the contract of `entry_point`.
        unsafe { *self.0 = message.into_raw() };
    }
}

/// Runs an entry point's `body`, catching panics; returns 0 or an [`ErrorCode`], with its
/// message written to `error_out`.
///
/// # Safety
/// `error_out` must be null or writable for the rest of the entry point's call.
pub(crate) unsafe fn entry_point(
    error_out: *mut *mut c_char,
    body: impl FnOnce() -> BridgeResult<()>,
) -> i32 {
    let error_out = ErrorOut(error_out);
    let error = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return 0,
        Ok(Err(error)) => error,
        Err(panic) => BridgeError::panic("", &*panic),
    };
    error_out.write(error.to_string());
    error.code() as i32
}

/// Runs an entry point that has no way to report an error; a panic answers `fallback`.
pub(crate) fn quietly<T>(fallback: T, body: impl FnOnce() -> T + UnwindSafe) -> T {
    catch_unwind(body).unwrap_or(fallback)
}

/// What an entry point does when the calling thread does not hold the GIL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attach {
    /// Take it, waiting for whichever thread holds it (the entry points without flags).
    Wait,
    /// Refuse ([`BridgeError::GilNotHeld`], naming `function`): `RSDLPACK_CALL_REFUSE_WITHOUT_GIL`.
    OnlyIfHeld { function: &'static str },
}

/// The [`Attach`] a `*_with_flags` entry point's `flags` ask for; bits outside `allowed` are
/// refused.
pub(crate) fn attach_for(function: &'static str, flags: u32, allowed: u32) -> BridgeResult<Attach> {
    let unknown = flags & !allowed;
    if unknown != 0 {
        return Err(BridgeError::UnknownFlags {
            function,
            bits: unknown,
        });
    }
    Ok(if flags & RSDLPACK_CALL_REFUSE_WITHOUT_GIL != 0 {
        Attach::OnlyIfHeld { function }
    } else {
        Attach::Wait
    })
}

/// Runs `body` attached to the interpreter, after draining the releases that waited for it.
pub(crate) fn with_python<T>(
    body: impl for<'py> FnOnce(Python<'py>) -> BridgeResult<T>,
) -> BridgeResult<T> {
    with_python_as(Attach::Wait, body)
}

/// [`with_python`], refusing as `attach` says when this thread does not hold the GIL.
pub(crate) fn with_python_as<T>(
    attach: Attach,
    body: impl for<'py> FnOnce(Python<'py>) -> BridgeResult<T>,
) -> BridgeResult<T> {
    attached(attach, |py| {
        release::drain(py, release::Wait::No);
        body(py)
    })
}

/// Runs `body` attached to the interpreter (as `attach` says), draining nothing first.
pub(crate) fn attached<T>(
    attach: Attach,
    body: impl for<'py> FnOnce(Python<'py>) -> BridgeResult<T>,
) -> BridgeResult<T> {
    let this_thread = crate::python::interpreter::this_thread();
    if let ThisThread::Attached(current) = this_thread {
        // The common case (Julia's PyCall and PythonCall call with the GIL held): no
        // `PyGILState_Ensure`/`Release` pair and no pyo3 bookkeeping on each call from C
        // (BENCHMARKS.md). pyo3 does not count this thread as attached, so a `Py` dropped
        // here would be decref'd only at pyo3's next attach: see `crate::python::attach` for
        // how none is left.
        // SAFETY: this thread is attached to `current` through its own thread state, so it
        // holds that interpreter's GIL (`crate::python::interpreter::this_thread`).
        let py = unsafe { Python::assume_attached() };
        // Before anything that could attach through pyo3: in a sub-interpreter, pyo3's attach
        // (`PyGILState_Ensure`) would wait for the GIL this thread holds.
        crate::python::interpreter::admit(py, current)?;
        let result = body(py);
        if result.is_err() {
            // Error paths drop exceptions (and their tracebacks) wherever they arise.
            crate::python::attach::drain_deferred();
        }
        return result;
    }
    // Taking the GIL is safe only for a detached thread (see `ThisThread`).
    if let Some(refusal) = this_thread.refusal() {
        return Err(refusal);
    }
    if let Attach::OnlyIfHeld { function } = attach {
        // SAFETY: `Py_IsInitialized` may be called at any time, from any thread.
        let running = unsafe { ffi::Py_IsInitialized() } != 0;
        return Err(if running {
            BridgeError::GilNotHeld { function }
        } else {
            BridgeError::InterpreterNotRunning
        });
    }
    Python::try_attach(|py| {
        crate::python::interpreter::admit_this_thread(py)?;
        body(py)
    })
    .unwrap_or_else(|| Err(BridgeError::InterpreterNotRunning))
}

/// [`with_python_as`], with `object` a `PyObject*` that the caller lends for the call.
///
/// # Safety
/// `object` must be a live object for the call.
pub(crate) unsafe fn with_object_as<T>(
    attach: Attach,
    object: *mut ffi::PyObject,
    body: impl for<'py> FnOnce(&Bound<'py, PyAny>) -> BridgeResult<T>,
) -> BridgeResult<T> {
    with_python_as(attach, |py| {
        // SAFETY: a live object the caller lends us for the call (this function's contract).
        let object = unsafe { Bound::from_borrowed_ptr(py, object) };
        body(&object)
    })
}

/// Frees a message written by an entry point. Null is ignored.
///
/// # Safety
/// `message` must be null or a message from this library, not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_error_free(message: *mut c_char) {
    if !message.is_null() {
        // SAFETY: it came from `CString::into_raw` in `ErrorOut::write`.
        drop(unsafe { CString::from_raw(message) });
    }
}
