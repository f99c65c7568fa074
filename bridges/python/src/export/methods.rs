//! The exporter's Python type, `rsdlpack.DLPackTensor`: its methods, its class attribute, and
//! the type itself, made once per process from a spec ([`exporter_type`]).
//!
//! Made by hand rather than as a pyo3 class: pyo3 makes each object through the base type's
//! `tp_new` (with an empty argument tuple, a slot lookup and an argument check) in an
//! allocation of Python's, and drops it through a trampoline that counts the thread as
//! attached and looks the free function up again, which every share paid for. Here an object
//! is the start of the exporter's own allocation ([`ExporterObject`]), which Python cannot make
//! (the type cannot be instantiated from Python) and does not free: its `tp_dealloc` gives back
//! the object's hold on the allocation, which outlives the object while a capsule's consumer
//! holds the source. The type allows no subclasses, so an exporter object is told by its type
//! alone ([`ExporterObject::of_object`]). It is immutable (`Py_TPFLAGS_IMMUTABLETYPE`, since
//! CPython 3.10, the oldest this bridge serves): a mutable heap type lets Python assign
//! `__new__`, after which `object.__new__` makes a zero-filled object of the type that every
//! method would take for an exporter (test/python/test_exporter_type.py tries each way in).
//!
//! Kept apart from [`super::exporter`] so that the modules implementing the methods
//! ([`super::dlpack_method`], [`super::exchange_api`]) use the exporter without it using them
//! back: the dependencies run one way, from here down. The C exchange API's
//! `managed_tensor_to_py_object_no_sync`, reached through this type's class attribute, makes
//! its objects of the type published in [`super::exporter::TYPE`].

use super::exporter::{Exporter, ExporterObject, ExporterRef, TYPE};
use crate::error::BridgeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;
use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

impl<'py> IntoPyObject<'py> for Exporter {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    /// A new `rsdlpack.DLPackTensor` over the exporter.
    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let ty = type_object(py)?;
        // SAFETY: the exporter type.
        Ok(unsafe { self.into_object_of(py, ty) })
    }
}

/// The type `rsdlpack.DLPackTensor` (made on first use), for callers that ask for it by
/// name: its class attribute, whether an object is one.
pub fn exporter_type(py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
    let ty = type_object(py)?;
    // SAFETY: the exporter type, which lives for the process; a new reference for the `Bound`.
    Ok(unsafe { Bound::from_borrowed_ptr(py, ty.cast()).cast_into_unchecked() })
}

/// The exporter type, made on first use.
#[inline]
fn type_object(py: Python<'_>) -> PyResult<*mut ffi::PyTypeObject> {
    let ty = TYPE.load(Ordering::Acquire);
    if ty.is_null() { make_type(py) } else { Ok(ty) }
}

/// CPython reads the method table for as long as the type lives, i.e. the process.
struct Methods(UnsafeCell<[ffi::PyMethodDef; 3]>);
// SAFETY: written only here, in the initialiser; CPython only reads it.
unsafe impl Sync for Methods {}

static METHODS: Methods = Methods(UnsafeCell::new([
    super::dlpack_method::DEFINITION,
    ffi::PyMethodDef {
        ml_name: c"__dlpack_device__".as_ptr(),
        ml_meth: ffi::PyMethodDefPointer {
            PyCFunction: dlpack_device,
        },
        ml_flags: ffi::METH_NOARGS,
        ml_doc: c"__dlpack_device__($self, /)\n--\n\n(device_type, device_id) of this tensor."
            .as_ptr(),
    },
    ffi::PyMethodDef::zeroed(),
]));

/// Makes the type and publishes it in [`TYPE`], with its class attribute set first; a thread
/// that lost the race to publish keeps the other's.
#[cold]
fn make_type(py: Python<'_>) -> PyResult<*mut ffi::PyTypeObject> {
    let mut slots = [
        ffi::PyType_Slot {
            slot: ffi::Py_tp_dealloc,
            pfunc: dealloc as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_repr,
            pfunc: repr as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_methods,
            pfunc: METHODS.0.get().cast(),
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_doc,
            pfunc: c"A tensor offered to Python consumers through the DLPack protocol."
                .as_ptr()
                .cast_mut()
                .cast(),
        },
        ffi::PyType_Slot {
            slot: 0,
            pfunc: std::ptr::null_mut(),
        },
    ];
    let mut spec = ffi::PyType_Spec {
        // Static: the type keeps pointing at its name.
        name: c"rsdlpack.DLPackTensor".as_ptr(),
        basicsize: ExporterObject::SIZE as c_int,
        itemsize: 0,
        // No BASETYPE (no subclasses), only this crate makes objects, and immutable: Python
        // can assign none of its attributes (`__new__` among them, which would let
        // `object.__new__` make a zero-filled object that is no exporter).
        flags: (ffi::Py_TPFLAGS_DEFAULT
            | ffi::Py_TPFLAGS_DISALLOW_INSTANTIATION
            | ffi::Py_TPFLAGS_IMMUTABLETYPE) as _,
        slots: slots.as_mut_ptr(),
    };
    // SAFETY: a complete spec; CPython copies what it needs of it but the name and the method
    // table, which are static.
    let raw = unsafe { ffi::PyType_FromSpec(&mut spec) };
    // SAFETY: a new reference to the type, or null with an exception set.
    let ty = unsafe { Bound::from_owned_ptr_or_err(py, raw) }?;
    set_class_attribute(
        &ty,
        pyo3::intern!(py, "__dlpack_c_exchange_api__"),
        super::exchange_api::capsule(py)?.as_any(),
    )?;
    let raw = ty.into_ptr().cast::<ffi::PyTypeObject>();
    // The type lives for the process: the reference published here is never released.
    match TYPE.compare_exchange(
        std::ptr::null_mut(),
        raw,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => Ok(raw),
        Err(published) => {
            // SAFETY: ours, unpublished and unused.
            drop(unsafe { Bound::from_owned_ptr(py, raw.cast()) });
            Ok(published)
        }
    }
}

/// Sets the class attribute `name` of the immutable type `ty`, which `setattr` (the type's
/// `__setattr__`) refuses: through the generic setter, which writes the type's dictionary,
/// then `PyType_Modified`, which drops the attribute caches that may have seen it absent.
fn set_class_attribute(
    ty: &Bound<'_, PyAny>,
    name: &Bound<'_, pyo3::types::PyString>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    // SAFETY: live objects for the call, the GIL held; `ty` is a type, made here and not yet
    // seen by any other code.
    let status =
        unsafe { ffi::PyObject_GenericSetAttr(ty.as_ptr(), name.as_ptr(), value.as_ptr()) };
    if status != 0 {
        return Err(PyErr::fetch(ty.py()));
    }
    // SAFETY: as above; `ty` is a type object.
    unsafe { ffi::PyType_Modified(ty.as_ptr().cast()) };
    Ok(())
}

/// `tp_dealloc`: gives back the object's hold on its allocation (the last holder drops the
/// source and frees it), and releases the object's type.
unsafe extern "C" fn dealloc(object: *mut ffi::PyObject) {
    // SAFETY: Python calls `tp_dealloc` with the GIL held, on an object of the exporter type
    // whose reference count reached zero.
    let ty = unsafe { ffi::Py_TYPE(object) };
    // A drop must not unwind into Python; the allocation is then leaked.
    // SAFETY: as above: the object's hold, given back once; the object is not used again.
    let release =
        std::panic::AssertUnwindSafe(|| unsafe { ExporterObject::release_object(object.cast()) });
    let _ = std::panic::catch_unwind(release);
    // SAFETY: the reference every object of a heap type holds on its type.
    unsafe { ffi::Py_DECREF(ty.cast()) };
}

/// Runs a method's `body` on the exporter `slf`; an error or a panic becomes a Python
/// exception and null.
///
/// # Safety
/// Called by Python with the GIL held, `slf` an exporter object (its method descriptor checks
/// the receiver's type).
unsafe fn method(
    slf: *mut ffi::PyObject,
    body: impl for<'py> FnOnce(Python<'py>, ExporterRef<'_>) -> PyResult<Bound<'py, PyAny>>,
) -> *mut ffi::PyObject {
    // SAFETY: Python calls methods with the GIL held.
    let py = unsafe { Python::assume_attached() };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: a live exporter object for the call (contract).
        body(py, unsafe { ExporterObject::of_receiver(slf) })
    }));
    let error = match outcome {
        Ok(Ok(object)) => return object.into_ptr(),
        Ok(Err(error)) => error,
        Err(panic) => BridgeError::panic("", &*panic).into(),
    };
    error.restore(py);
    std::ptr::null_mut()
}

/// `__dlpack_device__()`: `(device_type, device_id)`.
unsafe extern "C" fn dlpack_device(
    slf: *mut ffi::PyObject,
    _: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: as `method`'s contract (a METH_NOARGS method of the exporter type).
    unsafe {
        method(slf, |py, exporter| {
            let device = exporter.descriptor().device().to_dlpack();
            Ok((device.device_type.0, device.device_id)
                .into_pyobject(py)?
                .into_any())
        })
    }
}

/// `tp_repr`.
unsafe extern "C" fn repr(slf: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: as `method`'s contract (the exporter type's `tp_repr`).
    unsafe {
        method(slf, |py, exporter| {
            let d = exporter.descriptor();
            let text = format!(
                "rsdlpack.DLPackTensor(shape={:?}, strides={:?}, dtype={}, device={:?}, \
                 read_only={})",
                d.shape(),
                d.strides(),
                d.element().julia_name(),
                d.device(),
                d.read_only()
            );
            Ok(text.into_pyobject(py)?.into_any())
        })
    }
}
