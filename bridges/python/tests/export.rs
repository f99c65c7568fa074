//! Export consumed by the real NumPy and JAX: same address, the whole __dlpack__ signature,
//! and the owner released exactly once (also when capsules are never consumed).

mod common;

use common::*;
use pyo3::prelude::*;
use rsdlpack::copy::AlignedBuffer;
use rsdlpack::dlpark::ffi::DLManagedTensorVersioned;
use rsdlpack::{Device, ElementType, ImportedTensor, IndexOrder, ManagedTensor, TensorDescriptor};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

/// A 64-byte aligned Float32 buffer holding 0, 1, 2, … exported with the given Julia layout.
fn aligned_tensor(
    len: usize,
    dims: &[usize],
    strides: &[isize],
    read_only: bool,
) -> (ImportedTensor, Arc<AtomicUsize>, usize) {
    let buffer = AlignedBuffer::zeroed(len * 4);
    // SAFETY: the buffer holds `len` f32s and is exclusively ours.
    let values = unsafe { std::slice::from_raw_parts_mut(buffer.as_ptr().cast::<f32>(), len) };
    for (i, v) in values.iter_mut().enumerate() {
        *v = i as f32;
    }
    let address = buffer.as_ptr() as usize;
    let count = Arc::new(AtomicUsize::new(0));
    let spec = TensorDescriptor::from_julia_layout(
        address,
        Device::CPU,
        ElementType::Float32,
        dims,
        strides,
        IndexOrder::Producer,
    )
    .unwrap()
    .with_read_only(read_only);
    let managed =
        rsdlpack::export::export_versioned(&spec, (buffer, Counted(Arc::clone(&count))), 3)
            .unwrap();
    let raw: *mut DLManagedTensorVersioned = managed.into_raw();
    // SAFETY: just built and handed over.
    let tensor =
        ImportedTensor::new(unsafe { ManagedTensor::from_versioned_raw(raw) }.unwrap()).unwrap();
    (tensor, count, address)
}

#[test]
fn numpy_consumes_at_the_same_address_and_the_owner_is_released_once() {
    Python::attach(|py| {
        let (tensor, count, address) = aligned_tensor(6, &[2, 3], &[1, 2], false);
        let g = with_exporter(
            py,
            tensor,
            "a = np.from_dlpack(exporter)\naddress = a.ctypes.data\nshape = list(a.shape)\n\
             strides = list(a.strides)\nvalues = a.tolist()\nwritable = a.flags.writeable\n\
             del a, exporter\ngc.collect()",
        );
        assert_eq!(get::<usize>(&g, "address"), address);
        assert_eq!(get::<Vec<usize>>(&g, "shape"), vec![2, 3]);
        assert_eq!(
            get::<Vec<usize>>(&g, "strides"),
            vec![4, 8],
            "Julia's column-major strides, in bytes"
        );
        assert_eq!(
            get::<Vec<Vec<f32>>>(&g, "values"),
            vec![vec![0.0, 2.0, 4.0], vec![1.0, 3.0, 5.0]]
        );
        assert!(get::<bool>(&g, "writable"));
        assert_eq!(releases(&count), 1);
    });
}

#[test]
fn jax_consumes_a_legacy_capsule_at_the_same_address() {
    Python::attach(|py| {
        let (tensor, count, address) = aligned_tensor(12, &[4, 3], &[3, 1], false);
        let g = with_exporter(
            py,
            tensor,
            "import jax, jax.dlpack\nx = jax.dlpack.from_dlpack(exporter)\naddress = x.unsafe_buffer_pointer()\n\
             values = np.asarray(x).tolist()\ndel x, exporter\ngc.collect()",
        );
        assert_eq!(
            get::<usize>(&g, "address"),
            address,
            "64-byte aligned row-major: JAX shares"
        );
        assert_eq!(get::<Vec<Vec<f32>>>(&g, "values")[1], vec![3.0, 4.0, 5.0]);
        assert_eq!(releases(&count), 1);
    });
}

#[test]
fn unconsumed_capsules_are_freed_and_the_source_outlives_them() {
    Python::attach(|py| {
        let (tensor, count, _) = aligned_tensor(4, &[4], &[1], false);
        let g = with_exporter(
            py,
            tensor,
            "v = exporter.__dlpack__(max_version=(1, 3))\nl = exporter.__dlpack__()\n\
             names = [repr(v).split('\"')[1], repr(l).split('\"')[1]]\ndel v, l\ngc.collect()",
        );
        assert_eq!(
            get::<Vec<String>>(&g, "names"),
            vec!["dltensor_versioned", "dltensor"]
        );
        assert_eq!(releases(&count), 0, "the exporter still holds the source");
        g.del_item("exporter").unwrap();
        assert_eq!(releases(&count), 1);
    });
}

#[test]
fn the_dlpack_signature_is_honoured() {
    Python::attach(|py| {
        let (tensor, _, address) = aligned_tensor(6, &[6], &[1], false);
        let g = with_exporter(
            py,
            tensor,
            "def error(**kw):\n    try:\n        exporter.__dlpack__(**kw)\n        return None\n    except Exception as e:\n        return type(e).__name__ + ': ' + str(e)\n\
             device = list(exporter.__dlpack_device__())\n\
             copied = np.from_dlpack(exporter, copy=True)\ncopy_address = copied.ctypes.data\ncopy_values = copied.tolist()\n\
             same = np.from_dlpack(exporter, copy=False).ctypes.data\n\
             on_cpu = np.from_dlpack(exporter, device='cpu').ctypes.data\n\
             errors = [error(dl_device=(2, 0)), error(stream=0, max_version=(1, 3)), error(stream=5), error(copy='yes'), error(max_version='1.3')]",
        );
        assert_eq!(get::<Vec<i64>>(&g, "device"), vec![1, 0]);
        assert_ne!(get::<usize>(&g, "copy_address"), address);
        assert_eq!(
            get::<Vec<f32>>(&g, "copy_values"),
            vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        );
        assert_eq!(get::<usize>(&g, "same"), address);
        assert_eq!(get::<usize>(&g, "on_cpu"), address);
        let errors: Vec<String> = get(&g, "errors");
        assert!(
            errors[0].starts_with("BufferError") && errors[0].contains("dl_device"),
            "{errors:?}"
        );
        assert!(
            errors[1].starts_with("ValueError") && errors[1].contains("stream=0"),
            "{errors:?}"
        );
        assert!(
            errors[2].starts_with("ValueError") && errors[2].contains("CPU"),
            "{errors:?}"
        );
        assert!(
            errors[3].starts_with("ValueError") && errors[3].contains("copy"),
            "{errors:?}"
        );
        assert!(
            errors[4].starts_with("ValueError") && errors[4].contains("max_version"),
            "{errors:?}"
        );
    });
}

/// `__dlpack__` remembers the last keyword names and `max_version` tuple it saw: calls that
/// alternate them get the answer for their own arguments, and wrong calls are named.
#[test]
fn every_call_is_answered_for_its_own_arguments() {
    Python::attach(|py| {
        let (tensor, count, _) = aligned_tensor(4, &[4], &[1], false);
        let g = with_exporter(
            py,
            tensor,
            r#"
import inspect
def name(capsule):
    return repr(capsule).split('"')[1]
def error(*args, **kw):
    try:
        exporter.__dlpack__(*args, **kw)
        return None
    except TypeError as e:
        return str(e)
v13, v09 = (1, 3), (0, 9)
names = [
    name(exporter.__dlpack__(max_version=v13)),
    name(exporter.__dlpack__(max_version=v09)),
    name(exporter.__dlpack__(max_version=v13)),
    name(exporter.__dlpack__(copy=None, max_version=v09)),
    name(exporter.__dlpack__(max_version=v13, copy=None)),
    name(exporter.__dlpack__()),
    name(exporter.__dlpack__(**{'max_version': (1, 1)})),
]
everything = {'copy': None, 'stream': None, 'dl_device': None, 'extra': 1}
errors = [error(None), error(device=1), error(max_version=v13, **everything)]
signature = str(inspect.signature(exporter.__dlpack__))
del exporter
gc.collect()
"#,
        );
        let (versioned, legacy) = ("dltensor_versioned", "dltensor");
        assert_eq!(
            get::<Vec<String>>(&g, "names"),
            [
                versioned, legacy, versioned, legacy, versioned, legacy, versioned
            ]
        );
        let errors: Vec<String> = get(&g, "errors");
        assert!(errors[0].contains("positional"), "{errors:?}");
        assert!(
            errors[1].contains("unexpected keyword argument 'device'"),
            "{errors:?}"
        );
        assert!(
            errors[2].contains("unexpected keyword argument 'extra'"),
            "{errors:?}"
        );
        assert_eq!(
            get::<String>(&g, "signature"),
            "(*, stream=None, max_version=None, dl_device=None, copy=None)"
        );
        assert_eq!(releases(&count), 1);
    });
}

#[test]
fn read_only_tensors_export_read_only_and_refuse_legacy_consumers() {
    Python::attach(|py| {
        let (tensor, _, _) = aligned_tensor(3, &[3], &[1], true);
        let g = with_exporter(
            py,
            tensor,
            "writable = np.from_dlpack(exporter).flags.writeable\n\
             try:\n    exporter.__dlpack__()\n    legacy = None\nexcept BufferError as e:\n    legacy = str(e)",
        );
        assert!(!get::<bool>(&g, "writable"));
        let legacy: String = get(&g, "legacy");
        assert!(legacy.contains("read-only"), "{legacy}");
    });
}

#[test]
fn a_byte_offset_is_honoured_both_ways() {
    Python::attach(|py| {
        let (tensor, _, address) = aligned_tensor(8, &[8], &[1], false);
        let raw: *mut DLManagedTensorVersioned = match tensor.into_managed() {
            ManagedTensor::Versioned(m) => m.into_raw(),
            ManagedTensor::Legacy(_) => unreachable!(),
        };
        // SAFETY: a live tensor we own; moving 12 bytes from data into byte_offset keeps the
        // first element where it was... then we move it forward by 3 elements.
        unsafe {
            (*raw).dl_tensor.byte_offset = 12;
            *(*raw).dl_tensor.shape = 5;
        }
        // SAFETY: handed over.
        let shifted =
            ImportedTensor::new(unsafe { ManagedTensor::from_versioned_raw(raw) }.unwrap())
                .unwrap();
        assert_eq!(shifted.descriptor().first_element(), address + 12);
        let g = with_exporter(
            py,
            shifted,
            "a = np.from_dlpack(exporter)\naddress = a.ctypes.data\nvalues = a.tolist()",
        );
        assert_eq!(get::<usize>(&g, "address"), address + 12);
        assert_eq!(get::<Vec<f32>>(&g, "values"), vec![3.0, 4.0, 5.0, 6.0, 7.0]);
    });
}

#[test]
fn python_tensors_round_trip_through_the_exporter() {
    Python::attach(|py| {
        let array = run(py, "result = np.arange(12.0).reshape(3, 4)[:, ::2]");
        let before = refcount(&array);
        let tensor = rsdlpack_python::python::release::forward(import_default(&array)).unwrap();
        // SAFETY: the forwarded tensor is ours to hand over.
        let owned = ImportedTensor::new(
            unsafe { ManagedTensor::from_versioned_raw(tensor.into_raw()) }.unwrap(),
        )
        .unwrap();
        let g = with_exporter(py, owned, "");
        g.set_item("original", &array).unwrap();
        py.run(c"b = np.from_dlpack(exporter)\nsame = b.ctypes.data == original.ctypes.data and b.strides == original.strides\ndel b, exporter\ngc.collect()", Some(&g), None).unwrap();
        assert!(get::<bool>(&g, "same"));
        g.del_item("original").unwrap();
        assert_eq!(
            refcount(&array),
            before,
            "NumPy's deleter ran once, under the GIL"
        );
    });
}

#[test]
fn shared_capsules_never_claim_a_private_copy() {
    Python::attach(|py| {
        // A source the producer copied for us (IS_COPIED) ...
        let array = run(py, "result = np.arange(4.0)");
        let request = rsdlpack_python::ImportRequest {
            copy: Some(true),
            ..Default::default()
        };
        let copied = rsdlpack_python::import(&array, &request).unwrap();
        assert!(copied.descriptor().is_copied());
        let forwarded = rsdlpack_python::python::release::forward(copied).unwrap();
        // SAFETY: the forwarded tensor is ours to hand over.
        let owned = ImportedTensor::new(
            unsafe { ManagedTensor::from_versioned_raw(forwarded.into_raw()) }.unwrap(),
        )
        .unwrap();
        let g = with_exporter(
            py,
            owned,
            "first = exporter.__dlpack__(max_version=(1, 3))\nsecond = exporter.__dlpack__(max_version=(1, 3))",
        );
        // ... is shared by every capsule, so none of them may say IS_COPIED.
        for name in ["first", "second"] {
            let capsule = g.get_item(name).unwrap().unwrap();
            let tensor = import_default(&capsule);
            assert!(!tensor.descriptor().is_copied(), "{name}");
        }
    });
}

#[test]
fn the_source_outlives_the_exporter_while_any_capsule_of_it_lives() {
    Python::attach(|py| {
        let (tensor, count, address) = aligned_tensor(4, &[4], &[1], false);
        // `a` takes the exporter's slot, `b` (made while `a` lives) a header of its own, `c` the
        // slot again once `a` is gone; the exporter object goes first.
        let g = with_exporter(
            py,
            tensor,
            "a = np.from_dlpack(exporter)\nb = np.from_dlpack(exporter)\ndel exporter\ngc.collect()\n\
             first = [a.ctypes.data, b.ctypes.data]",
        );
        assert_eq!(get::<Vec<usize>>(&g, "first"), vec![address, address]);
        assert_eq!(releases(&count), 0, "both capsules hold the source");
        g.del_item("a").unwrap();
        assert_eq!(releases(&count), 0, "b still holds it");
        g.del_item("b").unwrap();
        assert_eq!(releases(&count), 1, "released once, by the last holder");

        let (tensor, count, _) = aligned_tensor(4, &[4], &[1], false);
        let g = with_exporter(
            py,
            tensor,
            "a = np.from_dlpack(exporter)\ndel a\nc = np.from_dlpack(exporter)\nd = np.from_dlpack(exporter)\n\
             del exporter, c\ngc.collect()",
        );
        assert_eq!(releases(&count), 0, "d holds the source");
        g.del_item("d").unwrap();
        assert_eq!(releases(&count), 1);
    });
}

#[test]
fn the_exporter_type_is_made_by_this_library_only() {
    Python::attach(|py| {
        let (tensor, count, _) = aligned_tensor(4, &[2, 2], &[1, 2], true);
        let g = with_exporter(
            py,
            tensor,
            "t = type(exporter)\nname = t.__module__ + '.' + t.__qualname__\ntext = repr(exporter)\n\
             def refused(make):\n    try:\n        make()\n        return None\n    except TypeError as e:\n        return str(e)\n\
             made = [refused(t), refused(lambda: object.__new__(t)), refused(lambda: type('Sub', (t,), {}))]\n\
             import copy\ncopied = refused(lambda: copy.copy(exporter))\ndel t",
        );
        assert_eq!(get::<String>(&g, "name"), "rsdlpack.DLPackTensor");
        let text = get::<String>(&g, "text");
        assert!(
            text.starts_with("rsdlpack.DLPackTensor(shape=[2, 2], strides=[1, 2], dtype=Float32")
                && text.ends_with("read_only=true)"),
            "{text}"
        );
        for refusal in get::<Vec<Option<String>>>(&g, "made") {
            assert!(refusal.is_some(), "Python made or subclassed an exporter");
        }
        assert!(
            get::<Option<String>>(&g, "copied").is_some(),
            "copy.copy made one"
        );
        g.del_item("exporter").unwrap();
        assert_eq!(releases(&count), 1);
    });
}

#[test]
fn the_last_holder_may_let_go_on_a_thread_without_the_gil() {
    Python::attach(|py| {
        let (tensor, count, _) = aligned_tensor(4, &[4], &[1], false);
        let g = with_exporter(py, tensor, "");
        let exporter = g.get_item("exporter").unwrap().unwrap();
        // Our own import takes the capsule's tensor (the slot's), whose deleter is the exporter's.
        let imported = import_default(&exporter);
        drop(exporter);
        g.del_item("exporter").unwrap();
        assert_eq!(releases(&count), 0, "the import holds the source");
        // This thread keeps the GIL while the other drops the import: the deleter must not need
        // it.
        std::thread::spawn(move || drop(imported)).join().unwrap();
        assert_eq!(releases(&count), 1, "released by the other thread, once");
    });
}
