//! NumPy, the peer whose arrays always live in host memory, read through its C ABI.
//!
//! Every `from_dlpack(Array, x)` asks for the CPU, which for `numpy.ndarray` changes nothing
//! but costs NumPy a tuple parse; so for the exact type the argument is left out, and the
//! result's device is checked against the request all the same. Subclasses may override
//! `__dlpack__`, so only the exact type qualifies.
//!
//! Better still, the importer need not call `ndarray.__dlpack__` at all: its tensor restates
//! five fields of the array object (`data`, `nd`, `dimensions`, `strides`, `flags`) and the
//! dtype's number, all at offsets that NumPy's C ABI fixes for every extension compiled
//! against it (1.x and 2.x alike). [`export_directly`] builds the same versioned tensor NumPy
//! would, holding a reference to the array, with no Python call, argument parsing or capsule.
//! It follows NumPy's own export (`numpy/_core/src/multiarray/dlpack.c`) and hands back
//! `None` for anything that export would refuse or treat specially (byte-swapped, long double,
//! structured or user dtypes, strides that are not whole elements, more dims than the core
//! takes), so that those go through `__dlpack__` and keep NumPy's own answer and message.
//! The offsets are checked once per process against arrays read through Python
//! ([`layout_is_as_expected`]); if any differs, every array goes through `__dlpack__`.

use crate::python::interpreter::ThisThread;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;
use rsdlpack::dlpark::DlpackFlags;
use rsdlpack::dlpark::ffi::{
    DLDevice, DLDeviceType, DLManagedTensorVersioned, DLPackVersion, DLTensor,
};
use rsdlpack::{ElementType, ManagedTensor, PendingRelease};
use std::cell::Cell;
use std::ffi::{CStr, c_char, c_int, c_long, c_void};

thread_local! {
    /// How many arrays this thread imported through their fields. Per thread, so that tests
    /// running in parallel each see only their own imports.
    static IMPORTS: Cell<usize> = const { Cell::new(0) };
}

/// How many arrays the calling thread has imported through [`export_directly`] (a test hook:
/// it tells which path an import took).
pub fn imports_through_fields() -> usize {
    IMPORTS.with(Cell::get)
}

/// Whether `ty` is `numpy.ndarray` itself. Decided once per type (see
/// [`super::type_info::TypeInfo`]); a type whose names cannot be read is not.
pub fn is_ndarray(ty: &Bound<'_, PyType>) -> bool {
    let named = |module: &str, name: &str| {
        ty.module()
            .is_ok_and(|m| m.to_str().is_ok_and(|m| m == module))
            && ty
                .qualname()
                .is_ok_and(|n| n.to_str().is_ok_and(|n| n == name))
    };
    named("numpy", "ndarray")
}

/// Whether `ty` is the very `numpy.ndarray` type of the NumPy this process imported (not a
/// type that only bears its names), and that NumPy's arrays are laid out as [`ArrayHead`]
/// says: what [`export_directly`] needs. Decided once per type.
pub fn fields_are_readable(ty: &Bound<'_, PyType>) -> bool {
    let py = ty.py();
    let ndarray = py
        .import("sys")
        .and_then(|sys| sys.getattr("modules"))
        .and_then(|modules| modules.get_item("numpy"))
        .and_then(|numpy| numpy.getattr("ndarray"));
    ndarray.is_ok_and(|ndarray| ndarray.is(ty)) && layout_is_as_expected(py)
}

/// The head of `PyArrayObject_fields` (numpy/ndarraytypes.h), as far as an export reads it.
#[repr(C)]
struct ArrayHead {
    ob_base: ffi::PyObject,
    data: *mut c_char,
    nd: c_int,
    dimensions: *const isize,
    strides: *const isize,
    base: *mut ffi::PyObject,
    descr: *const DescrHead,
    flags: c_int,
}

/// The head of `PyArray_Descr`, the same in NumPy 1.x and 2.x up to `type_num`.
#[repr(C)]
struct DescrHead {
    ob_base: ffi::PyObject,
    typeobj: *mut ffi::PyTypeObject,
    kind: c_char,
    type_char: c_char,
    byteorder: c_char,
    former_flags: c_char,
    type_num: c_int,
}

/// `NPY_ARRAY_WRITEABLE`.
const WRITEABLE: c_int = 0x0400;

/// The element type of a NumPy type number, as NumPy's export gives it; `None` where that
/// export refuses the type or depends on the platform's long double.
fn element_type(type_num: c_int) -> Option<ElementType> {
    // `NPY_LONG` and `NPY_ULONG` are C `long`s: 64 bits here, 32 on Windows.
    let long = |wide, narrow| {
        if size_of::<c_long>() == 8 {
            wide
        } else {
            narrow
        }
    };
    Some(match type_num {
        0 => ElementType::Bool,
        1 => ElementType::Int8,
        2 => ElementType::UInt8,
        3 => ElementType::Int16,
        4 => ElementType::UInt16,
        5 => ElementType::Int32,
        6 => ElementType::UInt32,
        7 => long(ElementType::Int64, ElementType::Int32),
        8 => long(ElementType::UInt64, ElementType::UInt32),
        9 => ElementType::Int64,
        10 => ElementType::UInt64,
        11 => ElementType::Float32,
        12 => ElementType::Float64,
        14 => ElementType::ComplexF32,
        15 => ElementType::ComplexF64,
        23 => ElementType::Float16,
        _ => return None,
    })
}

/// A byte order NumPy exports: native (`=`), not applicable (`|`) or spelled out as native.
fn is_native(byteorder: c_char) -> bool {
    let native = if cfg!(target_endian = "little") {
        b'<'
    } else {
        b'>'
    };
    matches!(byteorder as u8, b'=' | b'|') || byteorder as u8 == native
}

/// An array's dims and strides (in bytes).
///
/// # Safety
/// `head.dimensions` and `head.strides` must hold `nd` entries each (either may be null when
/// `nd` is 0).
unsafe fn dims_and_strides(head: &ArrayHead, nd: usize) -> (&[isize], &[isize]) {
    if nd == 0 {
        return (&[], &[]);
    }
    // SAFETY: `nd` entries each (this function's contract).
    unsafe {
        (
            std::slice::from_raw_parts(head.dimensions, nd),
            std::slice::from_raw_parts(head.strides, nd),
        )
    }
}

/// The tensor [`export_directly`] hands out: the managed tensor and its metadata in one
/// allocation, holding a reference to the array.
#[repr(C)]
struct ArrayTensor {
    managed: DLManagedTensorVersioned,
    shape: [i64; rsdlpack::descriptor::MAX_NDIM],
    strides: [i64; rsdlpack::descriptor::MAX_NDIM],
}

impl ArrayTensor {
    /// The tensor over `head`'s memory, its strides in elements, owned by `array` (whose
    /// reference the caller takes).
    fn boxed(
        array: &Bound<'_, PyAny>,
        head: &ArrayHead,
        element: ElementType,
        dims: &[isize],
        strides: &[isize],
    ) -> Box<Self> {
        let itemsize = element.size() as isize;
        let mut tensor = Box::new(ArrayTensor {
            managed: DLManagedTensorVersioned {
                version: DLPackVersion::CURRENT,
                manager_ctx: array.as_ptr().cast::<c_void>(),
                deleter: Some(release_array),
                flags: if head.flags & WRITEABLE == 0 {
                    DlpackFlags::READ_ONLY
                } else {
                    DlpackFlags::empty()
                },
                dl_tensor: DLTensor {
                    data: head.data.cast::<c_void>(),
                    device: DLDevice {
                        device_type: DLDeviceType::CPU,
                        device_id: 0,
                    },
                    ndim: head.nd,
                    dtype: element.to_dlpack(),
                    shape: std::ptr::null_mut(),
                    strides: std::ptr::null_mut(),
                    byte_offset: 0,
                },
            },
            shape: [0; rsdlpack::descriptor::MAX_NDIM],
            strides: [0; rsdlpack::descriptor::MAX_NDIM],
        });
        for (k, (&n, &s)) in dims.iter().zip(strides).enumerate() {
            tensor.shape[k] = n as i64;
            tensor.strides[k] = (s / itemsize) as i64;
        }
        tensor.managed.dl_tensor.shape = tensor.shape.as_mut_ptr();
        tensor.managed.dl_tensor.strides = tensor.strides.as_mut_ptr();
        tensor
    }
}

/// The deleter: frees the allocation and gives the array's reference back, under the GIL.
unsafe extern "C" fn release_array(managed: *mut DLManagedTensorVersioned) {
    if managed.is_null() {
        return;
    }
    // The bridge runs Python producers' deleters with the GIL held (see `crate::python::release`);
    // like NumPy's own deleter, this one takes it should anyone else call it without, and where
    // neither is safe (see `ThisThread::NotItsOwn`), queues itself for a thread that holds it.
    let this_thread = crate::python::interpreter::this_thread();
    let holds_the_gil = this_thread.holds_the_served_gil();
    if !holds_the_gil && this_thread != ThisThread::Detached {
        // SAFETY: `managed` is an `ArrayTensor` from `export_directly`, handed to this deleter
        // once (DLPack's contract): owned again, its deleter (this one) runs when the queue is
        // drained, on a thread that holds the GIL.
        if let Ok(tensor) = unsafe { ManagedTensor::from_versioned_raw(managed) } {
            crate::python::release::defer(PendingRelease::unordered(tensor));
        }
        return;
    }
    // SAFETY: `managed` is the first field of an `ArrayTensor` boxed by `export_directly`,
    // handed to this deleter once (DLPack's contract).
    let tensor = unsafe { Box::from_raw(managed.cast::<ArrayTensor>()) };
    let array = tensor.managed.manager_ctx.cast::<ffi::PyObject>();
    drop(tensor);
    if holds_the_gil {
        // SAFETY: the GIL is held; `array` is the strong reference `export_directly` took.
        unsafe { ffi::Py_DECREF(array) };
    } else {
        // SAFETY: as above, with the GIL taken for the call (this thread is detached, so
        // taking it waits for no one but the holder).
        unsafe {
            let state = ffi::PyGILState_Ensure();
            ffi::Py_DECREF(array);
            ffi::PyGILState_Release(state);
        }
    }
}

/// The versioned tensor `array.__dlpack__(max_version=(1, 3))` would give, built from the
/// array's fields, or `None` where NumPy's export would refuse or treat the array specially
/// (see the module docs).
///
/// # Safety
/// `array` must be an object of exactly a type for which [`fields_are_readable`] said yes.
pub unsafe fn export_directly(array: &Bound<'_, PyAny>) -> Option<ManagedTensor> {
    // SAFETY: `array` is an ndarray (the contract) whose object begins with `ArrayHead`'s
    // fields (the NumPy ABI, checked for this process), alive while borrowed.
    let head = unsafe { &*array.as_ptr().cast::<ArrayHead>() };
    // SAFETY: an array's descriptor is a live dtype object it holds a reference to.
    let descr = unsafe { &*head.descr };
    let element = element_type(descr.type_num)?;
    let ndim = usize::try_from(head.nd).ok()?;
    if !is_native(descr.byteorder) || ndim > rsdlpack::descriptor::MAX_NDIM {
        return None;
    }
    let itemsize = element.size() as isize;
    // SAFETY: an array's `dimensions` and `strides` hold `nd` entries each.
    let (dims, strides) = unsafe { dims_and_strides(head, ndim) };
    if dims
        .iter()
        .zip(strides)
        .any(|(&n, &s)| n != 1 && s % itemsize != 0)
    {
        return None; // NumPy's BufferError, with its own message, from `__dlpack__`
    }
    let tensor = ArrayTensor::boxed(array, head, element, dims, strides);
    // The tensor's reference to the array, given back by `release_array`.
    // SAFETY: the GIL is held (`array` is bound).
    unsafe { ffi::Py_INCREF(array.as_ptr()) };
    let managed = Box::into_raw(tensor).cast::<DLManagedTensorVersioned>();
    IMPORTS.with(|n| n.set(n.get() + 1));
    // SAFETY: an owned versioned tensor of the current major version, its deleter callable
    // once (under the GIL, which the bridge's release path provides).
    unsafe { ManagedTensor::from_versioned_raw(managed) }.ok()
}

/// Python that makes the arrays [`layout_is_as_expected`] reads, and says what NumPy itself
/// reports of them.
const PROBE: &CStr = c"
import numpy
def probe():
    made = []
    for a in (numpy.arange(30, dtype='<i2').reshape(5, 6)[::2, 1::2],
              numpy.ones((2, 3, 4), dtype=numpy.float32).transpose(2, 0, 1),
              numpy.zeros((), dtype=numpy.complex128)):
        made.append(a)
    made[0].flags.writeable = False
    return [(a, a.__array_interface__['data'][0], a.shape, a.strides, a.dtype.num,
             a.dtype.byteorder, a.flags.writeable) for a in made]
";

/// Whether this process's NumPy lays its arrays out as [`ArrayHead`] says: each field read
/// from a few arrays matches what NumPy reports of them through Python. A NumPy that cannot
/// be asked counts as a mismatch.
fn layout_is_as_expected(py: Python<'_>) -> bool {
    let reported = || -> PyResult<bool> {
        let module = PyModule::from_code(
            py,
            PROBE,
            c"rsdlpack_numpy_probe.py",
            c"rsdlpack_numpy_probe",
        )?;
        let arrays: Vec<Reported<'_>> = module.getattr("probe")?.call0()?.extract()?;
        Ok(arrays.iter().all(reads_as_reported))
    };
    crate::python::attach::releasing(|| reported().unwrap_or(false))
}

/// An array and, as NumPy reports them: its data address, shape, strides (bytes), dtype
/// number, byte order and whether it is writeable.
type Reported<'py> = (
    Bound<'py, PyAny>,
    usize,
    Vec<isize>,
    Vec<isize>,
    i32,
    String,
    bool,
);

fn reads_as_reported(
    (array, data, shape, strides, type_num, byteorder, writeable): &Reported<'_>,
) -> bool {
    // Only an object at least as large as the head may be read as one.
    let size = array
        .get_type()
        .getattr("__basicsize__")
        .and_then(|b| b.extract::<usize>());
    if size.map_or(true, |size| size < size_of::<ArrayHead>()) {
        return false;
    }
    // SAFETY: the object is alive while borrowed and at least `ArrayHead`'s size (checked).
    let head = unsafe { &*array.as_ptr().cast::<ArrayHead>() };
    let nd = usize::try_from(head.nd).unwrap_or(usize::MAX);
    if head.data as usize != *data || nd != shape.len() || head.descr.is_null() {
        return false;
    }
    // SAFETY: the fields matched so far say this is the array head NumPy reports, whose
    // `dimensions` and `strides` hold `nd` entries and whose descriptor is a live dtype.
    let ((dims, steps), descr) = unsafe { (dims_and_strides(head, nd), &*head.descr) };
    dims == shape.as_slice()
        && steps == strides.as_slice()
        && descr.type_num == *type_num
        && byteorder.as_bytes() == [descr.byteorder as u8]
        && (head.flags & WRITEABLE != 0) == *writeable
}
