//! CUDA paths on a machine without a driver (CI): clear errors, no panics, nothing leaked.
//! (The GPU behaviour itself is checked by test/gpu/check_gpu.py on a GPU machine.)

mod common;

use common::*;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rsdlpack::dlpark::ffi::DLManagedTensorVersioned;
use rsdlpack::{
    Device, DeviceKind, ElementType, ImportedTensor, IndexOrder, ManagedTensor, TensorDescriptor,
};
use rsdlpack_python::c_abi::{
    rsdlpack_cuda_describe_stream, rsdlpack_cuda_driver_available, rsdlpack_error_free,
    rsdlpack_tensor_release,
};
use rsdlpack_python::python::release::{Wait, drain, forward};
use rsdlpack_python::{BridgeError, Exporter, ImportRequest, import};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

/// A managed tensor that claims to be on CUDA device 0 (its pointer is host memory).
fn fake_cuda_tensor() -> (*mut DLManagedTensorVersioned, Arc<AtomicUsize>) {
    let data = vec![0f32; 4];
    let count = Arc::new(AtomicUsize::new(0));
    let cuda = Device {
        kind: DeviceKind::Cuda,
        id: 0,
    };
    let spec = TensorDescriptor::from_julia_layout(
        data.as_ptr() as usize,
        cuda,
        ElementType::Float32,
        &[4],
        &[1],
        IndexOrder::Producer,
    )
    .unwrap();
    let managed =
        rsdlpack::export::export_versioned(&spec, (data, Counted(Arc::clone(&count))), 3).unwrap();
    (managed.into_raw(), count)
}

/// These tests assert what happens where no driver library can be loaded (CI). Rust's test
/// harness has no run-time skip, so where a driver is present they fail here, saying why,
/// instead of passing having asserted nothing. (These binaries embed this machine's libpython
/// and are not staged for the GPU run; test/gpu/check_gpu.py covers the bridge there.)
fn require_no_driver() {
    let here = rsdlpack::cuda::driver();
    assert!(
        matches!(here, Err(rsdlpack::Error::NoCudaDriver)),
        "asserts the no-driver behaviour, but this machine answers {here:?}; scripts/test.sh \
         skips without_a_driver_* tests where a driver exists, and test/gpu/check_gpu.py checks \
         the bridge there"
    );
    assert_eq!(rsdlpack_cuda_driver_available(), 0);
}

#[test]
fn without_a_driver_importing_a_cuda_capsule_fails_clearly_and_releases_it() {
    require_no_driver();
    Python::attach(|py| {
        let (raw, count) = fake_cuda_tensor();
        let exporter = Exporter::new(
            // SAFETY: just built and handed over.
            ImportedTensor::new(unsafe { ManagedTensor::from_versioned_raw(raw) }.unwrap())
                .unwrap(),
            None,
        )
        .unwrap()
        .into_pyobject(py)
        .unwrap();
        let globals = PyDict::new(py);
        globals.set_item("exporter", exporter).unwrap();
        py.run(
            c"try:\n    exporter.__dlpack__(max_version=(1, 3))\n    message = None\nexcept BufferError as e:\n    message = str(e)",
            Some(&globals),
            None,
        )
        .unwrap();
        let message: String = globals
            .get_item("message")
            .unwrap()
            .unwrap()
            .extract()
            .unwrap();
        assert!(message.contains("no CUDA driver"), "{message}");

        let capsule = globals.get_item("exporter").unwrap().unwrap().call_method(
            "__dlpack__",
            (),
            Some(&{
                let kw = PyDict::new(py);
                kw.set_item("max_version", (1, 3)).unwrap();
                kw.set_item("stream", -1).unwrap();
                kw
            }),
        );
        let capsule = capsule.expect("stream=-1 asks for no synchronisation, so no driver call");
        let err = import(&capsule, &ImportRequest::default())
            .err()
            .expect("the pointer check needs a driver");
        // The cause leads, not a verdict on the pointer that nothing could check.
        assert!(
            matches!(err, BridgeError::Core(rsdlpack::Error::NoCudaDriver)),
            "{err:?}"
        );
        assert!(err.to_string().starts_with("no CUDA driver"), "{err}");
        assert_eq!(err.code(), rsdlpack_python::ErrorCode::Buffer);
        drop(capsule);
        globals.del_item("exporter").unwrap();
        assert_eq!(
            releases(&count),
            1,
            "released exactly once after the failed import"
        );
    });
}

#[test]
fn without_a_driver_describing_a_stream_is_an_error_not_a_crash() {
    require_no_driver();
    let mut description = rsdlpack::cuda::stream_info::StreamDescription::default();
    let mut message: *mut std::ffi::c_char = std::ptr::null_mut();
    // SAFETY: valid out-pointers.
    let code = unsafe { rsdlpack_cuda_describe_stream(0x1000, &mut description, &mut message) };
    assert_eq!(code, 2);
    // SAFETY: the entry point wrote a message we now own.
    let text = unsafe { std::ffi::CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: freed once.
    unsafe { rsdlpack_error_free(message) };
    assert!(text.contains("no CUDA driver"), "{text}");
}

#[test]
fn without_a_driver_a_forwarded_cuda_tensor_is_released_once_on_and_off_the_gil() {
    require_no_driver();
    Python::attach(|py| {
        for off_the_gil in [false, true] {
            let (raw, count) = fake_cuda_tensor();
            // SAFETY: just built and handed over.
            let mut tensor =
                ImportedTensor::new(unsafe { ManagedTensor::from_versioned_raw(raw) }.unwrap())
                    .unwrap();
            // SAFETY: without a driver the handle is never dereferenced.
            unsafe { tensor.set_consumer_stream(rsdlpack::stream::StreamRequest::Handle(0x1230)) };
            let forwarded = forward(tensor).unwrap().into_raw() as usize;
            if off_the_gil {
                std::thread::spawn(move || {
                    // SAFETY: an owned tensor handed to this thread.
                    unsafe { rsdlpack_tensor_release(forwarded as *mut _) }
                })
                .join()
                .unwrap();
                assert_eq!(releases(&count), 0, "queued: this thread holds the GIL");
                // Nothing was recorded (no driver), so nothing keeps it queued.
                drain(py, Wait::No);
            } else {
                // SAFETY: an owned tensor.
                unsafe { rsdlpack_tensor_release(forwarded as *mut _) };
            }
            assert_eq!(releases(&count), 1, "off the GIL: {off_the_gil}");
        }
    });
}
