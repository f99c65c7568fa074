//! The interpreters this bridge can serve: one per process, with the object layout it was
//! built for.
//!
//! The library is `dlopen`ed (by Julia, by ctypes), so no import-time ABI tag check stands
//! between it and the interpreter; two kinds of interpreter would break the exporter, and are
//! refused at the first attach instead ([`BridgeError::UnsupportedInterpreter`]):
//! - a free-threaded build (3.13t, 3.14t): its larger object header would overlap the
//!   exporter's holder count (the object header is the start of the exporter's allocation),
//!   and its threads run without the GIL that serialises the header slot's claims;
//! - any interpreter but the first the bridge served (a sub-interpreter): the exporter type
//!   and the cached types belong to the first, and a sub-interpreter with its own GIL would not
//!   serialise with it.
//!
//! The build is checked once, at the first attach ([`InterpreterFacts`], read with plain C API
//! calls that touch no object's layout, then judged by [`layout_refusal`], a pure function the
//! tests feed with a free-threaded build's facts); every later attach compares the current
//! interpreter with the first one.
//!
//! The current interpreter is read through the thread's thread state, asked for without a
//! fatal error ([`current`]): `PyInterpreterState_Get` aborts the process on a thread that
//! has none, and an entry point can get there. `PyGILState_Check`, which decides whether a call
//! takes the GIL, answers yes on every thread once a sub-interpreter exists (CPython disables
//! the check for the rest of the process), so a C caller that released the GIL (ctypes' `CDLL`,
//! a thread Python never saw) would reach the interpreter check with no thread state. Such a
//! call now takes the GIL as any call without it does (`c_abi::border::attached`), and the
//! check itself refuses rather than aborts ([`BridgeError::NoThreadState`]).

use crate::error::{BridgeError, BridgeResult};
use pyo3::{Python, ffi};
use std::ffi::{CStr, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, Ordering};

/// The interpreter the bridge serves: the first that attached with a layout it can serve.
static SERVED: AtomicPtr<ffi::PyInterpreterState> = AtomicPtr::new(std::ptr::null_mut());

/// What the first attach learns about the interpreter's build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InterpreterFacts {
    /// `object.__basicsize__`: the size of every object's header in this build (`None` if it
    /// could not be read).
    pub object_header: Option<usize>,
    /// `sysconfig.get_config_var("Py_GIL_DISABLED")`: a free-threaded build (`None` if it
    /// could not be read, as before 3.13, where it is not defined).
    pub gil_disabled: Option<bool>,
    /// `Py_GetVersion()`, for the message.
    pub version: String,
}

/// Why an interpreter with these facts cannot be served, or `None` when it can.
pub(crate) fn layout_refusal(facts: &InterpreterFacts) -> Option<BridgeError> {
    let built_for = size_of::<ffi::PyObject>();
    let why = if facts.gil_disabled == Some(true) {
        format!(
            "it is a free-threaded build (Py_GIL_DISABLED), whose {}-byte object header is not \
             the {built_for}-byte one the bridge's exporter is laid out for, and whose threads run \
             without the GIL that serialises the exporter",
            facts
                .object_header
                .map_or_else(|| "larger".to_string(), |n| n.to_string()),
        )
    } else {
        match facts.object_header {
            Some(size) if size != built_for => format!(
                "its object header is {size} bytes, not the {built_for} bytes the bridge's \
                 exporter is laid out for (a free-threaded or trace-refs build)"
            ),
            _ => return None,
        }
    };
    Some(BridgeError::UnsupportedInterpreter {
        version: facts.version.clone(),
        why,
    })
}

/// `PyThreadState_GetUnchecked` (3.13 and later) or `_PyThreadState_UncheckedGet` (3.5 to
/// 3.12): the calling thread's current thread state, or null, never a fatal error. No one name
/// exists in every CPython the abi3 build serves: 3.13 added the first and made the second an
/// inline alias of it (no symbol), and the limited API has neither (pyo3-ffi 0.30 declares the
/// first for `Py_3_13`, the second before, both outside `Py_LIMITED_API`). So the function is
/// looked up in the process once (`dlsym`, where the library's other Python symbols resolve).
type UncheckedGet = unsafe extern "C" fn() -> *mut ffi::PyThreadState;

/// The names [`UncheckedGet`] is looked up by, newest first.
const UNCHECKED_GET_NAMES: [&CStr; 2] = [
    c"PyThreadState_GetUnchecked",
    c"_PyThreadState_UncheckedGet",
];

/// [`UncheckedGet`], looked up once (`None`: neither name is in the process).
fn unchecked_get() -> Option<UncheckedGet> {
    static FOUND: OnceLock<Option<UncheckedGet>> = OnceLock::new();
    *FOUND.get_or_init(|| {
        UNCHECKED_GET_NAMES.iter().find_map(|name| {
            // SAFETY: a NUL-terminated name, looked up in the process's global scope.
            let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            // SAFETY: CPython's function of that name has this signature (both names).
            (!symbol.is_null())
                .then(|| unsafe { std::mem::transmute::<*mut c_void, UncheckedGet>(symbol) })
        })
    })
}

/// The interpreter of the calling thread's current thread state, or `None` when the thread has
/// none (it is not attached to any interpreter: calling Python there would abort). Callable on
/// any thread once the interpreter is initialised. Where neither lookup name exists (a CPython
/// this bridge does not know), `PyInterpreterState_Get`, which aborts without a thread state,
/// is the fallback: only for a caller that holds the GIL (`holds_the_gil`).
pub(crate) fn current(holds_the_gil: bool) -> Option<*mut ffi::PyInterpreterState> {
    match unchecked_get() {
        Some(get) => {
            // SAFETY: reads the thread's current thread state, null when none (no fatal error).
            let state = unsafe { get() };
            // SAFETY: a live thread state (this thread's own); its interpreter outlives it.
            (!state.is_null()).then(|| unsafe { ffi::PyThreadState_GetInterpreter(state) })
        }
        // SAFETY: the caller holds the GIL, so this thread has a current thread state.
        None if holds_the_gil => Some(unsafe { ffi::PyInterpreterState_Get() }),
        None => None,
    }
}

/// Refuses the attached interpreter unless it is the one the bridge serves (the first one, its
/// build checked then). Every entry point calls it once it holds the GIL; `current` is
/// [`current`]'s answer, and a thread with no thread state is refused
/// ([`BridgeError::NoThreadState`]), never aborted.
#[inline]
pub(crate) fn admit(
    py: Python<'_>,
    current: Option<*mut ffi::PyInterpreterState>,
) -> BridgeResult<()> {
    let Some(current) = current else {
        return Err(BridgeError::NoThreadState);
    };
    if current == SERVED.load(Ordering::Acquire) {
        return Ok(());
    }
    admit_past_check(
        &SERVED,
        current,
        || layout_refusal(&facts(py)),
        || other_interpreter(current),
    )
}

/// [`admit`] past its fast check, over any record of the served interpreter (the tests fake
/// one): the first interpreter is recorded unless `refusal` refuses its build; any other is
/// refused with `other`.
#[cold]
fn admit_past_check<T>(
    served: &AtomicPtr<T>,
    current: *mut T,
    refusal: impl FnOnce() -> Option<BridgeError>,
    other: impl FnOnce() -> BridgeError,
) -> BridgeResult<()> {
    let recorded = served.load(Ordering::Acquire);
    if recorded == current {
        return Ok(());
    }
    if !recorded.is_null() {
        return Err(other());
    }
    if let Some(refusal) = refusal() {
        return Err(refusal);
    }
    // A sub-interpreter with its own GIL may race here: the first to record wins.
    match served.compare_exchange(
        std::ptr::null_mut(),
        current,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Err(winner) if winner != current => Err(other()),
        _ => Ok(()),
    }
}

fn other_interpreter(current: *mut ffi::PyInterpreterState) -> BridgeError {
    // SAFETY: the current interpreter, live while this thread is attached to it.
    let id = unsafe { ffi::PyInterpreterState_GetID(current) };
    BridgeError::OtherInterpreter { id }
}

/// The facts of the attached interpreter, read once through C API functions only: an inline
/// read of an object's fields would assume the very layout being checked.
fn facts(_py: Python<'_>) -> InterpreterFacts {
    // SAFETY: the GIL is held (`_py`); each new reference is released once below, and each
    // failure's exception is cleared (a missing fact is `None`); an exception the caller had
    // pending is set aside first and put back after, untouched.
    unsafe {
        let (mut kind, mut value, mut traceback) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        #[allow(deprecated)] // PyErr_GetRaisedException is 3.12+; the bridge is abi3-py310
        ffi::PyErr_Fetch(&mut kind, &mut value, &mut traceback);
        let version = CStr::from_ptr(ffi::Py_GetVersion())
            .to_string_lossy()
            .into_owned();
        let object_type = (&raw mut ffi::PyBaseObject_Type).cast::<ffi::PyObject>();
        let size = ffi::PyObject_GetAttrString(object_type, c"__basicsize__".as_ptr());
        let object_header = int_of(size).and_then(|n| usize::try_from(n).ok());
        let mut gil_disabled = None;
        let sysconfig = ffi::PyImport_ImportModule(c"sysconfig".as_ptr());
        if !sysconfig.is_null() {
            let get = ffi::PyObject_GetAttrString(sysconfig, c"get_config_var".as_ptr());
            ffi::Py_DECREF(sysconfig);
            if !get.is_null() {
                let name = ffi::PyUnicode_FromString(c"Py_GIL_DISABLED".as_ptr());
                let args = if name.is_null() {
                    std::ptr::null_mut()
                } else {
                    ffi::PyTuple_Pack(1, name)
                };
                if !name.is_null() {
                    ffi::Py_DECREF(name);
                }
                if !args.is_null() {
                    let value = ffi::PyObject_CallObject(get, args);
                    ffi::Py_DECREF(args);
                    if !value.is_null() {
                        // None (not defined: before 3.13) reads as false, 0 or 1 as themselves.
                        let truth = ffi::PyObject_IsTrue(value);
                        ffi::Py_DECREF(value);
                        gil_disabled = (truth >= 0).then_some(truth == 1);
                    }
                }
                ffi::Py_DECREF(get);
            }
        }
        ffi::PyErr_Clear();
        #[allow(deprecated)] // as PyErr_Fetch above
        ffi::PyErr_Restore(kind, value, traceback);
        InterpreterFacts {
            object_header,
            gil_disabled,
            version,
        }
    }
}

/// The value of a new reference to an int, released; `None` for null or a non-int.
///
/// # Safety
/// The GIL is held; `value` is null or a new reference.
unsafe fn int_of(value: *mut ffi::PyObject) -> Option<isize> {
    if value.is_null() {
        return None;
    }
    // SAFETY: a live object (contract); it is released once, after it is read.
    unsafe {
        let n = ffi::PyLong_AsSsize_t(value);
        ffi::Py_DECREF(value);
        (n != -1 || ffi::PyErr_Occurred().is_null()).then_some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pyo3::prelude::*;
    use rsdlpack::ErrorCode;

    fn facts(object_header: Option<usize>, gil_disabled: Option<bool>) -> InterpreterFacts {
        InterpreterFacts {
            object_header,
            gil_disabled,
            version: "3.13.1 experimental free-threading build".into(),
        }
    }

    #[test]
    fn the_build_it_is_laid_out_for_is_served() {
        let header = size_of::<ffi::PyObject>();
        assert_eq!(header, 16, "abi3: ob_refcnt and ob_type");
        assert!(layout_refusal(&facts(Some(header), Some(false))).is_none());
        // 3.10-3.12 define no Py_GIL_DISABLED: sysconfig answers None, read as false.
        assert!(layout_refusal(&facts(Some(header), None)).is_none());
        assert!(
            layout_refusal(&facts(None, None)).is_none(),
            "nothing known"
        );
    }

    #[test]
    fn a_free_threaded_build_is_refused_naming_it() {
        // 3.13t and 3.14t: ob_tid, flags, mutex, gc bits, ob_ref_local, ob_ref_shared, ob_type.
        for object_header in [Some(32), None] {
            let refusal = layout_refusal(&facts(object_header, Some(true))).unwrap();
            assert_eq!(refusal.code(), ErrorCode::Interpreter);
            let message = refusal.to_string();
            assert!(
                message.contains("3.13.1 experimental free-threading build"),
                "{message}"
            );
            assert!(
                message.contains("free-threaded build (Py_GIL_DISABLED)"),
                "{message}"
            );
            assert!(message.contains("with the GIL"), "{message}");
        }
        // Whatever sysconfig said, a header of another size is refused.
        let refusal = layout_refusal(&facts(Some(32), None)).unwrap();
        assert!(
            refusal.to_string().contains("32 bytes, not the 16"),
            "{refusal}"
        );
    }

    #[test]
    fn the_first_interpreter_served_is_the_only_one() {
        let served = AtomicPtr::new(std::ptr::null_mut());
        let (mut first, mut second) = (1u8, 2u8);
        let (first, second) = (&raw mut first, &raw mut second);
        let other = || BridgeError::OtherInterpreter { id: 1 };
        let refused = || {
            layout_refusal(&InterpreterFacts {
                object_header: Some(32),
                gil_disabled: Some(true),
                version: "3.14.0t".into(),
            })
        };
        // A build it cannot serve is refused and not recorded.
        let error = admit_past_check(&served, first, refused, other).unwrap_err();
        assert!(matches!(error, BridgeError::UnsupportedInterpreter { .. }));
        assert!(served.load(Ordering::Acquire).is_null());
        // The first it can serve is recorded; its build is not checked again.
        assert!(admit_past_check(&served, first, || None, other).is_ok());
        assert_eq!(served.load(Ordering::Acquire), first);
        let unchecked = || -> Option<BridgeError> { panic!("checked twice") };
        assert!(admit_past_check(&served, first, unchecked, other).is_ok());
        // Any other is refused, whatever its build.
        let error = admit_past_check(&served, second, || None, other).unwrap_err();
        assert!(matches!(error, BridgeError::OtherInterpreter { .. }));
        assert_eq!(served.load(Ordering::Acquire), first);
    }

    /// The facts as this process's interpreter (a build with the GIL) answers them, read the
    /// way the first attach reads them, and admitted.
    #[test]
    fn the_running_interpreter_is_read_and_admitted() {
        Python::attach(|py| {
            let facts = super::facts(py);
            assert_eq!(facts.object_header, Some(size_of::<ffi::PyObject>()));
            // None before 3.13 (not defined there), 0 after: both read as "not free-threaded".
            assert_ne!(facts.gil_disabled, Some(true), "{facts:?}");
            let version: String = py
                .import("sys")
                .and_then(|sys| sys.getattr("version"))
                .and_then(|v| v.extract())
                .unwrap();
            assert_eq!(facts.version, version);
            assert!(layout_refusal(&facts).is_none());
            let here = current(true);
            assert!(here.is_some(), "an attached thread has a thread state");
            assert!(admit(py, here).is_ok());
            // SAFETY: attached.
            assert_eq!(SERVED.load(Ordering::Acquire), unsafe {
                ffi::PyInterpreterState_Get()
            });
        });
    }

    /// Holds on every CPython the bridge serves: the thread-state lookup finds one of its two
    /// names, answers this (attached) thread's interpreter, and none for a thread Python never
    /// saw, which the interpreter check refuses, naming what to do, instead of aborting.
    #[test]
    fn a_thread_without_a_thread_state_is_refused_not_aborted() {
        assert!(
            unchecked_get().is_some(),
            "neither {UNCHECKED_GET_NAMES:?} is in the process"
        );
        let attached = Python::attach(|_| current(true));
        // SAFETY: attached, so this thread has a current thread state.
        let expected = Python::attach(|_| unsafe { ffi::PyInterpreterState_Get() });
        assert_eq!(attached, Some(expected));
        let elsewhere = std::thread::spawn(|| current(false).map(|p| p as usize))
            .join()
            .unwrap();
        assert_eq!(elsewhere, None, "a new thread has no thread state");
        let refusal = Python::attach(|py| admit(py, None)).unwrap_err();
        assert!(matches!(refusal, BridgeError::NoThreadState));
        assert_eq!(refusal.code(), ErrorCode::Interpreter);
        let message = refusal.to_string();
        assert!(message.contains("no Python thread state"), "{message}");
    }

    #[test]
    fn a_second_interpreter_is_refused_naming_the_limit() {
        let refusal = BridgeError::OtherInterpreter { id: 3 };
        assert_eq!(refusal.code(), ErrorCode::Interpreter);
        assert!(
            refusal.to_string().contains("sub-interpreter 3"),
            "{refusal}"
        );
    }
}
