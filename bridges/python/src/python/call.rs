//! Calling Python methods the cheap way: interned names and vectorcall with keyword names.
//!
//! pyo3's `call_method` with kwargs builds a dict per call (and, in abi3 mode, a tuple) that
//! `PyObject_Call` unpacks again; `hasattr` followed by a call looks the attribute up twice.
//! `PyObject_VectorcallMethod` takes the receiver, the arguments and a tuple of keyword names
//! in one array, finds the method once without creating a bound method, and the keyword-name
//! tuples are built once per process. The function is public C API since CPython 3.9 (limited
//! API since 3.12), so with abi3-py310 pyo3 does not declare it: we do, and it resolves from
//! the host process like every other Python symbol.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

unsafe extern "C" {
    fn PyObject_VectorcallMethod(
        name: *mut ffi::PyObject,
        args: *const *mut ffi::PyObject,
        nargsf: usize,
        kwnames: *mut ffi::PyObject,
    ) -> *mut ffi::PyObject;
}

/// `receiver.name(*positional, **dict(zip(kwnames, keyword)))`. `kwnames` must hold exactly
/// `keyword.len()` strings (a tuple from [`keyword_names`]).
pub fn call_method<'py>(
    receiver: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
    positional: &[&Bound<'py, PyAny>],
    keyword: &[&Bound<'py, PyAny>],
    kwnames: Option<&Bound<'py, PyTuple>>,
) -> PyResult<Bound<'py, PyAny>> {
    const MAX_ARGS: usize = 8;
    let count = 1 + positional.len() + keyword.len();
    assert!(count <= MAX_ARGS, "at most {MAX_ARGS} arguments");
    assert_eq!(
        // `Py_SIZE`, inline: in abi3 mode `len()` is a call into Python.
        // SAFETY: a live tuple (borrowed), whose object header Python lays out as a PyVarObject.
        kwnames.map_or(0, |n| unsafe { ffi::Py_SIZE(n.as_ptr()) } as usize),
        keyword.len(),
        "one keyword name per keyword value"
    );
    let mut args = [std::ptr::null_mut(); MAX_ARGS];
    args[0] = receiver.as_ptr();
    for (slot, value) in args[1..].iter_mut().zip(positional.iter().chain(keyword)) {
        *slot = value.as_ptr();
    }
    let kwnames = kwnames.map_or(std::ptr::null_mut(), |n| n.as_ptr());
    let py = receiver.py();
    // SAFETY: the GIL is held (`py`); `args` holds `count` borrowed references that outlive
    // the call, the receiver first, then the positional values, then one value per name in
    // `kwnames` (checked above); `nargsf` counts the receiver and the positional values.
    let result = unsafe {
        PyObject_VectorcallMethod(name.as_ptr(), args.as_ptr(), 1 + positional.len(), kwnames)
    };
    // SAFETY: a new reference, or null with an exception set.
    unsafe { Bound::from_owned_ptr_or_err(py, result) }
}

/// The keyword-name tuple for `names`, built once per call site (see [`keyword_names!`]).
#[macro_export]
macro_rules! keyword_names {
    ($py:expr, $($name:literal),+) => {{
        static NAMES: pyo3::sync::PyOnceLock<pyo3::Py<pyo3::types::PyTuple>> =
            pyo3::sync::PyOnceLock::new();
        NAMES
            .get_or_init($py, || {
                pyo3::types::PyTuple::new($py, [$(pyo3::intern!($py, $name)),+])
                    .expect("a tuple of strings")
                    .unbind()
            })
            .bind($py)
    }};
}
