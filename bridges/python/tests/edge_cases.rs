//! Protocol edge cases (issue #10) against the real NumPy: misaligned tensors, device types
//! DLPack does not define, what a legacy or an older versioned consumer can be given, and the
//! error kinds each failure carries to Python.

mod common;

use common::*;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rsdlpack::dlpark::ffi::{DLDevice, DLDeviceType, DLPackVersion};
use rsdlpack::layout::{CopyPolicy, CopyReason, LayoutPlan, plan};
use rsdlpack::{Device, ElementType, ErrorKind, ImportedTensor, IndexOrder, ManagedTensor};
use rsdlpack_python::{BridgeError, ErrorCode, Exporter, ImportRequest, import};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

/// A Rust-owned one-dimensional tensor of `len` elements over zeroed bytes, with any element
/// type and device, as an `ImportedTensor`, and its release counter.
fn owned_tensor(
    element: ElementType,
    device: Device,
    len: usize,
) -> (ImportedTensor, Arc<AtomicUsize>) {
    let (tensor, count, _) =
        owned_tensor_over(vec![0u64; len.max(1)], device, element, &[len], &[1]);
    (tensor, count)
}

const MISALIGNED_ARRAY: &str = "buffer = bytearray(8 * 6 + 1)\n\
    result = np.frombuffer(buffer, dtype=np.float64, offset=1, count=6).reshape(2, 3)\n\
    result[...] = np.arange(6.0).reshape(2, 3) + 0.5\n\
    assert not result.flags.aligned";

#[test]
fn a_misaligned_numpy_array_imports_and_the_planner_copies_it() {
    Python::attach(|py| {
        let array = run(py, MISALIGNED_ARRAY);
        let address: usize = array
            .getattr("ctypes")
            .unwrap()
            .getattr("data")
            .unwrap()
            .extract()
            .unwrap();
        let tensor = import(&array, &ImportRequest::default())
            .expect("misalignment is not a validation error");
        let d = tensor.descriptor();
        assert_eq!(
            d.first_element(),
            address,
            "zero-copy import: the producer's memory"
        );
        assert_eq!(address % 8, 1);
        assert!(!d.is_aligned());

        let planned = plan(d, IndexOrder::Producer, CopyPolicy::IfNeeded).unwrap();
        assert!(
            matches!(&planned, LayoutPlan::Copy { reason, .. } if *reason == CopyReason::Misaligned),
            "{planned:?}"
        );
        let refused = plan(d, IndexOrder::Producer, CopyPolicy::Never).unwrap_err();
        assert!(
            matches!(refused, rsdlpack::Error::Misaligned { align: 8, .. }),
            "{refused:?}"
        );
        assert!(refused.to_string().contains("misaligned"), "{refused}");
        let bridged = BridgeError::from(refused);
        assert_eq!(bridged.code(), ErrorCode::Buffer);

        // SAFETY: NumPy's memory, alive while `tensor` is, and nobody writes it.
        let copy = unsafe { rsdlpack::copy::materialize(d, IndexOrder::Producer) }.unwrap();
        let values: Vec<f64> = copy
            .as_slice()
            .chunks_exact(8)
            .map(|c| f64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(
            values,
            vec![0.5, 3.5, 1.5, 4.5, 2.5, 5.5],
            "column-major copy of [[0.5, 1.5, 2.5], [3.5, 4.5, 5.5]]"
        );
    });
}

/// `__dlpack__` of a misaligned tensor shares it as it is: the consumer reads the address and
/// decides (NumPy wraps it, flagged unaligned); `copy=True` gives an aligned copy.
#[test]
fn a_misaligned_tensor_is_exported_truthfully() {
    Python::attach(|py| {
        let array = run(py, MISALIGNED_ARRAY);
        let tensor = rsdlpack_python::python::release::forward(import_default(&array)).unwrap();
        // SAFETY: the forwarded tensor is ours to hand over.
        let owned = ImportedTensor::new(
            unsafe { ManagedTensor::from_versioned_raw(tensor.into_raw()) }.unwrap(),
        )
        .unwrap();
        let g = with_exporter(
            py,
            owned,
            "view = np.from_dlpack(exporter)\naddress = view.ctypes.data\naligned = view.flags.aligned\n\
             values = view.tolist()\ncopy = np.from_dlpack(exporter, copy=True)\n\
             copy_aligned = copy.flags.aligned and copy.ctypes.data % 64 == 0\ncopy_values = copy.tolist()",
        );
        let address: usize = array
            .getattr("ctypes")
            .unwrap()
            .getattr("data")
            .unwrap()
            .extract()
            .unwrap();
        assert_eq!(get::<usize>(&g, "address"), address);
        assert!(!get::<bool>(&g, "aligned"));
        let expected = vec![vec![0.5, 1.5, 2.5], vec![3.5, 4.5, 5.5]];
        assert_eq!(get::<Vec<Vec<f64>>>(&g, "values"), expected);
        assert!(get::<bool>(&g, "copy_aligned"));
        assert_eq!(get::<Vec<Vec<f64>>>(&g, "copy_values"), expected);
    });
}

fn device_of_type(device_type: u32) -> Device {
    Device::from_dlpack(DLDevice {
        device_type: DLDeviceType(device_type),
        device_id: 0,
    })
}

#[test]
fn device_type_zero_and_unknown_types_are_refused_at_the_border_unless_opted_in() {
    Python::attach(|py| {
        for device_type in [0u32, 99] {
            let (tensor, count) =
                owned_tensor(ElementType::Float32, device_of_type(device_type), 4);
            let owner = Exporter::new(tensor, None)
                .unwrap()
                .into_pyobject(py)
                .unwrap();
            let exporter = &owner;
            let err = import(exporter, &ImportRequest::default())
                .err()
                .expect("refused");
            assert!(
                matches!(
                    &err,
                    BridgeError::Core(rsdlpack::Error::UnknownDeviceType { device_type: t, .. })
                        if *t == device_type
                ),
                "{err:?}"
            );
            assert_eq!(err.code(), ErrorCode::Buffer);
            assert!(
                err.to_string()
                    .starts_with(&format!("device type {device_type} ")),
                "{err}"
            );
            // A bare capsule is checked the same way.
            let capsule = exporter
                .call_method1("__dlpack__", ())
                .expect("the exporter itself does not judge device types");
            assert!(import(&capsule, &ImportRequest::default()).is_err());

            let opted_in = ImportRequest {
                accept_unknown_device_types: true,
                ..ImportRequest::default()
            };
            let taken = import(exporter, &opted_in).expect("the caller opted in");
            assert_eq!(
                taken.descriptor().device().to_dlpack().device_type.0,
                device_type
            );
            drop((taken, capsule));
            assert_eq!(releases(&count), 0, "the exporter still holds the source");
            drop(owner);
            assert_eq!(
                releases(&count),
                1,
                "refused imports released their tensors: the source goes with the exporter"
            );
        }
    });
}

#[test]
fn legacy_consumers_are_refused_padded_subbyte_tensors_with_the_way_out() {
    Python::attach(|py| {
        let (tensor, _) = owned_tensor(ElementType::RawBytes { code: 17, bits: 4 }, Device::CPU, 4);
        let g = with_exporter(
            py,
            tensor,
            "legacy = error()\nversioned = error(max_version=(1, 1))",
        );
        let legacy: String = get(&g, "legacy");
        assert!(legacy.starts_with("BufferError"), "{legacy}");
        assert!(
            legacy.contains("IS_SUBBYTE_TYPE_PADDED")
                && legacy.contains("ask with max_version=(1, x)"),
            "{legacy}"
        );
        assert!(g.get_item("versioned").unwrap().unwrap().is_none());
    });
}

/// The minor version a versioned capsule claims: what `__dlpack__(max_version=…)` returned.
fn claimed_version(capsule: &Bound<'_, PyAny>) -> DLPackVersion {
    let tensor = import(capsule, &ImportRequest::default()).unwrap();
    tensor.descriptor().version().expect("a versioned capsule")
}

#[test]
fn versioned_exports_claim_their_features_and_respect_max_version() {
    Python::attach(|py| {
        let (fp8, _) = owned_tensor(ElementType::RawBytes { code: 10, bits: 8 }, Device::CPU, 4);
        let exporter = Exporter::new(fp8, None).unwrap().into_pyobject(py).unwrap();
        let ask = |major: u32, minor: u32| {
            let kw = PyDict::new(py);
            kw.set_item("max_version", (major, minor)).unwrap();
            exporter.call_method("__dlpack__", (), Some(&kw))
        };
        let too_old = ask(1, 0).expect_err("fp8 needs DLPack 1.1");
        assert!(too_old.is_instance_of::<pyo3::exceptions::PyBufferError>(py));
        let message = too_old.to_string();
        assert!(
            message.contains("1.1") && message.contains("max_version=(1, 1)"),
            "{message}"
        );
        assert_eq!(claimed_version(&ask(1, 1).unwrap()).minor, 1);
        assert_eq!(claimed_version(&ask(1, 3).unwrap()).minor, 3);
        assert_eq!(
            claimed_version(&ask(1, 7).unwrap()).minor,
            DLPackVersion::CURRENT.minor,
            "never more than this library implements"
        );

        let (plain, _) = owned_tensor(ElementType::Float32, Device::CPU, 4);
        let exporter = Exporter::new(plain, None)
            .unwrap()
            .into_pyobject(py)
            .unwrap();
        let kw = PyDict::new(py);
        kw.set_item("max_version", (1, 0)).unwrap();
        let capsule = exporter.call_method("__dlpack__", (), Some(&kw)).unwrap();
        assert_eq!(
            claimed_version(&capsule),
            DLPackVersion { major: 1, minor: 0 },
            "a 1.0 consumer gets a 1.0 tensor"
        );
    });
}

#[test]
fn each_error_code_raises_its_python_exception() {
    Python::attach(|py| {
        // A broadcast of 2^57 float64s: 2^60 bytes to copy, more than any address space.
        let array = run(py, "result = np.broadcast_to(np.zeros(1), (2**57,))");
        let tensor = rsdlpack_python::python::release::forward(import_default(&array)).unwrap();
        // SAFETY: the forwarded tensor is ours to hand over.
        let owned = ImportedTensor::new(
            unsafe { ManagedTensor::from_versioned_raw(tensor.into_raw()) }.unwrap(),
        )
        .unwrap();
        let g = with_exporter(
            py,
            owned,
            "resource = error(copy=True, max_version=(1, 3))\nbuffer = error(dl_device=(2, 0))\n\
             invalid = error(stream=0)",
        );
        let resource: String = get(&g, "resource");
        assert!(
            resource.starts_with("MemoryError") && resource.contains("cannot allocate"),
            "{resource}"
        );
        assert!(get::<String>(&g, "buffer").starts_with("BufferError"));
        assert!(get::<String>(&g, "invalid").starts_with("ValueError"));
    });
    for (kind, code) in [
        (ErrorKind::InvalidInput, 1),
        (ErrorKind::BufferRefusal, 2),
        (ErrorKind::Resource, 5),
        (ErrorKind::Internal, 99),
    ] {
        assert_eq!(ErrorCode::from(kind) as i32, code, "{kind:?}");
    }
    assert_eq!(ErrorCode::NotDlpack as i32, 3);
    assert_eq!(ErrorCode::Producer as i32, 4);
    assert_eq!(ErrorCode::Declined as i32, 8);
}
