//! The entry points in a process whose Python interpreter was never started (a C caller that
//! loaded the library before, or without, Python): the interpreter's own error code, never a
//! crash or an attach that would start one. This binary must never initialise Python.

use rsdlpack_python::ErrorCode;
use rsdlpack_python::c_abi::{
    RSDLPACK_CALL_REFUSE_WITHOUT_GIL, rsdlpack_error_free, rsdlpack_py_flush_releases,
    rsdlpack_py_flush_releases_with_flags,
};
use std::ffi::{CStr, c_char};

fn flush_with_flags(flags: u32) -> (i32, String) {
    let mut released = usize::MAX;
    let mut error: *mut c_char = std::ptr::null_mut();
    // SAFETY: both out-pointers are writable locals.
    let code = unsafe { rsdlpack_py_flush_releases_with_flags(flags, &mut released, &mut error) };
    assert!(!error.is_null(), "an error code comes with a message");
    // SAFETY: a non-null message the entry point allocated, freed once below.
    let message = unsafe { CStr::from_ptr(error) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: allocated by the library, not freed before.
    unsafe { rsdlpack_error_free(error) };
    assert_eq!(released, usize::MAX, "nothing is written on error");
    (code, message)
}

#[test]
fn without_an_interpreter_the_entry_points_say_so_with_their_own_code() {
    // SAFETY: may be called at any time.
    assert_eq!(unsafe { pyo3::ffi::Py_IsInitialized() }, 0);
    for flags in [0, RSDLPACK_CALL_REFUSE_WITHOUT_GIL] {
        let (code, message) = flush_with_flags(flags);
        assert_eq!(
            code,
            ErrorCode::Interpreter as i32,
            "flags {flags}: {message}"
        );
        assert_eq!(code, 7, "the number is ABI");
        assert!(message.contains("interpreter is not running"), "{message}");
    }
    assert_eq!(rsdlpack_py_flush_releases(), 0);
    // SAFETY: as above; nothing here may have started the interpreter.
    assert_eq!(unsafe { pyo3::ffi::Py_IsInitialized() }, 0);
}
