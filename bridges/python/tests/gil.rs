//! Releasing a Python-produced tensor on a thread without the GIL while another thread holds it
//! must not deadlock: the release is deferred, then drained under the GIL.

mod common;

use common::*;
use pyo3::prelude::*;
use rsdlpack_python::c_abi::{
    rsdlpack_py_flush_releases, rsdlpack_py_pending_releases, rsdlpack_tensor_release,
};
use rsdlpack_python::python::release::{Wait, drain, rewrap};
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn a_release_off_the_gil_is_deferred_then_drained() {
    Python::attach(|py| {
        let array = run(py, "result = np.arange(8.0)");
        let before = refcount(&array);
        let raw = rewrap(import_default(&array)).unwrap().into_raw() as usize;
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
        let raw = rewrap(import_default(&array)).unwrap().into_raw();
        // SAFETY: an owned tensor.
        unsafe { rsdlpack_tensor_release(raw) };
        assert_eq!(refcount(&array), before);
        assert_eq!(rsdlpack_py_pending_releases(), 0);

        // The explicit flush (it takes the GIL, which this thread already holds: re-entrant).
        let raw = rewrap(import_default(&array)).unwrap().into_raw() as usize;
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
