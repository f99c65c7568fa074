//! The DLPack 1.3 C exchange API, consumer side: a producer type's `__dlpack_c_exchange_api__`
//! (a PyCapsule named "dlpack_exchange_api" over a static `DLPackExchangeAPI`), found once per
//! type and called instead of the Python protocol.
//!
//! Why: `torch_tensor.__dlpack__()` runs Python code, where torch's
//! `managed_tensor_from_py_object_no_sync` is one C call (BENCHMARKS.md has the figures). The
//! table is what dlpark 0.10 calls `ffi::DLPackExchangeAPI` (56 bytes: a 16-byte header, five function
//! pointers), laid out as in dlpack.h 1.3.
//!
//! Decisions:
//! - The attribute is looked up on the *type* (the specification's rule) and the answer is
//!   cached per type ([`super::type_info`]): a handful of slots, each holding a strong reference to its
//!   type, so a cached type is never freed and its address never names another type. Types
//!   without the attribute (NumPy's) are cached too, so their imports pay one locked scan of a
//!   few pointers. A class attribute reassigned after a type's first import is not seen (the
//!   specification allows caching per type).
//! - `None` as the attribute disables an inherited API (a subclass can opt out); any other value
//!   that is not a capsule named "dlpack_exchange_api" is an error naming the type.
//! - A table whose major version is not ours is walked down `prev_api` to a major-1 table; if
//!   there is none the type is imported through `__dlpack__`. So is a table without
//!   `managed_tensor_from_py_object_no_sync`.
//! - The table must live as long as the process (the specification), so it is kept as
//!   `&'static` and its functions are called with the GIL held.
//! - Producer errors (a nonzero return with a Python exception set) become
//!   [`BridgeError::Producer`] with the producer's message; a nonzero return without an
//!   exception, or success with a null tensor, is reported as such.

use crate::error::{BridgeError, BridgeResult};
use crate::python::names;
use pyo3::exceptions::PyAttributeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;
use rsdlpack::dlpark::Managed;
use rsdlpack::dlpark::ffi::{DLManagedTensorVersioned, DLPackExchangeAPI, DLPackExchangeAPIHeader};
use rsdlpack::{Device, ManagedTensor};
use std::cell::Cell;
use std::ffi::{CStr, c_int, c_void};

/// The capsule name the specification gives the table.
pub const CAPSULE_NAME: &CStr = c"dlpack_exchange_api";

/// The major version of the tables this library understands.
const MAJOR: u32 = 1;

/// How many `prev_api` links are followed before a chain is taken to be broken.
const MAX_CHAIN: usize = 16;

/// A producer's exchange-API table (major version 1, with a tensor export function).
#[derive(Clone, Copy)]
pub struct ExchangeApi {
    table: &'static DLPackExchangeAPI,
}

// SAFETY: the table is a static of its producer, immutable for the life of the process (the
// specification's contract); sharing the reference across threads only shares function
// pointers, which are called with the GIL held.
unsafe impl Send for ExchangeApi {}
// SAFETY: as above.
unsafe impl Sync for ExchangeApi {}

thread_local! {
    /// How many tensors this thread imported through an exchange-API table. Per thread, so
    /// that tests running in parallel each see only their own imports.
    static IMPORTS: Cell<usize> = const { Cell::new(0) };
}

/// How many imports the calling thread has made through a producer's C exchange API (a test
/// hook: it tells which path an import took).
pub fn imports_through_c_api() -> usize {
    IMPORTS.with(Cell::get)
}

impl ExchangeApi {
    /// The table's version as its header states it.
    pub fn version(&self) -> (u32, u32) {
        let v = self.table.header.version;
        (v.major, v.minor)
    }

    /// Finds the table of `ty`, if it has a usable one.
    pub(crate) fn of_type(ty: &Bound<'_, PyType>) -> BridgeResult<Option<Self>> {
        let py = ty.py();
        let attribute = match ty.getattr(pyo3::intern!(py, "__dlpack_c_exchange_api__")) {
            Ok(attribute) => attribute,
            Err(err) if err.is_instance_of::<PyAttributeError>(py) => return Ok(None),
            Err(err) => {
                return Err(BridgeError::producer(
                    format!("{}.__dlpack_c_exchange_api__", names::short(ty)),
                    err,
                ));
            }
        };
        if attribute.is_none() {
            return Ok(None);
        }
        // SAFETY: `attribute` is a live object; IsValid never raises and answers false for
        // non-capsules, other names and capsules holding null.
        let valid = unsafe { ffi::PyCapsule_IsValid(attribute.as_ptr(), CAPSULE_NAME.as_ptr()) };
        if valid != 1 {
            return Err(BridgeError::BadExchangeApi {
                type_name: names::short(ty),
                value: attribute
                    .repr()
                    .map(|r| r.to_string())
                    .unwrap_or_else(|_| "?".into()),
            });
        }
        // SAFETY: valid under CAPSULE_NAME (checked above), so GetPointer returns its non-null
        // pointer without raising.
        let header: *const DLPackExchangeAPIHeader =
            unsafe { ffi::PyCapsule_GetPointer(attribute.as_ptr(), CAPSULE_NAME.as_ptr()) }.cast();
        // SAFETY: a "dlpack_exchange_api" capsule points at a DLPackExchangeAPI, which begins
        // with its header, and lives for the whole process (the specification's contract), as
        // do the older tables its `prev_api` chain names.
        let Some(table) = (unsafe { major_one(header) }) else {
            return Ok(None);
        };
        Ok(table
            .managed_tensor_from_py_object_no_sync
            .is_some()
            .then_some(Self { table }))
    }

    /// Calls `managed_tensor_from_py_object_no_sync(object)`: an owned versioned tensor over the
    /// producer's memory, with no stream ordering (the caller orders streams; see
    /// [`Self::current_work_stream`]). `object` must be of the type the table came from.
    pub fn managed_tensor_from_py_object(
        &self,
        object: &Bound<'_, PyAny>,
    ) -> BridgeResult<ManagedTensor> {
        let py = object.py();
        let export = self
            .table
            .managed_tensor_from_py_object_no_sync
            .expect("checked when the table was found");
        let mut out: *mut DLManagedTensorVersioned = std::ptr::null_mut();
        // SAFETY: the GIL is held (`py`); `object` is a live object of the type the table was
        // found on (the caller's contract); `out` is a valid out-pointer.
        let status = unsafe { export(object.as_ptr().cast(), &mut out) };
        let what = || {
            function_of(
                names::of_object(object),
                "managed_tensor_from_py_object_no_sync",
            )
        };
        if status != 0 {
            return Err(failed(PyErr::take(py), what(), status, "without setting"));
        }
        if out.is_null() {
            PyErr::take(py);
            return Err(BridgeError::Producer {
                what: what(),
                message: "nothing: it reported success but returned no tensor".into(),
            });
        }
        // SAFETY: on success the producer hands us an owned DLManagedTensorVersioned.
        let tensor = unsafe { ManagedTensor::from_versioned_raw(out) };
        // Taken whatever the tensor is: an exception must not outlive this call, also when
        // the tensor is refused (a foreign major version).
        if let Some(err) = PyErr::take(py) {
            // A producer that reports success must not leave an exception behind.
            drop(tensor);
            return Err(raised_on_success(what(), err));
        }
        let tensor = tensor?;
        IMPORTS.with(|n| n.set(n.get() + 1));
        Ok(tensor)
    }

    /// Whether the table can make its type's objects from a managed tensor.
    pub fn makes_objects(&self) -> bool {
        self.table.managed_tensor_to_py_object_no_sync.is_some()
    }

    /// Calls `managed_tensor_to_py_object_no_sync(tensor)`: a new object of the table's type
    /// over `tensor`, which it now owns; no stream ordering (the caller orders streams).
    ///
    /// On failure a table may or may not have run the deleter already (torch runs it when the
    /// failure comes after it wrapped the memory): `deleter_ran` tells, and the tensor is
    /// released here when it did not. `type_name` names the type in messages.
    pub fn managed_tensor_to_py_object<'py>(
        &self,
        py: Python<'py>,
        type_name: impl FnOnce() -> String,
        tensor: Managed<DLManagedTensorVersioned>,
        deleter_ran: impl FnOnce() -> bool,
    ) -> BridgeResult<Bound<'py, PyAny>> {
        const FUNCTION: &str = "managed_tensor_to_py_object_no_sync";
        let Some(make) = self.table.managed_tensor_to_py_object_no_sync else {
            return Err(BridgeError::MissingTableFunction {
                type_name: type_name(),
                function: FUNCTION,
            });
        };
        let raw = tensor.into_raw();
        let mut out: *mut c_void = std::ptr::null_mut();
        // SAFETY: the GIL is held (`py`); `raw` is an owned versioned tensor whose ownership
        // the function takes on success; `out` is a valid out-pointer.
        let status = unsafe { make(raw, &mut out) };
        let raised = PyErr::take(py);
        let what = || function_of(type_name(), FUNCTION);
        if status == 0 && !out.is_null() {
            // SAFETY: on success the function hands out a new reference.
            let object = unsafe { Bound::from_owned_ptr(py, out.cast()) };
            return match raised {
                None => Ok(object),
                // A table that reports success must not leave an exception behind; the object
                // (and with it the tensor) is released by the drop.
                Some(err) => Err(raised_on_success(what(), err)),
            };
        }
        if !deleter_ran() {
            // SAFETY: the table did not take the tensor (its deleter has not run): it is ours
            // again, and released once here.
            drop(unsafe { Managed::from_raw(raw) });
        }
        Err(failed(raised, what(), status, "and no object, without"))
    }

    /// The producer's current work stream on `device`, as the driver names it (a `CUstream`; the
    /// legacy default stream, NULL in the runtime API, is 1), or `None` when the table has no
    /// `current_work_stream`.
    pub fn current_work_stream(
        &self,
        py: Python<'_>,
        type_name: impl FnOnce() -> String,
        device: Device,
    ) -> BridgeResult<Option<usize>> {
        let Some(query) = self.table.current_work_stream else {
            return Ok(None);
        };
        let dl = device.to_dlpack();
        let mut stream: *mut c_void = std::ptr::null_mut();
        // SAFETY: the GIL is held (`py`); `stream` is a valid out-pointer.
        let status = unsafe { query(dl.device_type, dl.device_id, &mut stream) };
        if status != 0 {
            let what = function_of(type_name(), "current_work_stream");
            return Err(failed(PyErr::take(py), what, status, "without setting"));
        }
        Ok(Some(if stream.is_null() { 1 } else { stream as usize }))
    }
}

/// How messages name one of a type's table functions.
fn function_of(type_name: String, function: &str) -> String {
    format!("{type_name}.__dlpack_c_exchange_api__ {function}")
}

/// A table function's failure: the exception it raised, or its status when it raised none
/// (`without` says what else it did, before "a Python exception").
fn failed(raised: Option<PyErr>, what: String, status: c_int, without: &str) -> BridgeError {
    match raised {
        Some(err) => BridgeError::producer(what, err),
        None => BridgeError::Producer {
            what,
            message: format!("error code {status} {without} a Python exception"),
        },
    }
}

/// An exception left behind by a table function that reported success.
fn raised_on_success(what: String, err: PyErr) -> BridgeError {
    BridgeError::producer(format!("{what} (while reporting success)"), err)
}

/// Follows `header` and its `prev_api` chain to the first table of major version 1.
///
/// # Safety
/// `header` must point to a live `DLPackExchangeAPI` whose chain of `prev_api` tables is live
/// for the rest of the process.
unsafe fn major_one(
    mut header: *const DLPackExchangeAPIHeader,
) -> Option<&'static DLPackExchangeAPI> {
    for _ in 0..MAX_CHAIN {
        // SAFETY: null or a live header (this function's contract).
        let current = unsafe { header.as_ref() }?;
        if current.version.major == MAJOR {
            // SAFETY: a header of major version 1 begins a whole DLPackExchangeAPI table,
            // which lives for the process (contract).
            return Some(unsafe { &*header.cast::<DLPackExchangeAPI>() });
        }
        if current.version.major < MAJOR {
            return None;
        }
        header = current.prev_api;
    }
    None
}
