//! What the importer needs to know about a producer's type (its C exchange API table, whether
//! it is torch's or NumPy's array type), decided once per type and cached.
//!
//! The cache holds a handful of slots, each holding a strong reference to its type, so a cached
//! type is never freed and its address never names another type. Types without a table
//! (NumPy's) are cached too, so their imports pay one locked scan of a few pointers. A class
//! attribute reassigned after a type's first import is not seen (the specification allows
//! caching per type).

use super::exchange_api::ExchangeApi;
use super::torch::TorchKind;
use crate::error::BridgeResult;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;
use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What the importer needs to know about a type, decided once per type.
#[derive(Clone, Copy)]
pub struct TypeInfo {
    /// Its C exchange API table, if it has a usable one.
    pub api: Option<ExchangeApi>,
    /// Whether it is a torch tensor type, and which kind (see [`super::torch`]).
    pub torch: TorchKind,
    /// Whether its tensors are always in host memory, so that asking for the CPU is a no-op
    /// (`numpy.ndarray`, see [`super::numpy`]).
    pub host_memory: bool,
    /// Whether its objects are NumPy arrays whose fields this process has checked it can
    /// read ([`super::numpy::fields_are_readable`]).
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
    if let Some(info) = cached(raw) {
        LAST.set(Some((raw as usize, generation, info)));
        return Ok(info);
    }
    // SAFETY: `raw` is the type of a live object or a live type the caller borrows.
    let ty = unsafe { Bound::from_borrowed_ptr(py, raw.cast()) }
        .cast_into::<PyType>()
        .expect("a type object");
    // A first sight of the type: the attribute lookup drops an `AttributeError` (holding the
    // type) for every type without the API, which must be released now (see
    // `crate::python::attach`).
    let info = crate::python::attach::releasing(|| read_type(&ty))?;
    let evicted = insert(ty.unbind(), info);
    // Released outside the lock (freeing a type may run Python code), and through `Bound`, so
    // at once (see `crate::python::attach`).
    drop(evicted.map(|ty| ty.into_bound(py)));
    Ok(info)
}

/// The cached answer for the type at `raw`.
fn cached(raw: *mut ffi::PyTypeObject) -> Option<TypeInfo> {
    // A poisoned lock only means a panic elsewhere mid-update; the slots stay consistent.
    let cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    cache
        .entries
        .iter()
        .flatten()
        .find(|(ty, _)| ty.as_ptr() == raw.cast())
        .map(|&(_, info)| info)
}

/// What the type itself says (Python code may run: no lock is held).
fn read_type(ty: &Bound<'_, PyType>) -> BridgeResult<TypeInfo> {
    let ndarray = super::numpy::is_ndarray(ty);
    Ok(TypeInfo {
        api: ExchangeApi::of_type(ty)?,
        torch: super::torch::classify(ty)?,
        host_memory: ndarray,
        numpy_fields: ndarray && super::numpy::fields_are_readable(ty),
    })
}

/// Caches `info` for `ty` unless another thread did meanwhile; answers the type whose entry
/// it replaced, for the caller to release outside the lock.
fn insert(ty: Py<PyType>, info: TypeInfo) -> Option<Py<PyType>> {
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if cache
        .entries
        .iter()
        .flatten()
        .any(|(cached, _)| cached.as_ptr() == ty.as_ptr())
    {
        // Another thread cached it meanwhile: `ty` is only a second reference, released by the
        // caller like an evicted one.
        return Some(ty);
    }
    let slot = cache.next;
    cache.next = (slot + 1) % SLOTS;
    let evicted = cache.entries[slot].replace((ty, info));
    if evicted.is_some() {
        GENERATION.fetch_add(1, Ordering::AcqRel);
    }
    evicted.map(|(ty, _)| ty)
}
