//! The DLPack 1.3 C exchange API, consumer side: a producer type's `__dlpack_c_exchange_api__`
//! (a PyCapsule named "dlpack_exchange_api" over a static `DLPackExchangeAPI`), found once per
//! type and called instead of the Python protocol.
//!
//! Why: `torch_tensor.__dlpack__()` runs Python code (~2.8 µs); torch's
//! `managed_tensor_from_py_object_no_sync` plus its deleter take ~90 ns. The table is what
//! dlpark 0.10 calls `ffi::DLPackExchangeAPI` (56 bytes: a 16-byte header, five function
//! pointers), laid out as in dlpack.h 1.3.
//!
//! Decisions:
//! - The attribute is looked up on the *type* (the specification's rule) and the answer is
//!   cached per type in [`TypeCache`]: a handful of slots, each holding a strong reference to its
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
use crate::torch::TorchKind;
use pyo3::exceptions::PyAttributeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;
use rsdlpack::dlpark::Managed;
use rsdlpack::dlpark::ffi::{DLManagedTensorVersioned, DLPackExchangeAPI, DLPackExchangeAPIHeader};
use rsdlpack::{Device, ManagedTensor};
use std::cell::Cell;
use std::ffi::{CStr, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

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
    fn of_type(ty: &Bound<'_, PyType>) -> BridgeResult<Option<Self>> {
        let py = ty.py();
        let attribute = match ty.getattr(pyo3::intern!(py, "__dlpack_c_exchange_api__")) {
            Ok(attribute) => attribute,
            Err(err) if err.is_instance_of::<PyAttributeError>(py) => return Ok(None),
            Err(err) => {
                return Err(BridgeError::producer(
                    format!("{}.__dlpack_c_exchange_api__", type_name(ty)),
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
            return Err(BridgeError::Argument(format!(
                "{}.__dlpack_c_exchange_api__ is {}, not a PyCapsule named \"dlpack_exchange_api\" \
                 (DLPack 1.3); set it to None to disable the C exchange API for this type",
                type_name(ty),
                attribute
                    .repr()
                    .map(|r| r.to_string())
                    .unwrap_or_else(|_| "?".into())
            )));
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
            format!(
                "{}.__dlpack_c_exchange_api__ managed_tensor_from_py_object_no_sync",
                type_name(&object.get_type())
            )
        };
        if status != 0 {
            return Err(match PyErr::take(py) {
                Some(err) => BridgeError::producer(what(), err),
                None => BridgeError::Producer {
                    what: what(),
                    message: format!("error code {status} without setting a Python exception"),
                },
            });
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
            return Err(BridgeError::producer(
                format!("{} (while reporting success)", what()),
                err,
            ));
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
        let what = |type_name: String| {
            format!("{type_name}.__dlpack_c_exchange_api__ managed_tensor_to_py_object_no_sync")
        };
        let Some(make) = self.table.managed_tensor_to_py_object_no_sync else {
            return Err(BridgeError::Argument(format!(
                "{} is missing from the table",
                what(type_name())
            )));
        };
        let raw = tensor.into_raw();
        let mut out: *mut c_void = std::ptr::null_mut();
        // SAFETY: the GIL is held (`py`); `raw` is an owned versioned tensor whose ownership
        // the function takes on success; `out` is a valid out-pointer.
        let status = unsafe { make(raw, &mut out) };
        let raised = PyErr::take(py);
        if status == 0 && !out.is_null() {
            // SAFETY: on success the function hands out a new reference.
            let object = unsafe { Bound::from_owned_ptr(py, out.cast()) };
            return match raised {
                None => Ok(object),
                // A table that reports success must not leave an exception behind; the object
                // (and with it the tensor) is released by the drop.
                Some(err) => Err(BridgeError::producer(
                    format!("{} (while reporting success)", what(type_name())),
                    err,
                )),
            };
        }
        if !deleter_ran() {
            // SAFETY: the table did not take the tensor (its deleter has not run): it is ours
            // again, and released once here.
            drop(unsafe { Managed::from_raw(raw) });
        }
        Err(match raised {
            Some(err) => BridgeError::producer(what(type_name()), err),
            None => BridgeError::Producer {
                what: what(type_name()),
                message: format!("error code {status} and no object, without a Python exception"),
            },
        })
    }

    /// The producer's current work stream on `device` (a `CUstream`; 0 is the default stream),
    /// or `None` when the table has no `current_work_stream`.
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
            let what = format!(
                "{}.__dlpack_c_exchange_api__ current_work_stream",
                type_name()
            );
            return Err(match PyErr::take(py) {
                Some(err) => BridgeError::producer(what, err),
                None => BridgeError::Producer {
                    what,
                    message: format!("error code {status} without setting a Python exception"),
                },
            });
        }
        Ok(Some(stream as usize))
    }
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

fn type_name(ty: &Bound<'_, PyType>) -> String {
    ty.name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// What the importer needs to know about a type, decided once per type.
#[derive(Clone, Copy)]
pub struct TypeInfo {
    /// Its C exchange API table, if it has a usable one.
    pub api: Option<ExchangeApi>,
    /// Whether it is a torch tensor type, and which kind (see [`crate::torch`]).
    pub torch: TorchKind,
    /// Whether its tensors are always in host memory, so that asking for the CPU is a no-op
    /// (`numpy.ndarray`, see [`crate::numpy`]).
    pub host_memory: bool,
    /// Whether its objects are NumPy arrays whose fields this process has checked it can
    /// read ([`crate::numpy::fields_are_readable`]).
    pub numpy_fields: bool,
}

/// The per-type cache (see the module docs). A few slots suffice: a program imports from a few
/// tensor types; a full cache replaces its oldest entry.
struct TypeCache {
    entries: [Option<(Py<PyType>, TypeInfo)>; SLOTS],
    next: usize,
}

const SLOTS: usize = 8;

/// Bumped whenever an entry leaves [`CACHE`] (see [`type_info`]).
static GENERATION: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The calling thread's last answer: (type address, generation, answer). Spares the
    /// lock on the common case of many imports of one type.
    static LAST: Cell<Option<(usize, usize, TypeInfo)>> = const { Cell::new(None) };
}

static CACHE: Mutex<TypeCache> = Mutex::new(TypeCache {
    entries: [const { None }; SLOTS],
    next: 0,
});

/// What [`TypeInfo`] says about `type(object)`.
///
/// The cache's lock is never held while Python code runs (the attribute lookup may run a
/// metaclass's code, which may import tensors itself).
// Inlined: the thread's last answer is the common case.
#[inline]
pub fn type_info(object: &Bound<'_, PyAny>) -> BridgeResult<TypeInfo> {
    info_of_type(object.py(), object.get_type_ptr())
}

/// What [`TypeInfo`] says about the type `ty` (a consumer's type, see `share_into`).
pub fn type_info_of(ty: &Bound<'_, PyType>) -> BridgeResult<TypeInfo> {
    info_of_type(ty.py(), ty.as_type_ptr())
}

#[inline]
fn info_of_type(py: Python<'_>, raw: *mut ffi::PyTypeObject) -> BridgeResult<TypeInfo> {
    // The thread's last answer, valid while no entry was evicted since (an evicted type may be
    // freed and its address reused; eviction bumps the generation before the type is freed).
    let generation = GENERATION.load(Ordering::Acquire);
    if let Some((ty, seen, info)) = LAST.get()
        && ty == raw as usize
        && seen == generation
    {
        return Ok(info);
    }
    type_info_from_cache(py, raw, generation)
}

/// [`type_info`] past the thread's last answer: the shared cache, else the type itself.
fn type_info_from_cache(
    py: Python<'_>,
    raw: *mut ffi::PyTypeObject,
    generation: usize,
) -> BridgeResult<TypeInfo> {
    {
        // A poisoned lock only means a panic elsewhere mid-update; the slots stay consistent.
        let cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, info)) = cache
            .entries
            .iter()
            .flatten()
            .find(|(ty, _)| ty.as_ptr() == raw.cast())
        {
            LAST.set(Some((raw as usize, generation, *info)));
            return Ok(*info);
        }
    }
    // SAFETY: `raw` is the type of a live object or a live type the caller borrows.
    let ty = unsafe { Bound::from_borrowed_ptr(py, raw.cast()) }
        .cast_into::<PyType>()
        .expect("a type object");
    // A first sight of the type: the attribute lookup drops an `AttributeError` (holding the
    // type) for every type without the API, which must be released now (see `crate::attach`).
    let info = crate::attach::releasing(|| -> BridgeResult<TypeInfo> {
        let ndarray = crate::numpy::is_ndarray(&ty);
        Ok(TypeInfo {
            api: ExchangeApi::of_type(&ty)?,
            torch: crate::torch::classify(&ty)?,
            host_memory: ndarray,
            numpy_fields: ndarray && crate::numpy::fields_are_readable(&ty),
        })
    })?;
    let evicted = {
        let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
        if cache
            .entries
            .iter()
            .flatten()
            .any(|(ty, _)| ty.as_ptr() == raw.cast())
        {
            None // another thread cached it meanwhile
        } else {
            let slot = cache.next;
            cache.next = (slot + 1) % SLOTS;
            let evicted = cache.entries[slot].replace((ty.unbind(), info));
            if evicted.is_some() {
                GENERATION.fetch_add(1, Ordering::AcqRel);
            }
            evicted
        }
    };
    // Released outside the lock (freeing a type may run Python code), and through `Bound`, so
    // at once (see `crate::attach`).
    drop(evicted.map(|(ty, _)| ty.into_bound(py)));
    Ok(info)
}
