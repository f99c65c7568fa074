//! Releases of managed tensors, now or queued for a thread that holds the GIL (see
//! [`crate::python::release`]).

use super::border::quietly;
use crate::python::release;
use pyo3::Python;
use rsdlpack::dlpark::Managed;
use rsdlpack::dlpark::ffi::DLManagedTensorVersioned;

/// Releases a managed tensor now (its deleter runs; a Python producer's is deferred to a
/// thread holding the GIL). A tensor from `rsdlpack_py_import` of CUDA memory is released after
/// the work enqueued so far on the stream its import named: at once when that work is complete
/// and the calling thread holds the GIL, else queued (nothing waits with the GIL held; see
/// `rsdlpack_py_flush_releases`). Null is ignored.
///
/// # Safety
/// `tensor` must be null or an owned `DLManagedTensorVersioned*` that is not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsdlpack_tensor_release(tensor: *mut DLManagedTensorVersioned) {
    if tensor.is_null() {
        return;
    }
    quietly((), || {
        // SAFETY: ownership passes to us (caller's contract); dropping runs the deleter once.
        drop(unsafe { Managed::from_raw(tensor) });
    })
}

/// Releases every Python-produced tensor whose release was deferred; returns how many. Takes
/// the GIL (blocks until it is available) and waits for the GPU work that queued CUDA tensors'
/// consumers enqueued on them (ordinary calls release only those whose work has completed):
/// call it from a thread that may wait for Python and the GPU.
#[unsafe(no_mangle)]
pub extern "C" fn rsdlpack_py_flush_releases() -> usize {
    quietly(0, || {
        Python::try_attach(|py| release::drain(py, release::Wait::Yes)).unwrap_or(0)
    })
}

/// How many released tensors wait for a thread that holds the GIL.
#[unsafe(no_mangle)]
pub extern "C" fn rsdlpack_py_pending_releases() -> usize {
    quietly(0, release::pending)
}
