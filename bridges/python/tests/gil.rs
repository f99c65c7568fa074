//! Releasing a Python-produced tensor on a thread without the GIL while another thread holds it
//! must not deadlock: the release is deferred, then drained under the GIL. Nor may a call whose
//! caller asked it not to wait for the GIL (`RSDLPACK_CALL_REFUSE_WITHOUT_GIL`): it is refused.

mod common;

use common::*;
use pyo3::prelude::*;
use rsdlpack_python::ErrorCode;
use rsdlpack_python::c_abi::{
    RSDLPACK_CALL_REFUSE_WITHOUT_GIL, RsdlArrayExport, RsdlImportResult, RsdlPlanOptions,
    RsdlShareResult, RsdlStridedPlan, rsdlpack_error_free, rsdlpack_imported_release,
    rsdlpack_py_flush_releases, rsdlpack_py_flush_releases_with_flags,
    rsdlpack_py_import_plan_with_flags, rsdlpack_py_import_strided_plan,
    rsdlpack_py_pending_releases, rsdlpack_py_share_into_with_flags, rsdlpack_py_share_with_flags,
    rsdlpack_py_take_released_roots, rsdlpack_tensor_release,
};
use rsdlpack_python::python::release::{Wait, drain, forward};
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn a_release_off_the_gil_is_deferred_then_drained() {
    Python::attach(|py| {
        // The process's first entry point checks the interpreter's build, running Python code,
        // where the GIL may pass to the other test's thread that waits for it, whose call would
        // drain this test's queued release: done before anything is queued.
        let _ = rsdlpack_py_flush_releases();
        let array = run(py, "result = np.arange(8.0)");
        let before = refcount(&array);
        let raw = forward(import_default(&array)).unwrap().into_raw() as usize;
        assert!(refcount(&array) > before);

        // This thread holds the GIL and waits for the other: a deleter that took the GIL there
        // would never return.
        let (done, finished) = mpsc::channel();
        std::thread::spawn(move || {
            // SAFETY: `raw` is an owned tensor handed to this thread.
            unsafe { rsdlpack_tensor_release(raw as *mut _) };
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(Duration::from_secs(20))
            .expect("release off the GIL returned (no deadlock)");
        assert_eq!(rsdlpack_py_pending_releases(), 1);
        assert!(refcount(&array) > before, "NumPy's deleter has not run yet");

        assert_eq!(drain(py, Wait::No), 1);
        assert_eq!(refcount(&array), before);
        assert_eq!(rsdlpack_py_pending_releases(), 0);

        // On a thread that holds the GIL the release is immediate.
        let raw = forward(import_default(&array)).unwrap().into_raw();
        // SAFETY: an owned tensor.
        unsafe { rsdlpack_tensor_release(raw) };
        assert_eq!(refcount(&array), before);
        assert_eq!(rsdlpack_py_pending_releases(), 0);

        // The explicit flush (it takes the GIL, which this thread already holds: re-entrant).
        let raw = forward(import_default(&array)).unwrap().into_raw() as usize;
        std::thread::spawn(move || {
            // SAFETY: as above.
            unsafe { rsdlpack_tensor_release(raw as *mut _) }
        })
        .join()
        .unwrap();
        assert_eq!(rsdlpack_py_flush_releases(), 1);
        assert_eq!(refcount(&array), before);
    });
}

/// The message an entry point wrote, freed.
fn take_message(message: *mut std::ffi::c_char) -> String {
    assert!(!message.is_null(), "an error comes with a message");
    // SAFETY: a message the entry point wrote, freed once here.
    let text = unsafe { std::ffi::CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: as above.
    unsafe { rsdlpack_error_free(message) };
    text
}

/// What `rsdlpack_py_import_plan_with_flags` answers for `object` (an address) on this thread.
fn import_plan(object: usize, flags: u32) -> (i32, String, usize) {
    let plan_options = RsdlPlanOptions::any();
    let mut out = std::mem::MaybeUninit::<RsdlImportResult>::uninit();
    let mut error = std::ptr::null_mut();
    // SAFETY: `object` is a live NumPy array the calling test keeps; the rest are ours.
    let code = unsafe {
        rsdlpack_py_import_plan_with_flags(
            object as *mut _,
            std::ptr::null(),
            &plan_options,
            flags,
            out.as_mut_ptr(),
            &mut error,
        )
    };
    if code != 0 {
        return (code, take_message(error), 0);
    }
    // SAFETY: written on success.
    let handle = unsafe { out.assume_init() }.plan.tensor as usize;
    (code, String::new(), handle)
}

#[test]
fn calls_that_may_not_wait_refuse_at_once_while_another_thread_holds_the_gil() {
    const GIL_MESSAGE: &str = "this thread does not hold Python's GIL";
    Python::attach(|py| {
        let array = run(py, "result = np.arange(6.0)");
        let before = refcount(&array);
        let object = array.as_ptr() as usize;
        let ty = array.get_type().as_ptr() as usize;
        // This thread holds the GIL and waits for the other: a call there that waited for the
        // GIL would never return (Julia: the main thread fetching a task that calls).
        let (done, finished) = mpsc::channel();
        std::thread::spawn(move || {
            let refuse = RSDLPACK_CALL_REFUSE_WITHOUT_GIL;
            let import = import_plan(object, refuse);
            let data = [1.0f64; 4];
            let (dims, strides) = ([4i64], [1i64]);
            let array = RsdlArrayExport {
                address: data.as_ptr() as usize,
                dims: dims.as_ptr(),
                strides: strides.as_ptr(),
                ndims: 1,
                root_id: 7,
                stream: 0,
                element_code: rsdlpack::ElementType::Float64.code(),
                order: 0,
                device_type: 1,
                device_id: 0,
                read_only: 0,
                reserved: 0,
            };
            let mut out = std::mem::MaybeUninit::<RsdlShareResult>::uninit();
            let mut strided = std::mem::MaybeUninit::<RsdlStridedPlan>::uninit();
            let (mut e1, mut e2, mut e3, mut e4) = (
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
            let mut released = usize::MAX;
            // SAFETY: every pointer is ours and live for the calls; `ty` a live type.
            let codes = unsafe {
                [
                    rsdlpack_py_share_with_flags(&array, refuse, out.as_mut_ptr(), &mut e1),
                    rsdlpack_py_share_into_with_flags(
                        &array,
                        ty as *mut _,
                        refuse,
                        out.as_mut_ptr(),
                        &mut e2,
                    ),
                    rsdlpack_py_flush_releases_with_flags(refuse, &mut released, &mut e3),
                    rsdlpack_py_import_strided_plan(
                        object as *mut _,
                        std::ptr::null(),
                        &RsdlPlanOptions::any(),
                        refuse,
                        strided.as_mut_ptr(),
                        &mut e4,
                    ),
                ]
            };
            let messages = [e1, e2, e3, e4].map(take_message);
            done.send((import, codes, messages, released)).unwrap();
        });
        let ((code, message, _), codes, messages, released) = finished
            .recv_timeout(Duration::from_secs(20))
            .expect("the calls returned while this thread held the GIL (no wait)");
        let invalid = ErrorCode::Invalid as i32;
        assert_eq!(
            (code, codes),
            (invalid, [invalid; 4]),
            "{message} {messages:?}"
        );
        for (message, function) in std::iter::once(&message).chain(&messages).zip([
            "rsdlpack_py_import_plan_with_flags",
            "rsdlpack_py_share_with_flags",
            "rsdlpack_py_share_into_with_flags",
            "rsdlpack_py_flush_releases_with_flags",
            "rsdlpack_py_import_strided_plan",
        ]) {
            assert!(
                message.starts_with(function) && message.contains(GIL_MESSAGE),
                "{message}"
            );
            assert!(message.contains("PythonCall.GIL.lock"), "{message}");
        }
        assert_eq!(released, usize::MAX, "nothing written on error");
        assert_eq!(refcount(&array), before, "the object was not touched");
        assert_eq!(rsdlpack_py_take_released_roots_all(), vec![7, 7]);

        // Without the flag a call waits for the GIL, as C callers that released it expect, and
        // runs once this thread lets go of it.
        let (done, finished) = mpsc::channel();
        std::thread::spawn(move || done.send(import_plan(object, 0)).unwrap());
        assert!(
            finished.recv_timeout(Duration::from_millis(300)).is_err(),
            "a call without the flag waits for the GIL"
        );
        let (code, message, handle) = py
            .detach(move || finished.recv_timeout(Duration::from_secs(20)))
            .expect("it ran once the GIL was free");
        assert_eq!(code, 0, "{message}");
        // SAFETY: an unconsumed handle from the import.
        unsafe { rsdlpack_imported_release(handle as *mut _) };
        assert_eq!(refcount(&array), before);
    });
}

/// Every released root id, taken.
fn rsdlpack_py_take_released_roots_all() -> Vec<u64> {
    let mut ids = [0u64; 16];
    // SAFETY: writable for 16 entries.
    let n = unsafe { rsdlpack_py_take_released_roots(ids.as_mut_ptr(), ids.len()) };
    ids[..n].to_vec()
}
