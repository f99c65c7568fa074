//! Import from the real PyTorch through its DLPack 1.3 C exchange API (`__dlpack_c_exchange_api__`),
//! the fallbacks to `__dlpack__`, and the consumer's handling of hostile or unusual tables:
//! producer errors, version chains, wrong attributes.

mod common;

use common::*;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};
use rsdlpack::Device;
use rsdlpack::dlpark::ffi::{
    DLDeviceType, DLManagedTensorVersioned, DLPackExchangeAPI, DLPackExchangeAPIHeader,
    DLPackVersion,
};
use rsdlpack_python::import::exchange_api::imports_through_c_api;
use rsdlpack_python::{BridgeError, ErrorCode, ImportRequest, import};
use std::ffi::{CString, c_int, c_void};
use std::ptr::NonNull;

/// Evaluates `code` with torch imported, returning `result`.
fn torch<'py>(py: Python<'py>, code: &str) -> Bound<'py, PyAny> {
    run(py, &format!("import torch\n{code}"))
}

fn data_ptr(tensor: &Bound<'_, PyAny>) -> usize {
    tensor.call_method0("data_ptr").unwrap().extract().unwrap()
}

/// Imports `object`, returning the result and whether it went through the C exchange API.
fn import_counted(
    object: &Bound<'_, PyAny>,
    request: &ImportRequest,
) -> (Result<rsdlpack::ImportedTensor, BridgeError>, bool) {
    let before = imports_through_c_api();
    let result = import(object, request);
    (result, imports_through_c_api() > before)
}

#[test]
fn torch_tensors_of_every_dtype_come_through_the_c_exchange_api_zero_copy() {
    Python::attach(|py| {
        for (name, element) in dtypes(Peer::Torch) {
            let t = torch(
                py,
                &format!("result = torch.arange(24).reshape(4, 6).to(torch.{name})[1:, ::2]"),
            );
            let (tensor, used) = import_counted(&t, &ImportRequest::default());
            let tensor = tensor.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(used, "{name}: the C exchange API was used");
            let d = tensor.descriptor();
            assert_eq!(d.element(), element, "{name}");
            assert_eq!(d.first_element(), data_ptr(&t), "{name}: same memory");
            assert_eq!(
                (d.shape().to_vec(), d.strides().to_vec()),
                (vec![3, 3], vec![6, 2])
            );
            assert_eq!(d.version(), Some(DLPackVersion { major: 1, minor: 3 }));
        }
    });
}

#[test]
fn the_producers_deleter_runs_once_when_the_import_is_dropped() {
    Python::attach(|py| {
        let t = torch(py, "result = torch.arange(6.0)");
        let before = refcount(&t);
        let (tensor, used) = import_counted(&t, &ImportRequest::default());
        let tensor = tensor.unwrap();
        assert!(used);
        // torch's managed tensor holds a C++ reference to the tensor (not a Python one):
        // `Tensor._use_count()` counts those.
        let uses = || -> i64 { t.call_method0("_use_count").unwrap().extract().unwrap() };
        assert_eq!(uses(), 2, "the managed tensor holds the tensor");
        drop(tensor);
        assert_eq!(uses(), 1, "the deleter ran once and released it");
        assert_eq!(refcount(&t), before, "no Python reference leaked");
    });
}

#[test]
fn requests_the_c_api_cannot_express_go_through_dunder_dlpack() {
    Python::attach(|py| {
        let t = torch(py, "result = torch.arange(6.0).reshape(2, 3)");
        let copy = ImportRequest {
            copy: Some(true),
            ..Default::default()
        };
        let (tensor, used) = import_counted(&t, &copy);
        let tensor = tensor.unwrap();
        assert!(!used, "copy=True is asked of __dlpack__");
        // torch 2.15 copies but does not set IS_COPIED.
        assert_ne!(tensor.descriptor().first_element(), data_ptr(&t));

        // dl_device=(CPU, 0) is where the tensor is: the C API serves it.
        let cpu = ImportRequest {
            device: Some(Device::CPU),
            ..Default::default()
        };
        let (tensor, used) = import_counted(&t, &cpu);
        assert!(used);
        assert_eq!(tensor.unwrap().descriptor().first_element(), data_ptr(&t));

        // A CPU tensor with a stream request: nothing to order, the C API serves it.
        let stream = ImportRequest {
            stream: rsdlpack::stream::StreamRequest::NoSync,
            ..Default::default()
        };
        let (tensor, used) = import_counted(&t, &stream);
        assert!(used && tensor.is_ok());
    });
}

#[test]
fn grad_conj_and_neg_tensors_are_refused_by_name_on_both_paths() {
    let cases = [
        (
            "torch.ones(3, requires_grad=True)",
            "requires grad",
            "detach()",
        ),
        (
            "torch.tensor([1+2j]).conj()",
            "conjugate bit",
            "resolve_conj()",
        ),
        (
            "torch.tensor([1+2j]).conj().imag",
            "negative bit",
            "resolve_neg()",
        ),
        (
            "torch.ones(2, 3, requires_grad=True)[1:].t()",
            "requires grad",
            "detach()",
        ),
        (
            "torch.tensor([1+2j, 3j]).conj()[::2]",
            "conjugate bit",
            "resolve_conj()",
        ),
        (
            "torch._neg_view(torch.ones(4, dtype=torch.int32))",
            "negative bit",
            "resolve_neg()",
        ),
        (
            "torch.nn.Parameter(torch.ones(2))",
            "requires grad",
            "detach()",
        ),
        (
            "torch.ones(3).requires_grad_()",
            "requires grad",
            "detach()",
        ),
    ];
    Python::attach(|py| {
        // Imported once before its flag is set: the flag is read anew on every import.
        let toggled = torch(py, "result = torch.ones(3)");
        assert!(import(&toggled, &ImportRequest::default()).is_ok());
        assert!(
            rsdlpack_python::import::torch::flags_read_natively(py),
            "this torch's flag functions are found and agree with torch (Linux, torch >= 2)"
        );
        toggled.call_method1("requires_grad_", (true,)).unwrap();
        assert!(import(&toggled, &ImportRequest::default()).is_err());
        for (code, bit, fix) in cases {
            let t = torch(py, &format!("result = {code}"));
            for request in [
                ImportRequest::default(),
                ImportRequest {
                    copy: Some(true),
                    ..Default::default()
                },
            ] {
                let (result, used) = import_counted(&t, &request);
                let message = match result {
                    Err(e) if e.code() == ErrorCode::Buffer => e.to_string(),
                    Err(other) => panic!("{code}: unexpected error {other:?}"),
                    Ok(_) => panic!("{code}: imported"),
                };
                assert!(!used, "{code}: refused before any export");
                assert!(
                    message.contains(bit) && message.contains(fix),
                    "{code}: {message}"
                );
                assert!(message.contains("cannot import this torch."), "{message}");
            }
        }
        // A subclass that answers a flag itself is asked through Python, as torch would.
        let liar = torch(
            py,
            "class Liar(torch.Tensor):\n    def is_neg(self): return True\nresult = torch.ones(2).as_subclass(Liar)",
        );
        let err = import(&liar, &ImportRequest::default())
            .err()
            .expect("refused");
        assert!(err.to_string().contains("negative bit"), "{err}");
        // The same tensors once resolved import fine.
        let ok = torch(
            py,
            "result = torch.tensor([1+2j]).conj().imag.resolve_neg()",
        );
        assert!(import(&ok, &ImportRequest::default()).is_ok());
    });
}

#[test]
fn a_torch_error_through_the_c_api_is_a_producer_error_with_torchs_message() {
    Python::attach(|py| {
        let meta = torch(py, "result = torch.empty(3, device='meta')");
        let (result, _) = import_counted(&meta, &ImportRequest::default());
        match result {
            Err(BridgeError::Producer { what, message }) => {
                assert!(
                    what.contains("managed_tensor_from_py_object_no_sync"),
                    "{what}"
                );
                assert!(message.contains("meta"), "{message}");
            }
            Err(other) => panic!("unexpected error {other:?}"),
            Ok(_) => panic!("a meta tensor was imported"),
        }
        assert!(PyErr::take(py).is_none(), "no exception left behind");
    });
}

#[test]
fn read_only_wrappers_import_read_only() {
    Python::attach(|py| {
        let has = torch(
            py,
            "import torch.utils.dlpack as d\nresult = hasattr(d, 'ReadOnlyTensorWrapper')",
        );
        assert!(
            has.extract::<bool>().unwrap(),
            "torch 2.15 has ReadOnlyTensorWrapper"
        );
        let source = torch(py, "result = torch.arange(4.0)");
        let g = PyDict::new(py);
        g.set_item("source", &source).unwrap();
        py.run(
            c"from torch.utils.dlpack import ReadOnlyTensorWrapper\nresult = ReadOnlyTensorWrapper(source)",
            Some(&g),
            None,
        )
        .unwrap();
        let wrapper = g.get_item("result").unwrap().unwrap();
        let tensor = import(&wrapper, &ImportRequest::default()).unwrap();
        assert!(tensor.descriptor().read_only());
        assert_eq!(tensor.descriptor().first_element(), data_ptr(&source));
    });
}

// ---- hostile or unusual tables, built here -------------------------------------------------

unsafe extern "C" fn failing_export(
    _object: *mut c_void,
    _out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    let message = CString::new("the producer cannot export this tensor").unwrap();
    // SAFETY: called with the GIL held (the import holds it); a valid exception type and string.
    unsafe { ffi::PyErr_SetString(ffi::PyExc_BufferError, message.as_ptr()) };
    -1
}

unsafe extern "C" fn silent_failure(
    _object: *mut c_void,
    _out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    -1
}

unsafe extern "C" fn no_stream(
    _device_type: DLDeviceType,
    _device_id: i32,
    _out: *mut *mut c_void,
) -> c_int {
    -1
}

#[repr(transparent)]
struct Table(DLPackExchangeAPI);
// SAFETY: immutable statics of function pointers (and prev_api links to other statics).
unsafe impl Sync for Table {}

const fn table(
    major: u32,
    prev: *mut DLPackExchangeAPIHeader,
    export: rsdlpack::dlpark::ffi::DLPackManagedTensorFromPyObjectNoSync,
) -> Table {
    Table(DLPackExchangeAPI {
        header: DLPackExchangeAPIHeader {
            version: DLPackVersion { major, minor: 3 },
            prev_api: prev,
        },
        managed_tensor_allocator: None,
        managed_tensor_from_py_object_no_sync: export,
        managed_tensor_to_py_object_no_sync: None,
        dltensor_from_py_object_no_sync: None,
        current_work_stream: Some(no_stream),
    })
}

/// Deleter calls of `future_tensor_and_an_exception`'s tensors.
static FUTURE_DELETES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

unsafe extern "C" fn count_future_delete(tensor: *mut DLManagedTensorVersioned) {
    // SAFETY: one of the boxes `future_tensor_and_an_exception` leaked, deleted once.
    drop(unsafe { Box::from_raw(tensor) });
    FUTURE_DELETES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// Reports success with a tensor of major version 2 and leaves an exception set.
unsafe extern "C" fn future_tensor_and_an_exception(
    _object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    // SAFETY: all-zero is a valid DLManagedTensorVersioned (null pointers, no deleter).
    let mut tensor: Box<DLManagedTensorVersioned> = Box::new(unsafe { std::mem::zeroed() });
    tensor.version = DLPackVersion { major: 2, minor: 0 };
    tensor.deleter = Some(count_future_delete);
    // SAFETY: `out` is the consumer's out-pointer; the GIL is held; a valid exception type.
    unsafe {
        *out = Box::into_raw(tensor);
        ffi::PyErr_SetString(ffi::PyExc_BufferError, c"left behind".as_ptr());
    }
    0
}

static FAILING: Table = table(1, std::ptr::null_mut(), Some(failing_export));
static FUTURE_AND_EXCEPTION: Table = table(
    1,
    std::ptr::null_mut(),
    Some(future_tensor_and_an_exception),
);
static SILENT: Table = table(1, std::ptr::null_mut(), Some(silent_failure));
static FUTURE_ALONE: Table = table(2, std::ptr::null_mut(), Some(silent_failure));
static FUTURE_WITH_OLDER: Table = table(
    2,
    &FAILING.0 as *const DLPackExchangeAPI as *mut DLPackExchangeAPIHeader,
    Some(silent_failure),
);

/// A fresh Python class (a NumPy-backed producer: `__dlpack__` returns its array's capsule)
/// whose `__dlpack_c_exchange_api__` is `api` (a table, or a Python expression).
fn producer_type<'py>(py: Python<'py>, api: Result<&'static Table, &str>) -> Bound<'py, PyAny> {
    let g = PyDict::new(py);
    match api {
        Ok(table) => {
            let pointer = NonNull::from(&table.0).cast::<c_void>();
            // SAFETY: a static table, alive for the process.
            let capsule =
                unsafe { PyCapsule::new_with_pointer(py, pointer, c"dlpack_exchange_api") };
            g.set_item("api", capsule.unwrap()).unwrap();
        }
        Err(expression) => {
            let value = py
                .eval(&CString::new(expression).unwrap(), None, None)
                .unwrap();
            g.set_item("api", value).unwrap();
        }
    }
    py.run(
        c"import numpy as np
class Producer:
    __dlpack_c_exchange_api__ = api
    def __init__(self): self.a = np.arange(3.0)
    def __dlpack__(self, **kw): return self.a.__dlpack__(**kw)
    def __dlpack_device__(self): return (1, 0)
result = Producer()",
        Some(&g),
        None,
    )
    .unwrap();
    g.get_item("result").unwrap().unwrap()
}

#[test]
fn a_producer_exception_becomes_a_producer_error_with_its_message() {
    Python::attach(|py| {
        let object = producer_type(py, Ok(&FAILING));
        match import(&object, &ImportRequest::default()) {
            Err(BridgeError::Producer { what, message }) => {
                assert!(
                    what.contains("Producer.__dlpack_c_exchange_api__"),
                    "{what}"
                );
                assert!(message.contains("BufferError"), "{message}");
                assert!(
                    message.contains("the producer cannot export this tensor"),
                    "{message}"
                );
            }
            Err(other) => panic!("expected a producer error, got {other}"),
            Ok(_) => panic!("expected a producer error, got a tensor"),
        }
        assert!(PyErr::take(py).is_none());

        let silent = producer_type(py, Ok(&SILENT));
        let message = import(&silent, &ImportRequest::default())
            .err()
            .unwrap()
            .to_string();
        assert!(
            message.contains("without setting a Python exception"),
            "{message}"
        );
    });
}

/// Found by `fuzz/fuzz_targets/exchange_api.rs`: a producer that reported success with a
/// tensor of a foreign major version and an exception set got its tensor refused, but the
/// exception stayed set after `import` returned.
#[test]
fn an_exception_left_with_a_refused_tensor_does_not_outlive_the_import() {
    Python::attach(|py| {
        let object = producer_type(py, Ok(&FUTURE_AND_EXCEPTION));
        let before = FUTURE_DELETES.load(std::sync::atomic::Ordering::SeqCst);
        let error = import(&object, &ImportRequest::default()).err().unwrap();
        assert!(
            error.to_string().contains("while reporting success"),
            "{error}"
        );
        assert!(
            PyErr::take(py).is_none(),
            "an exception outlived the import"
        );
        assert_eq!(
            FUTURE_DELETES.load(std::sync::atomic::Ordering::SeqCst),
            before + 1,
            "the refused tensor is released once"
        );
    });
}

#[test]
fn newer_major_versions_are_walked_down_prev_api_or_skipped() {
    Python::attach(|py| {
        // Major 2 alone: not understood, so __dlpack__ serves the import.
        let object = producer_type(py, Ok(&FUTURE_ALONE));
        let (result, used) = import_counted(&object, &ImportRequest::default());
        assert!(result.is_ok() && !used);
        // Major 2 whose prev_api is a major-1 table: that table is called (and fails, which
        // proves it was the one).
        let object = producer_type(py, Ok(&FUTURE_WITH_OLDER));
        let message = import(&object, &ImportRequest::default())
            .err()
            .unwrap()
            .to_string();
        assert!(
            message.contains("the producer cannot export this tensor"),
            "{message}"
        );
    });
}

#[test]
fn an_attribute_that_is_not_the_api_capsule_is_refused_by_name_and_none_opts_out() {
    Python::attach(|py| {
        let object = producer_type(py, Err("42"));
        let message = import(&object, &ImportRequest::default())
            .err()
            .unwrap()
            .to_string();
        assert!(
            message.contains("Producer.__dlpack_c_exchange_api__ is 42")
                && message.contains("dlpack_exchange_api"),
            "{message}"
        );
        let wrong_name = producer_type(py, Err("__import__('torch').Tensor.__dlpack__"));
        assert!(import(&wrong_name, &ImportRequest::default()).is_err());

        let object = producer_type(py, Err("None"));
        let (result, used) = import_counted(&object, &ImportRequest::default());
        assert!(
            result.is_ok() && !used,
            "None disables the API: __dlpack__ is used"
        );
    });
}

#[test]
fn numpy_arrays_still_go_through_dunder_dlpack() {
    Python::attach(|py| {
        let a = run(py, "result = np.arange(4.0)");
        let (result, used) = import_counted(&a, &ImportRequest::default());
        assert!(result.is_ok() && !used);
    });
}
