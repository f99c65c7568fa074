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
//! Where the calling thread stands ([`this_thread`]) is read from its current thread state,
//! asked for without a fatal error: `PyInterpreterState_Get` aborts the process on a thread
//! that has none, and an entry point can get there. `PyGILState_Check` cannot decide it: CPython
//! disables that check once a sub-interpreter exists (it answers yes on every thread for the
//! rest of the process). Nor is the current thread state this thread's own before 3.12: 3.10 and
//! 3.11 keep one current thread state for the whole process (the GIL holder's), 3.12 made it
//! thread-local. So before 3.12 a thread counts as attached only when the current thread state
//! is the one the GILState API bound to this thread (`PyGILState_GetThisThreadState`, which is
//! what `PyGILState_Check` compares while it is enabled): exact for the interpreter the bridge
//! serves. Any other current thread state is another thread's (this one holds no GIL, and may
//! wait for it), or, once a sub-interpreter has existed, possibly this thread's in it (taking the
//! GIL would wait for itself): `PyGILState_Check`, still enabled while none has, tells the first
//! case; after, nothing tells the two apart, so such a call is refused
//! ([`BridgeError::ThreadStateNotItsOwn`]) and a release is queued, never run there.

use crate::error::{BridgeError, BridgeResult};
use pyo3::{Python, ffi};
use std::ffi::{CStr, c_int, c_void};
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
/// 3.12): the current thread state, or null, never a fatal error. No one name exists in every
/// CPython the abi3 build serves: 3.13 added the first and made the second an inline alias of it
/// (no symbol), and the limited API has neither (pyo3-ffi 0.30 declares the first for
/// `Py_3_13`, the second before, both outside `Py_LIMITED_API`). So the function is looked up
/// in the process once (`dlsym`, where the library's other Python symbols resolve).
type UncheckedGet = unsafe extern "C" fn() -> *mut ffi::PyThreadState;

/// The names [`UncheckedGet`] is looked up by, newest first.
const UNCHECKED_GET_NAMES: [&CStr; 2] = [
    c"PyThreadState_GetUnchecked",
    c"_PyThreadState_UncheckedGet",
];

/// [`UncheckedGet`] as found in the process.
#[derive(Clone, Copy)]
struct Lookup {
    get: UncheckedGet,
    /// Whether the answer is the calling thread's own (3.12 and later: a thread-local), rather
    /// than the GIL holder's, whichever thread that is (3.10, 3.11).
    per_thread: bool,
}

/// [`Lookup`], made once (`None`: neither name is in the process).
fn lookup() -> Option<Lookup> {
    static FOUND: OnceLock<Option<Lookup>> = OnceLock::new();
    *FOUND.get_or_init(|| {
        let get = UNCHECKED_GET_NAMES.iter().find_map(|name| {
            // SAFETY: a NUL-terminated name, looked up in the process's global scope.
            let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            // SAFETY: CPython's function of that name has this signature (both names).
            (!symbol.is_null())
                .then(|| unsafe { std::mem::transmute::<*mut c_void, UncheckedGet>(symbol) })
        })?;
        // SAFETY: `Py_GetVersion` may be called at any time; it returns a static string.
        let version = unsafe { CStr::from_ptr(ffi::Py_GetVersion()) };
        Some(Lookup {
            get,
            per_thread: thread_state_is_per_thread(version),
        })
    })
}

/// Whether the CPython whose `Py_GetVersion()` is `version` keeps the current thread state per
/// thread: 3.12 and later. An unreadable version counts as not: the comparison that adds
/// ([`this_thread`]) is safe on every version, and costs a call.
fn thread_state_is_per_thread(version: &CStr) -> bool {
    let version = version.to_bytes();
    let number = |part: &[u8]| std::str::from_utf8(part).ok()?.parse::<u32>().ok();
    let mut parts = version
        .split(|&b| b == b' ')
        .next()
        .unwrap_or_default()
        .split(|&b| b == b'.');
    match (parts.next().and_then(number), parts.next().and_then(number)) {
        (Some(major), Some(minor)) => (major, minor) >= (3, 12),
        _ => false,
    }
}

/// Where the calling thread stands with the interpreters ([`this_thread`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ThisThread {
    /// Attached, through its own thread state, to this interpreter: it holds that interpreter's
    /// GIL and may call Python there.
    Attached(*mut ffi::PyInterpreterState),
    /// Attached to no interpreter (or none is running): it holds no GIL, and may take it
    /// (`PyGILState_Ensure`).
    Detached,
    /// 3.10 and 3.11, once a sub-interpreter has existed: the current thread state is not the
    /// one bound to this thread. Either another thread holds the GIL, or this thread holds it
    /// in a sub-interpreter: calling Python is unsafe in the first case, taking the GIL
    /// deadlocks in the second.
    NotItsOwn,
    /// Neither lookup name is in the process (a CPython this bridge does not know): nothing
    /// can be told without risking `PyInterpreterState_Get`'s abort.
    Unknown,
}

impl ThisThread {
    /// Why an entry point cannot run on this thread, or `None` where it may: attached (then
    /// admitted or refused by [`admit`]) or detached (then it takes the GIL).
    pub(crate) fn refusal(self) -> Option<BridgeError> {
        match self {
            Self::Attached(_) | Self::Detached => None,
            Self::NotItsOwn => Some(BridgeError::ThreadStateNotItsOwn),
            Self::Unknown => Some(BridgeError::NoThreadStateLookup),
        }
    }

    /// Whether this thread holds the GIL of the interpreter the bridge serves (or of the one it
    /// will serve, when none has been served yet): where Python producers' deleters may run.
    #[inline]
    pub(crate) fn holds_the_served_gil(self) -> bool {
        match self {
            Self::Attached(interpreter) => {
                let served = SERVED.load(Ordering::Acquire);
                served.is_null() || served == interpreter
            }
            _ => false,
        }
    }
}

unsafe extern "C" {
    // Not in the limited API headers that pyo3's abi3 mode exposes, but exported by every
    // CPython since 3.4; resolved from the host process like every other Python symbol.
    fn PyGILState_Check() -> c_int;
}

/// [`this_thread`] before 3.12, for a current thread state that is not the one the GILState API
/// bound to this thread. While no sub-interpreter has existed, `PyGILState_Check` makes that
/// very comparison and answers no: another thread holds the GIL, and this one, which cannot
/// hold it through a second thread state of the one interpreter, may wait for it. Once one has
/// existed (CPython then disables the check: it answers yes), this thread may hold the GIL in
/// it: nothing tells which.
#[cold]
fn not_its_own() -> ThisThread {
    // SAFETY: callable from any thread once the interpreter is initialised.
    if unsafe { PyGILState_Check() } == 0 {
        ThisThread::Detached
    } else {
        ThisThread::NotItsOwn
    }
}

/// Where the calling thread stands: attached to which interpreter, or not. Callable on any
/// thread at any time; never a fatal error (see the module docs).
#[inline]
pub(crate) fn this_thread() -> ThisThread {
    this_thread_through(lookup)
}

/// [`this_thread`] with the thread-state function from `lookup` (the tests take it away).
#[inline(always)]
fn this_thread_through(lookup: impl FnOnce() -> Option<Lookup>) -> ThisThread {
    // SAFETY: `Py_IsInitialized` may be called at any time, from any thread.
    if unsafe { ffi::Py_IsInitialized() } == 0 {
        return ThisThread::Detached;
    }
    let Some(Lookup { get, per_thread }) = lookup() else {
        return ThisThread::Unknown;
    };
    // SAFETY: reads the current thread state, null when none (no fatal error).
    let state = unsafe { get() };
    if state.is_null() {
        return ThisThread::Detached;
    }
    // Before 3.12 `state` is the GIL holder's: this thread's only if the GILState API bound it
    // to this thread. SAFETY: callable from any thread once the interpreter is initialised.
    if !per_thread && state != unsafe { ffi::PyGILState_GetThisThreadState() } {
        return not_its_own();
    }
    // SAFETY: this thread's current thread state, live while it stays attached (as it does
    // for this call); its interpreter outlives it.
    ThisThread::Attached(unsafe { ffi::PyThreadState_GetInterpreter(state) })
}

/// Refuses `current`, the interpreter this thread is attached to ([`ThisThread::Attached`]),
/// unless it is the one the bridge serves (the first one, its build checked then). Every entry
/// point calls it once it holds the GIL.
#[inline]
pub(crate) fn admit(py: Python<'_>, current: *mut ffi::PyInterpreterState) -> BridgeResult<()> {
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

/// [`admit`] for a thread that has just taken the GIL: attached, or refused as
/// [`ThisThread::refusal`] says ([`BridgeError::NoThreadState`] if it is still detached).
pub(crate) fn admit_this_thread(py: Python<'_>) -> BridgeResult<()> {
    match this_thread() {
        ThisThread::Attached(current) => admit(py, current),
        ThisThread::Detached => Err(BridgeError::NoThreadState),
        other => Err(other.refusal().unwrap_or(BridgeError::NoThreadState)),
    }
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
            let ThisThread::Attached(here) = this_thread() else {
                panic!("an attached thread is attached: {:?}", this_thread());
            };
            assert!(admit(py, here).is_ok());
            assert!(this_thread().holds_the_served_gil());
            // SAFETY: attached.
            assert_eq!(SERVED.load(Ordering::Acquire), unsafe {
                ffi::PyInterpreterState_Get()
            });
        });
    }

    #[test]
    fn the_thread_state_is_per_thread_from_3_12() {
        for (version, per_thread) in [
            (c"3.10.13 (main, Nov  1 2023, 10:00:00) [GCC 12.2.0]", false),
            (c"3.11.7 (main, Dec  6 2026)", false),
            (c"3.12.1 (main)", true),
            (c"3.13.0 experimental free-threading build", true),
            (c"3.14.0rc1", true),
            (c"4.0.0", true),
            (c"3.9.18", false),
            (c"", false),
            (c"banana", false),
        ] {
            assert_eq!(
                thread_state_is_per_thread(version),
                per_thread,
                "{version:?}"
            );
        }
        // This process's: the venv's interpreter, looked up by one of the two names.
        let Lookup { per_thread, .. } = lookup().expect("a thread-state lookup name");
        Python::attach(|py| {
            assert_eq!(per_thread, py.version_info() >= (3, 12));
        });
    }

    /// Holds on every CPython the bridge serves: the thread-state lookup finds one of its two
    /// names, answers this (attached) thread's interpreter, and never an interpreter for a
    /// thread Python never saw, which the interpreter check refuses, naming what to do,
    /// instead of aborting.
    #[test]
    fn a_thread_without_a_thread_state_is_refused_not_aborted() {
        assert!(
            lookup().is_some(),
            "neither {UNCHECKED_GET_NAMES:?} is in the process"
        );
        // SAFETY: attached, so this thread has a current thread state.
        let expected = Python::attach(|_| unsafe { ffi::PyInterpreterState_Get() });
        assert_eq!(
            Python::attach(|_| this_thread()),
            ThisThread::Attached(expected)
        );
        let elsewhere = std::thread::spawn(|| format!("{:?}", this_thread()))
            .join()
            .unwrap();
        // Whether or not another test holds the GIL meanwhile: no sub-interpreter exists in this
        // process (tests/sub_interpreter.rs makes one in its own), so it may wait for the GIL.
        assert_eq!(elsewhere, "Detached", "a new thread is attached to nothing");
        Python::attach(|py| assert!(admit_this_thread(py).is_ok()));
        // Where the thread state cannot be told or is not the thread's own: refused, naming
        // what to do, never aborted.
        for (refused, wanted) in [
            (ThisThread::NotItsOwn, "3.12 or later"),
            (ThisThread::Unknown, "_PyThreadState_UncheckedGet"),
        ] {
            let refusal = refused.refusal().unwrap();
            assert_eq!(refusal.code(), ErrorCode::Interpreter);
            let message = refusal.to_string();
            assert!(message.contains(wanted), "{message}");
        }
        // Without either name, even a thread that holds the GIL is not asked through
        // `PyInterpreterState_Get` (which aborts where there is no thread state): refused.
        assert_eq!(
            Python::attach(|_| this_thread_through(|| None)),
            ThisThread::Unknown
        );
        assert!(ThisThread::Detached.refusal().is_none());
        assert!(!ThisThread::Detached.holds_the_served_gil());
        assert!(!ThisThread::NotItsOwn.holds_the_served_gil());
    }

    /// 3.10 and 3.11 keep one current thread state for the process: while another thread holds
    /// the GIL, a thread without it must not be taken for the holder (it would call Python
    /// without the GIL, and release the holder's GIL to wait), nor refused while no
    /// sub-interpreter has existed (it may wait for the GIL).
    #[test]
    fn a_thread_without_the_gil_is_not_taken_for_the_holder() {
        let (asked, answered) = std::sync::mpsc::channel();
        let (answer, holder_answer) = Python::attach(|_| {
            let holder = this_thread();
            // This thread holds the GIL until the other has answered.
            let answer = std::thread::spawn(move || {
                let answer = this_thread();
                let holds = answer.holds_the_served_gil();
                asked.send(()).unwrap();
                (format!("{answer:?}"), holds)
            });
            answered.recv().unwrap();
            (answer.join().unwrap(), holder)
        });
        assert!(matches!(holder_answer, ThisThread::Attached(_)));
        let (answer, holds) = answer;
        assert!(!holds, "{answer}");
        // No sub-interpreter exists in this process (tests/sub_interpreter.rs makes one in its
        // own): the thread may wait for the GIL.
        assert_eq!(answer, "Detached", "a thread without the GIL");
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
