//! The exporter's `__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)`,
//! as a vectorcall method (`METH_FASTCALL | METH_KEYWORDS`) that reads its keywords itself.
//!
//! Why: pyo3's generated wrapper matches every keyword name by its UTF-8 text on every call
//! and extracts `max_version` through its generic tuple conversion, both a visible part of the
//! share round trip (BENCHMARKS.md, "Measured choices"). Consumers pass the same
//! keyword-name tuple and the same `max_version` tuple on every call (NumPy keeps both in
//! statics, torch's are code constants), so each answer is remembered by object identity: the
//! calling thread's last keyword-name tuple with the slot of each name, and its last
//! `max_version` object with what it asks for. A tuple of ints never changes, and the cache holds
//! a reference, so the address cannot come to name another object. Anything else is read by
//! text, with pyo3's messages for wrong calls.
//!
//! The method is an entry of the exporter type's method table ([`DEFINITION`]).

use super::exporter::ExporterObject;
use crate::error::BridgeError;
use crate::protocol::request::{
    ExportRequest, VersionRequest, copy_from_python, device_from_python, stream_from_python,
    version_from_python,
};
use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};
use std::cell::RefCell;

/// The keywords, in slot order.
const KEYWORDS: [&str; 4] = ["stream", "max_version", "dl_device", "copy"];

/// Slot per keyword position; at most one position per keyword (Python guarantees unique names).
type Slots = [u8; KEYWORDS.len()];

/// A thread's last tuple of one kind and the answer read from it.
type LastTuple<T> = RefCell<Option<(Py<PyTuple>, T)>>;

thread_local! {
    /// The last keyword-name tuple this thread saw, and the slot of each of its names.
    static LAST_NAMES: LastTuple<Slots> = const { RefCell::new(None) };
    /// The last `max_version` tuple this thread saw, and what it asks for.
    static LAST_VERSION: LastTuple<VersionRequest> = const { RefCell::new(None) };
}

/// `__dlpack__` in the exporter type's method table (see [`super::methods`]).
pub(super) const DEFINITION: ffi::PyMethodDef = ffi::PyMethodDef {
    ml_name: c"__dlpack__".as_ptr(),
    ml_meth: ffi::PyMethodDefPointer {
        PyCFunctionFastWithKeywords: dlpack,
    },
    ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
    ml_doc: c"__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, \
              copy=None)\n--\n\nA DLPack capsule over this tensor (the Python array API \
              protocol)."
        .as_ptr(),
};

/// The `METH_FASTCALL | METH_KEYWORDS` entry: Python calls it with the GIL held, `slf` an
/// object of the exporter type (the method descriptor checks it), `nargs` positional values
/// in `args`, then one value per name in `kwnames` (a tuple, or null).
unsafe extern "C" fn dlpack(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: Python calls methods with the GIL held.
    let py = unsafe { Python::assume_attached() };
    let outcome = std::panic::catch_unwind(|| {
        // SAFETY: as this function's contract says.
        unsafe { call(py, slf, args, nargs, kwnames) }
    });
    let error = match outcome {
        Ok(Ok(capsule)) => return capsule.into_ptr(),
        Ok(Err(error)) => error,
        Err(panic) => BridgeError::panic("", &*panic).into(),
    };
    error.restore(py);
    std::ptr::null_mut()
}

/// # Safety
/// As [`dlpack`].
unsafe fn call<'py>(
    py: Python<'py>,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<Bound<'py, PyAny>> {
    if nargs != 0 {
        return Err(PyTypeError::new_err(format!(
            "__dlpack__() takes 0 positional arguments but {nargs} were given"
        )));
    }
    // SAFETY: an exporter object, live for the call (contract).
    let exporter = unsafe { ExporterObject::of_receiver(slf) };
    // Borrowed, not owned: the caller keeps every argument alive for the call.
    let mut values: [Option<Borrowed<'_, 'py, PyAny>>; KEYWORDS.len()] = Default::default();
    if !kwnames.is_null() {
        // Unchecked: vectorcall's `kwnames` is always an exact tuple, and in abi3 mode the
        // check is a call into Python on every `__dlpack__`.
        // SAFETY: a live tuple of names for the call (contract).
        let names =
            unsafe { Bound::from_borrowed_ptr(py, kwnames).cast_into_unchecked::<PyTuple>() };
        let slots = slots_of(&names)?;
        // `Py_SIZE`, inline: in abi3 mode `len()` is a call into Python.
        // SAFETY: a live tuple, whose header Python lays out as a PyVarObject.
        let count = unsafe { ffi::Py_SIZE(kwnames) } as usize;
        for (position, &slot) in slots.iter().take(count).enumerate() {
            // SAFETY: `args` holds `nargs` (0) positional values, then one value per name.
            let value = unsafe { *args.add(position) };
            // SAFETY: a live object for the call.
            values[usize::from(slot)] = Some(unsafe { Borrowed::from_ptr(py, value) });
        }
    }
    let [stream, max_version, dl_device, copy] = &values;
    let request = ExportRequest {
        stream: stream_from_python(stream.as_deref())?,
        version: version_of(max_version.as_deref())?,
        device: device_from_python(dl_device.as_deref())?,
        copy: copy_from_python(copy.as_deref())?,
    };
    Ok(exporter.dlpack(py, &request)?.into_any())
}

/// The slot of each name in `names`, remembered for the thread's last tuple (see the module
/// docs).
fn slots_of(names: &Bound<'_, PyTuple>) -> PyResult<Slots> {
    remembered(&LAST_NAMES, names, || read_slots(names), |_| true)
}

/// What `read` answers for `tuple`, or what it answered for the same tuple object the last time
/// on this thread; the answer is kept for next time when `keep` says the tuple cannot change.
fn remembered<T: Copy + 'static>(
    last: &'static std::thread::LocalKey<LastTuple<T>>,
    tuple: &Bound<'_, PyTuple>,
    read: impl FnOnce() -> PyResult<T>,
    keep: impl FnOnce(&Bound<'_, PyTuple>) -> bool,
) -> PyResult<T> {
    let cached = last.with_borrow(|last| {
        last.as_ref()
            .filter(|(seen, _)| seen.as_ptr() == tuple.as_ptr())
            .map(|&(_, answer)| answer)
    });
    if let Some(answer) = cached {
        return Ok(answer);
    }
    let answer = read()?;
    if keep(tuple) {
        let replaced = last.replace(Some((tuple.clone().unbind(), answer)));
        // Through `Bound`: released now, though pyo3 does not count this call as attached.
        drop(replaced.map(|(seen, _)| seen.into_bound(tuple.py())));
    }
    Ok(answer)
}

/// [`slots_of`], by text.
fn read_slots(names: &Bound<'_, PyTuple>) -> PyResult<Slots> {
    let (mut slots, mut seen) = ([0u8; KEYWORDS.len()], [false; KEYWORDS.len()]);
    for (position, name) in names.iter().enumerate() {
        let name = name.cast_into::<PyString>()?;
        let text = name.to_str()?;
        let slot = KEYWORDS.iter().position(|&k| k == text).ok_or_else(|| {
            PyTypeError::new_err(format!(
                "__dlpack__() got an unexpected keyword argument '{text}'"
            ))
        })?;
        if std::mem::replace(&mut seen[slot], true) {
            return Err(PyTypeError::new_err(format!(
                "__dlpack__() got multiple values for argument '{text}'"
            )));
        }
        // Each position so far named a different keyword, so there are at most four.
        slots[position] = slot as u8;
    }
    Ok(slots)
}

/// The `max_version` request, remembered for the thread's last tuple (see the module docs).
fn version_of(value: Option<&Bound<'_, PyAny>>) -> PyResult<VersionRequest> {
    let Some(tuple) = value.and_then(|v| v.cast_exact::<PyTuple>().ok()) else {
        return Ok(version_from_python(value)?);
    };
    // A tuple of ints never changes; one holding other objects might.
    let of_ints = |tuple: &Bound<'_, PyTuple>| {
        tuple
            .iter()
            .all(|item| item.is_exact_instance_of::<pyo3::types::PyInt>())
    };
    remembered(
        &LAST_VERSION,
        tuple,
        || Ok(version_from_python(value)?),
        of_ints,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_are_read_by_text_and_unknown_ones_named() {
        Python::attach(|py| {
            let names = PyTuple::new(py, ["copy", "max_version", "dl_device"]).unwrap();
            assert_eq!(read_slots(&names).unwrap()[..3], [3, 1, 2]);
            let names = PyTuple::new(py, ["max_version", "device"]).unwrap();
            let error = read_slots(&names).unwrap_err().to_string();
            assert!(
                error.contains("unexpected keyword argument 'device'"),
                "{error}"
            );
            let names = PyTuple::new(py, ["copy", "stream", "copy"]).unwrap();
            let error = read_slots(&names).unwrap_err().to_string();
            assert!(
                error.contains("multiple values for argument 'copy'"),
                "{error}"
            );
        });
    }
}
