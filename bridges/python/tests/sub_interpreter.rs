//! Once a sub-interpreter has existed, CPython's `PyGILState_Check` answers yes on every thread
//! for the rest of the process, and on 3.10 and 3.11 the current thread state is the GIL
//! holder's, whichever thread that is. Neither may make the bridge take a thread for the holder:
//! not one that holds no GIL while another thread does (it would run Python producers' deleters
//! and entry points without the GIL), not one that holds it in a sub-interpreter (it would run
//! the served interpreter's deleters there). A test binary of its own: the sub-interpreter
//! changes the whole process.

mod common;

use common::*;
use pyo3::ffi;
use pyo3::prelude::*;
use rsdlpack_python::ErrorCode;
use rsdlpack_python::c_abi::{
    RSDLPACK_CALL_REFUSE_WITHOUT_GIL, rsdlpack_error_free, rsdlpack_py_flush_releases_with_flags,
    rsdlpack_py_pending_releases, rsdlpack_tensor_release,
};
use rsdlpack_python::python::release::{Wait, drain, forward, this_thread_holds_the_gil};
use std::sync::mpsc;
use std::time::Duration;

/// What `rsdlpack_py_flush_releases_with_flags(flags)` answers on this thread: its code, its
/// message, and how many releases it ran.
fn flush(flags: u32) -> (i32, String, usize) {
    let (mut released, mut error) = (usize::MAX, std::ptr::null_mut());
    // SAFETY: both outputs are writable locals.
    let code = unsafe { rsdlpack_py_flush_releases_with_flags(flags, &mut released, &mut error) };
    let message = if error.is_null() {
        String::new()
    } else {
        // SAFETY: a message the entry point wrote, freed once here.
        let text = unsafe { std::ffi::CStr::from_ptr(error) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: as above.
        unsafe { rsdlpack_error_free(error) };
        text
    };
    (code, message, released)
}

#[test]
fn after_a_sub_interpreter_no_thread_is_taken_for_the_gil_holder() {
    Python::attach(|py| {
        // The main interpreter is the one served.
        assert_eq!(flush(0), (0, String::new(), 0));
        assert!(this_thread_holds_the_gil());

        // This thread in a sub-interpreter (sharing the GIL, as `Py_NewInterpreter` makes it).
        // SAFETY: the GIL is held; the sub-interpreter's thread state is made current, then
        // ended, and the main one made current again.
        let (in_sub, holds_in_sub) = unsafe {
            let main = ffi::PyThreadState_Get();
            let sub = ffi::Py_NewInterpreter();
            assert!(!sub.is_null(), "Py_NewInterpreter failed");
            // Waits for nothing (no deadlock on the GIL this thread holds) and is refused.
            let in_sub = flush(0);
            let holds = this_thread_holds_the_gil();
            ffi::Py_EndInterpreter(sub);
            ffi::PyThreadState_Swap(main);
            (in_sub, holds)
        };
        assert_eq!(in_sub.0, ErrorCode::Interpreter as i32, "{in_sub:?}");
        assert!(
            !holds_in_sub,
            "the served interpreter's deleters would run in the sub"
        );
        assert!(this_thread_holds_the_gil(), "back in the main interpreter");

        let array = run(py, "result = np.arange(8.0)");
        let before = refcount(&array);
        let forwarded = forward(import_default(&array)).unwrap().into_raw() as usize;
        let imported = import_default(&array);
        assert!(refcount(&array) > before);

        // 3.10 and 3.11: the other thread sees this thread's state as current, not its own.
        let shared_state = py.version_info() < (3, 12);
        // This thread holds the GIL until the other has finished: a deleter run there would run
        // without it, and one that took it would never return.
        let (done, finished) = mpsc::channel();
        std::thread::spawn(move || {
            let holds = this_thread_holds_the_gil();
            let refused = flush(RSDLPACK_CALL_REFUSE_WITHOUT_GIL);
            // SAFETY: an owned tensor handed to this thread.
            unsafe { rsdlpack_tensor_release(forwarded as *mut _) };
            // NumPy's fields import's own deleter, called without the GIL: queued where the
            // thread state is not its own; a detached thread's takes the GIL (not here, where
            // the holder waits for this thread), so it goes back to be dropped there.
            let imported = if shared_state {
                drop(imported);
                None
            } else {
                Some(imported)
            };
            done.send((holds, refused, imported)).unwrap();
        });
        let (holds, refused, imported) = finished
            .recv_timeout(Duration::from_secs(20))
            .expect("the other thread returned (no deadlock)");
        assert!(!holds, "a thread without the GIL taken for its holder");
        let (code, wanted) = if shared_state {
            (ErrorCode::Interpreter, "not this thread's own")
        } else {
            (ErrorCode::Invalid, "does not hold Python's GIL")
        };
        assert_eq!(refused.0, code as i32, "{refused:?}");
        assert!(refused.1.contains(wanted), "{}", refused.1);
        assert_eq!(refused.2, usize::MAX, "nothing ran: {refused:?}");
        let queued = if shared_state { 2 } else { 1 };
        assert_eq!(
            rsdlpack_py_pending_releases(),
            queued,
            "the releases queued for a thread that holds the GIL"
        );
        assert!(refcount(&array) > before, "no deleter ran off the GIL");

        assert_eq!(drain(py, Wait::No), queued);
        drop(imported);
        assert_eq!(refcount(&array), before);
        assert_eq!(rsdlpack_py_pending_releases(), 0);
    });
}
