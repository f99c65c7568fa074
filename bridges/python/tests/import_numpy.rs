//! Import from the real NumPy (versioned capsules): zero-copy for every dtype and layout NumPy
//! can express, flags, errors, and the producer's deleter running exactly once.

mod common;

use common::*;
use pyo3::prelude::*;
use rsdlpack::dlpark::ffi::DLManagedTensorVersioned;
use rsdlpack::layout::{CopyPolicy, IndexOrder, LayoutPlan, plan};
use rsdlpack::{Device, DeviceKind, ElementType, TensorDescriptor};
use rsdlpack_python::{BridgeError, ErrorCode, ImportRequest, import};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

/// The numpy array's data address and its strides in elements.
fn numpy_layout(array: &Bound<'_, PyAny>) -> (usize, Vec<i64>, Vec<i64>) {
    let address: usize = array
        .getattr("ctypes")
        .unwrap()
        .getattr("data")
        .unwrap()
        .extract()
        .unwrap();
    let shape: Vec<i64> = array.getattr("shape").unwrap().extract().unwrap();
    let itemsize: i64 = array.getattr("itemsize").unwrap().extract().unwrap();
    let byte_strides: Vec<i64> = array.getattr("strides").unwrap().extract().unwrap();
    (
        address,
        shape,
        byte_strides.iter().map(|s| s / itemsize).collect(),
    )
}

#[test]
fn every_numpy_dtype_arrives_zero_copy_with_its_element_type() {
    Python::attach(|py| {
        for (name, element) in dtypes(Peer::NumPy) {
            let array = run(
                py,
                &format!("result = np.arange(12).reshape(3, 4).astype('{name}')"),
            );
            let tensor = import_default(&array);
            let (address, shape, strides) = numpy_layout(&array);
            let d = tensor.descriptor();
            assert_eq!(d.element(), element, "{name}");
            assert_eq!(d.first_element(), address, "{name}: same memory");
            assert_eq!(
                (d.shape().to_vec(), d.strides().to_vec()),
                (shape, strides),
                "{name}"
            );
            assert_eq!(d.device().kind, DeviceKind::Cpu);
            assert!(d.version().is_some(), "NumPy exports versioned capsules");
        }
    });
}

#[test]
fn every_layout_numpy_can_make_is_a_zero_copy_view() {
    let cases = [
        ("0-d", "np.array(3.5)"),
        ("C order", "np.arange(24.0).reshape(2, 3, 4)"),
        (
            "F order",
            "np.asfortranarray(np.arange(24.0).reshape(2, 3, 4))",
        ),
        (
            "transposed",
            "np.arange(24.0).reshape(2, 3, 4).transpose(2, 0, 1)",
        ),
        ("stepped", "np.arange(120.0).reshape(6, 20)[::2, 1::3]"),
        ("reversed", "np.arange(10.0)[::-1]"),
        ("reversed 2-d", "np.arange(30.0).reshape(5, 6)[::-2, ::-1]"),
        ("size-1 dims", "np.arange(6.0).reshape(1, 2, 1, 3, 1)"),
        ("offset slice", "np.arange(100.0)[7:]"),
        (
            "sliced cube",
            "np.arange(216.0).reshape(6, 6, 6)[:, ::4, ::4]",
        ),
        ("ndim 32", "np.arange(4.0).reshape((2, 2) + (1,) * 30)"),
    ];
    Python::attach(|py| {
        for (name, expression) in cases {
            let array = run(py, &format!("result = {expression}"));
            let tensor = import_default(&array);
            let (address, shape, strides) = numpy_layout(&array);
            let d = tensor.descriptor();
            assert_eq!(d.first_element(), address, "{name}");
            assert_eq!(d.shape(), shape, "{name}");
            for (k, (&s, &n)) in d.strides().iter().zip(d.shape()).enumerate() {
                assert!(n <= 1 || s == strides[k], "{name}: stride {k}");
            }
            for order in [IndexOrder::Producer, IndexOrder::Reversed] {
                let planned =
                    plan(d, order, CopyPolicy::Never).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(
                    matches!(planned, LayoutPlan::View(_)),
                    "{name}: {planned:?}"
                );
            }
        }
    });
}

/// An import's element type, address, shape, strides and read-only flag.
type Imported = (ElementType, usize, Vec<i64>, Vec<i64>, bool);

/// What an import made of `object`, or the error's kind and the producer's words (the part
/// after the type's name).
fn imported_as(object: &Bound<'_, PyAny>) -> Result<Imported, String> {
    match import(object, &ImportRequest::default()) {
        Ok(tensor) => {
            let d = tensor.descriptor();
            Ok((
                d.element(),
                d.first_element(),
                d.shape().to_vec(),
                d.strides().to_vec(),
                d.read_only(),
            ))
        }
        Err(err) => {
            let text = err.to_string();
            let words = text
                .split_once("__dlpack__")
                .map_or(text.as_str(), |(_, w)| w);
            Err(format!("code {:?}: {words}", err.code()))
        }
    }
}

#[test]
fn arrays_read_through_their_fields_are_what_their_own_dlpack_gives() {
    // A subclass inherits `ndarray.__dlpack__` but is not read through the fields.
    let layouts = [
        "base.reshape(3, 4)",
        "base.reshape(3, 4).T",
        "base.reshape(3, 4)[::2, ::-3]",
        "base.reshape(2, 2, 3).transpose(1, 2, 0)[:, 1:]",
        "base.reshape(3, 4)[1, 2, ...]",
        "base[:0]",
        "base.reshape(1, 12, 1)",
        "ro(base.reshape(4, 3))",
    ];
    Python::attach(|py| {
        let helpers = "class Sub(np.ndarray): pass\n\
                       def ro(a):\n    a = a.view(); a.flags.writeable = False; return a\n";
        for (name, _) in dtypes(Peer::NumPy) {
            for layout in layouts {
                let code = format!(
                    "{helpers}base = np.arange(12).astype('{name}')\nresult = ({layout}, ({layout}).view(Sub))"
                );
                let pair = run(py, &code);
                let (array, sub) = (pair.get_item(0).unwrap(), pair.get_item(1).unwrap());
                let before = rsdlpack_python::import::numpy::imports_through_fields();
                let direct = imported_as(&array);
                assert_eq!(
                    rsdlpack_python::import::numpy::imports_through_fields(),
                    before + 1,
                    "{name} {layout}: read through the fields"
                );
                assert_eq!(direct, imported_as(&sub), "{name} {layout}");
                assert_eq!(
                    rsdlpack_python::import::numpy::imports_through_fields(),
                    before + 1,
                    "{name} {layout}: the subclass went through __dlpack__"
                );
            }
        }
    });
}

#[test]
fn arrays_numpy_would_refuse_or_treat_specially_go_through_dlpack() {
    let cases = [
        ("byte-swapped", "np.arange(4, dtype='>f4')"),
        ("long double", "np.arange(4, dtype=np.longdouble)"),
        ("complex long double", "np.arange(4, dtype=np.clongdouble)"),
        (
            "strides not whole elements",
            "np.lib.stride_tricks.as_strided(np.zeros(16, 'f4'), (3,), (6,))",
        ),
        (
            "structured",
            "np.zeros(3, dtype=[('a', 'f4'), ('b', 'i2')])",
        ),
        ("object", "np.array([1, None], dtype=object)"),
        ("datetime", "np.arange(3).astype('datetime64[s]')"),
        ("more dims than the core takes", "np.ones((1,) * 33)"),
    ];
    Python::attach(|py| {
        for (name, expression) in cases {
            let code = format!(
                "class Sub(np.ndarray): pass\narray = {expression}\nresult = (array, array.view(Sub))"
            );
            let pair = run(py, &code);
            let (array, sub) = (pair.get_item(0).unwrap(), pair.get_item(1).unwrap());
            let before = rsdlpack_python::import::numpy::imports_through_fields();
            let answer = imported_as(&array);
            assert_eq!(
                rsdlpack_python::import::numpy::imports_through_fields(),
                before,
                "{name}: not read through the fields"
            );
            assert_eq!(answer, imported_as(&sub), "{name}: NumPy's own answer");
        }
    });
}

#[test]
fn an_array_read_through_its_fields_stays_alive_until_released() {
    Python::attach(|py| {
        let array = run(py, "result = np.arange(6.0)");
        let before = refcount(&array);
        let tensor = import_default(&array);
        assert_eq!(refcount(&array), before + 1, "the tensor holds the array");
        let address = tensor.descriptor().first_element();
        let weak = run(py, "import weakref\nresult = weakref.ref")
            .call1((&array,))
            .unwrap();
        drop(array);
        run(py, "gc.collect()\nresult = None");
        assert!(!weak.call0().unwrap().is_none(), "alive while imported");
        // SAFETY: the tensor keeps the array, and so its memory, alive.
        assert_eq!(unsafe { *(address as *const f64).add(5) }, 5.0);
        drop(tensor);
        assert!(weak.call0().unwrap().is_none(), "freed once released");
    });
}

#[test]
fn empty_arrays_plan_as_empty() {
    Python::attach(|py| {
        let array = run(py, "result = np.zeros((0, 3), dtype=np.float32)");
        let tensor = import_default(&array);
        assert_eq!(
            plan(tensor.descriptor(), IndexOrder::Producer, CopyPolicy::Never).unwrap(),
            LayoutPlan::Empty {
                dims: rsdlpack::DimVec::from_slice(&[0, 3]).unwrap()
            }
        );
    });
}

#[test]
fn broadcast_arrays_need_a_copy_and_copy_false_says_so() {
    Python::attach(|py| {
        let array = run(py, "result = np.broadcast_to(np.arange(4.0), (3, 4))");
        let tensor = import_default(&array);
        assert_eq!(tensor.descriptor().strides(), vec![0, 1]);
        let err = plan(tensor.descriptor(), IndexOrder::Producer, CopyPolicy::Never).unwrap_err();
        assert!(err.to_string().contains("zero stride"), "{err}");
        assert!(matches!(
            plan(
                tensor.descriptor(),
                IndexOrder::Producer,
                CopyPolicy::IfNeeded
            )
            .unwrap(),
            LayoutPlan::Copy { .. }
        ));
    });
}

#[test]
fn read_only_arrays_arrive_read_only() {
    Python::attach(|py| {
        let array = run(
            py,
            "result = np.arange(4.0)\nresult.flags.writeable = False",
        );
        assert!(import_default(&array).descriptor().read_only());
        let writable = run(py, "result = np.arange(4.0)");
        assert!(!import_default(&writable).descriptor().read_only());
    });
}

#[test]
fn the_deleter_runs_exactly_once_on_drop_and_on_error_paths() {
    Python::attach(|py| {
        let array = run(py, "result = np.arange(6.0)");
        let before = refcount(&array);
        let tensor = import_default(&array);
        assert!(
            refcount(&array) > before,
            "the capsule's manager holds the array"
        );
        drop(tensor);
        assert_eq!(
            refcount(&array),
            before,
            "released once, not zero or two times"
        );

        // Error after the capsule was taken: we ask for CUDA memory, and the producer ignores
        // the request and hands over NumPy's host capsule. We consume it, find the device
        // mismatch on our side, and NumPy's deleter runs (once) before the error returns.
        let liar = run(
            py,
            "class Liar:\n    capsule = None\n    def __init__(self, a): self.a = a\n    def __dlpack_device__(self): return (2, 0)\n    def __dlpack__(self, **kw):\n        Liar.capsule = self.a.__dlpack__(max_version=(1, 3))\n        return Liar.capsule\nresult = Liar",
        );
        let lying = liar.call1((&array,)).unwrap();
        let on_cuda = ImportRequest {
            device: Some(rsdlpack::Device {
                kind: DeviceKind::Cuda,
                id: 0,
            }),
            ..ImportRequest::default()
        };
        let err = import(&lying, &on_cuda)
            .err()
            .expect("a CPU tensor where CUDA was asked for");
        assert!(
            err.code() == ErrorCode::Buffer && err.to_string().contains("not the requested"),
            "{err}"
        );
        let capsule = liar.getattr("capsule").unwrap();
        assert!(
            format!("{capsule:?}").contains("used_dltensor_versioned"),
            "the error came after the capsule was consumed: {capsule:?}"
        );
        liar.setattr("capsule", py.None()).unwrap();
        drop((capsule, lying));
        assert_eq!(
            refcount(&array),
            before,
            "released once on the error path, not zero or two times"
        );

        // The producer refuses (CUDA from NumPy): nothing is leaked.
        let cuda = rsdlpack::Device {
            kind: DeviceKind::Cuda,
            id: 0,
        };
        let request = ImportRequest {
            device: Some(cuda),
            ..ImportRequest::default()
        };
        let err = import(&array, &request)
            .err()
            .expect("NumPy cannot export to CUDA");
        assert!(matches!(err, BridgeError::Producer { .. }), "{err}");
        assert_eq!(refcount(&array), before);
    });
}

#[test]
fn a_consumed_capsule_whose_tensor_fails_validation_is_released_once() {
    Python::attach(|py| {
        // A versioned capsule (no destructor: a consumer takes it) whose tensor has a
        // negative dimension, so validation fails after the capsule was renamed "used".
        let data = vec![0f32; 4];
        let count = Arc::new(AtomicUsize::new(0));
        let spec = TensorDescriptor::from_julia_layout(
            data.as_ptr() as usize,
            Device::CPU,
            ElementType::Float32,
            &[4],
            &[1],
            IndexOrder::Producer,
        )
        .unwrap();
        let owner = (data, Counted(Arc::clone(&count)));
        let raw: *mut DLManagedTensorVersioned =
            rsdlpack::export::export_versioned(&spec, owner, 3)
                .unwrap()
                .into_raw();
        // SAFETY: `raw` is ours; its shape array has one entry.
        unsafe { *(*raw).dl_tensor.shape = -4 };
        // SAFETY: a valid pointer and a 'static name; the new reference is owned by `capsule`.
        let capsule = unsafe {
            Bound::from_owned_ptr(
                py,
                pyo3::ffi::PyCapsule_New(raw.cast(), c"dltensor_versioned".as_ptr(), None),
            )
        };

        let err = import(&capsule, &ImportRequest::default())
            .err()
            .expect("a negative dimension is refused");
        assert!(
            matches!(
                &err,
                BridgeError::Core(rsdlpack::Error::NegativeDimension { .. })
            ),
            "{err}"
        );
        assert!(
            format!("{capsule:?}").contains("used_dltensor_versioned"),
            "the error came after the capsule was consumed: {capsule:?}"
        );
        assert_eq!(
            releases(&count),
            1,
            "the deleter ran once, before the error"
        );
        let again = import(&capsule, &ImportRequest::default()).err().unwrap();
        assert!(matches!(again, BridgeError::ConsumedCapsule), "{again}");
        drop(capsule);
        assert_eq!(releases(&count), 1, "and not again with the capsule");
    });
}

#[test]
fn capsules_are_consumed_once() {
    Python::attach(|py| {
        let array = run(py, "result = np.arange(3.0)");
        let before = refcount(&array);
        let capsule = array.call_method0("__dlpack__").unwrap();
        let tensor = import_default(&capsule);
        assert_eq!(tensor.descriptor().shape(), vec![3]);
        let again = import(&capsule, &ImportRequest::default())
            .err()
            .expect("second use");
        assert!(matches!(again, BridgeError::ConsumedCapsule), "{again}");
        assert!(again.to_string().contains("already consumed"));
        drop(tensor);
        drop(capsule);
        assert_eq!(refcount(&array), before);

        // Requests a capsule cannot negotiate are checked against what it holds.
        let cuda = rsdlpack::Device {
            kind: DeviceKind::Cuda,
            id: 0,
        };
        let wrong_device = array.call_method0("__dlpack__").unwrap();
        let err = import(
            &wrong_device,
            &ImportRequest {
                device: Some(cuda),
                ..ImportRequest::default()
            },
        )
        .err()
        .unwrap();
        assert!(err.code() == ErrorCode::Buffer, "{err}");
        let cpu = ImportRequest {
            device: Some(rsdlpack::Device::CPU),
            copy: Some(true),
            ..ImportRequest::default()
        };
        let right_device = array.call_method0("__dlpack__").unwrap();
        assert_eq!(
            import(&right_device, &cpu).unwrap().descriptor().shape(),
            vec![3]
        );
        drop((wrong_device, right_device));
        assert_eq!(refcount(&array), before, "released on the error path too");

        let unconsumed = array.call_method0("__dlpack__").unwrap();
        drop(unconsumed);
        assert_eq!(
            refcount(&array),
            before,
            "NumPy frees its unconsumed capsule"
        );
    });
}

#[test]
fn things_that_are_not_dlpack_are_refused_by_type_name() {
    Python::attach(|py| {
        let list = run(py, "result = [1, 2, 3]");
        let err = import(&list, &ImportRequest::default()).err().unwrap();
        assert!(err.to_string().contains("list"), "{err}");
        let capsule = run(py, "import datetime\nresult = datetime.datetime_CAPI");
        let err = import(&capsule, &ImportRequest::default()).err().unwrap();
        assert!(err.to_string().contains("not a DLPack capsule"), "{err}");
    });
}

#[test]
fn copy_requests_reach_numpy() {
    Python::attach(|py| {
        let array = run(py, "result = np.arange(6.0)");
        let (address, _, _) = numpy_layout(&array);
        let copied = import(
            &array,
            &ImportRequest {
                copy: Some(true),
                ..ImportRequest::default()
            },
        )
        .unwrap();
        assert!(copied.descriptor().is_copied());
        assert_ne!(copied.descriptor().first_element(), address);
        let shared = import(
            &array,
            &ImportRequest {
                copy: Some(false),
                ..ImportRequest::default()
            },
        )
        .unwrap();
        assert_eq!(shared.descriptor().first_element(), address);
    });
}

#[test]
fn producers_that_predate_max_version_are_asked_again_without_it() {
    Python::attach(|py| {
        let old = run(
            py,
            "class Old:\n    calls = []\n    def __init__(self, a): self.a = a\n    def __dlpack__(self, stream=None):\n        Old.calls.append(stream)\n        return self.a.__dlpack__()\n    def __dlpack_device__(self): return self.a.__dlpack_device__()\nresult = Old(np.arange(5.0))",
        );
        let tensor = import_default(&old);
        assert_eq!(tensor.descriptor().shape(), vec![5]);
        assert!(
            tensor.descriptor().version().is_none(),
            "NumPy answers a bare __dlpack__() with a legacy capsule"
        );
        let calls: Vec<Option<i64>> = old.getattr("calls").unwrap().extract().unwrap();
        assert_eq!(calls, vec![None], "called once more, without max_version");
    });
}

#[test]
fn dlpack_device_is_asked_only_for_a_stream_and_must_answer_a_tuple() {
    Python::attach(|py| {
        let odd = run(
            py,
            "class Odd:\n    asked = 0\n    def __init__(self, a): self.a = a\n    def __dlpack_device__(self):\n        Odd.asked += 1\n        return None\n    def __dlpack__(self, **kw): return self.a.__dlpack__(max_version=(1, 3))\nresult = Odd",
        );
        let array = run(py, "result = np.arange(3.0)");
        let object = odd.call1((&array,)).unwrap();
        // Without a stream the capsule alone says where the tensor is: no device query.
        import_default(&object);
        assert_eq!(odd.getattr("asked").unwrap().extract::<i64>().unwrap(), 0);
        let with_stream = ImportRequest {
            stream: rsdlpack::stream::StreamRequest::LegacyDefault,
            ..ImportRequest::default()
        };
        let err = import(&object, &with_stream)
            .err()
            .expect("None is not a device");
        assert!(
            err.code() == ErrorCode::Invalid
                && err
                    .to_string()
                    .contains("not a (device_type, device_id) tuple"),
            "{err}"
        );
        assert_eq!(odd.getattr("asked").unwrap().extract::<i64>().unwrap(), 1);
    });
}

/// `numpy.ndarray` is host memory by construction: an import that asks for the CPU does not
/// make it parse `dl_device=(1, 0)`. Seen through stand-ins whose `__dlpack__` records its
/// keywords: one that names itself `numpy.ndarray`, one that does not.
#[test]
fn numpy_arrays_are_not_asked_for_the_host_they_are_on() {
    Python::attach(|py| {
        let (ndarray_like, other, calls) = run(
            py,
            r#"
calls = []
def stand_in(module):
    def __dlpack__(self, **keywords):
        calls.append((module, sorted(keywords)))
        return self.array.__dlpack__(**keywords)
    def __init__(self):
        self.array = np.ones(3, dtype=np.float32)
    return type('ndarray', (), {'__module__': module, '__init__': __init__,
                                '__dlpack__': __dlpack__})()
result = (stand_in('numpy'), stand_in('elsewhere'), calls)
"#,
        )
        .extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>, Bound<'_, PyAny>)>()
        .unwrap();
        let on_cpu = ImportRequest {
            device: Some(Device::CPU),
            ..Default::default()
        };
        for object in [&ndarray_like, &other] {
            let tensor = import(object, &on_cpu).unwrap();
            assert_eq!(tensor.descriptor().device(), Device::CPU);
        }
        let calls: Vec<(String, Vec<String>)> = calls.extract().unwrap();
        assert_eq!(
            calls,
            [
                ("numpy".to_string(), vec!["max_version".to_string()]),
                (
                    "elsewhere".to_string(),
                    vec!["dl_device".to_string(), "max_version".to_string()]
                ),
            ]
        );
    });
}
