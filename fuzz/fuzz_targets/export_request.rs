//! The exporter's request handling: what a consumer passes to `__dlpack__(stream=,
//! max_version=, dl_device=, copy=)` and what the exporter decides.
//!
//! Two layers, one input:
//!
//! - Typed: a source (device, element type, read-only) and a typed request (stream value,
//!   `max_version` pair, `dl_device`, `copy`) go through `StreamRequest::from_value`,
//!   `VersionRequest::from_pair` and the core's pure decision `export::plan::plan_export`, which is
//!   compared with an independent model of the rules and checked for the protocol's
//!   invariants: a legacy capsule never carries READ_ONLY or a padded sub-byte type; a
//!   versioned one claims at least 1.1 for the dtype codes and the flag DLPack 1.1 added, at
//!   most the consumer's maximum and ours; `copy=False` never copies and `copy=True` always
//!   does; shared capsules never claim IS_COPIED; refusals have the right error kind.
//! - Python (when the input has a Python request): an exporter over a real buffer, in an
//!   embedded interpreter, is called with arbitrary Python values for the four keyword
//!   arguments (ints of any size, bools, floats, strings, tuples and lists of them, or passed
//!   positionally). The outcome must be what the bridge's own parsers and `plan_export` say:
//!   the same exception type, or a capsule of the planned kind whose version, flags, device,
//!   dtype, shape and data are the plan's (a copy holds the same elements). Capsules are
//!   consumed or left to their destructor; the source's owner is released exactly once.
//!
//! Plans that need the CUDA driver (stream ordering, device → host copies) must fail with
//! BufferError here, where no driver exists.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyCapsule, PyDict, PyFloat, PyList, PyString, PyTuple};
use rsdlpack::dlpark::DlpackFlags;
use rsdlpack::dlpark::ffi::{
    DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned,
    DLPackVersion,
};
use rsdlpack::export::plan::{
    Capsule, ExportPlan, ExportRequest, Memory, Source, VersionRequest, plan_export,
};
use rsdlpack::stream::StreamRequest;
use rsdlpack::{Device, DeviceKind, ElementType, ErrorKind, ImportedTensor, TensorDescriptor};
use rsdlpack_fuzz::{Dev, SmallSource, exception_for, is_padded, patterned_buffer};
use rsdlpack_python::protocol::request::{
    copy_from_python, device_from_python, stream_from_python, version_from_python,
};
use rsdlpack_python::{BridgeError, ErrorCode, Exporter};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const CURRENT_MINOR: u32 = DLPackVersion::CURRENT.minor;

/// An element type: a DLPack (code, bits) pair and the padded flag, read by the dtype table;
/// pairs it refuses become Float32.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Elem {
    Float32,
    Float16,
    Bool,
    UInt8,
    ComplexF64,
    /// fp8 codes 7..=14.
    Fp8(u8),
    /// fp6 (15, 16; 6 bits) or fp4 (17; 4 bits), padded one per byte or packed.
    SubByte {
        code: u8,
        padded: bool,
    },
    Raw {
        code: u8,
        bits: u8,
        padded: bool,
    },
}

impl Elem {
    fn element(self) -> ElementType {
        let (code, bits, padded) = match self {
            Elem::Float32 => return ElementType::Float32,
            Elem::Float16 => return ElementType::Float16,
            Elem::Bool => return ElementType::Bool,
            Elem::UInt8 => return ElementType::UInt8,
            Elem::ComplexF64 => return ElementType::ComplexF64,
            Elem::Fp8(c) => (7 + c % 8, 8, false),
            Elem::SubByte { code, padded } => {
                let code = 15 + code % 3;
                (code, if code == 17 { 4 } else { 6 }, padded)
            }
            Elem::Raw { code, bits, padded } => (code, bits, padded),
        };
        ElementType::from_dlpack(DLDataType::scalar(DLDataTypeCode(code), bits), padded)
            .unwrap_or(ElementType::Float32)
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct SourceIn {
    device: Dev,
    element: Elem,
    read_only: bool,
    /// The source says IS_COPIED (a shared export must not repeat it).
    is_copied: bool,
    /// Rank 0..=2, dims 0..=3 each.
    rank: u8,
    dims: [u8; 2],
    column_major: bool,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum StreamIn {
    Omitted,
    /// -3..=4: the sentinels and their neighbours.
    Sentinel(u8),
    Handle(u32),
    Raw(i64),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum VersionIn {
    Absent,
    /// (major 0..=2, minor 0..=4).
    Small(u8, u8),
    Raw(u32, u32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum DeviceIn {
    Absent,
    Same,
    Host(i8),
    Kind(Dev),
    Raw(u32, i32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct TypedRequest {
    stream: StreamIn,
    version: VersionIn,
    device: DeviceIn,
    copy: Option<bool>,
}

/// A Python value that is not a container.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Scalar {
    None,
    Small(i8),
    Int(i64),
    /// Beyond i64 and u64: ±(2^64 + k).
    Huge(bool, u16),
    True,
    False,
    Float(i8),
    Str,
}

/// A keyword argument's value, or its absence.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum PyArg {
    Absent,
    Scalar(Scalar),
    Tuple1(Scalar),
    Tuple2(Scalar, Scalar),
    Tuple3(Scalar, Scalar, Scalar),
    List2(Scalar, Scalar),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct PyRequest {
    stream: PyArg,
    max_version: PyArg,
    dl_device: PyArg,
    copy: PyArg,
    /// Pass `stream` positionally (the signature is keyword-only: TypeError).
    positional: bool,
    /// Consume the capsule (rename it and own its tensor) instead of dropping it unconsumed.
    consume: bool,
    /// Ask twice: two capsules over one source.
    twice: bool,
}

#[derive(Arbitrary, Debug)]
struct Input {
    source: SourceIn,
    typed: TypedRequest,
    python: Option<PyRequest>,
}

fuzz_target!(|input: Input| {
    let source = Source {
        device: input.source.device.device(),
        element: input.source.element.element(),
        read_only: input.source.read_only,
    };
    check_typed(&source, &input.typed);
    if let Some(request) = &input.python {
        check_python(&input.source, &source, request);
    }
});

fn check_typed(source: &Source, typed: &TypedRequest) {
    let stream = match typed.stream {
        StreamIn::Omitted => Ok(StreamRequest::Omitted),
        StreamIn::Sentinel(k) => StreamRequest::from_value(i64::from(k % 8) - 3),
        StreamIn::Handle(h) => StreamRequest::from_value(i64::from(h)),
        StreamIn::Raw(v) => StreamRequest::from_value(v),
    };
    let stream = match stream {
        Ok(stream) => {
            // The integer form round-trips.
            if let Some(value) = stream.to_value() {
                assert_eq!(StreamRequest::from_value(value).unwrap(), stream);
            }
            stream
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
            let _ = e.to_string();
            return;
        }
    };
    let version = match typed.version {
        VersionIn::Absent => VersionRequest::Legacy,
        VersionIn::Small(major, minor) => {
            VersionRequest::from_pair(u32::from(major % 3), u32::from(minor % 5))
        }
        VersionIn::Raw(major, minor) => VersionRequest::from_pair(major, minor),
    };
    let device = match typed.device {
        DeviceIn::Absent => None,
        DeviceIn::Same => Some(source.device),
        DeviceIn::Host(id) => Some(Device::from_dlpack(DLDevice {
            device_type: DLDeviceType::CPU,
            device_id: i32::from(id),
        })),
        DeviceIn::Kind(dev) => Some(dev.device()),
        DeviceIn::Raw(device_type, device_id) => Some(Device::from_dlpack(DLDevice {
            device_type: DLDeviceType(device_type),
            device_id,
        })),
    };
    let request = ExportRequest {
        stream,
        version,
        device,
        copy: typed.copy,
    };
    check_plan(source, &request, &plan_export(source, &request));
}

/// The max minor version a request accepts, or `None` for legacy.
fn max_minor(request: &ExportRequest) -> Option<u32> {
    match request.version {
        VersionRequest::Legacy => None,
        VersionRequest::Versioned { minor } => Some(minor),
    }
}

/// DLPack 1.1 added the fp8/fp6/fp4 dtype codes (7..=17) and IS_SUBBYTE_TYPE_PADDED.
/// The DLPack 1.x minor version that introduced the element's dtype code (fp8/fp6/fp4: 1.1;
/// kDLBcomplex: after 1.3, under 1.3).
fn needed_minor(element: ElementType) -> u32 {
    match element.to_dlpack().code.0 {
        7..=17 => 1,
        18 => 3,
        _ => 0,
    }
}

/// The rules, restated independently of `plan_export` (see its module docs): the plan or the
/// error code.
fn model(source: &Source, request: &ExportRequest) -> Result<ExportPlan, ErrorCode> {
    let kind = source.device.kind;
    let cuda = kind == DeviceKind::Cuda;
    // Memory the CUDA driver knows may be asked for on the host, as a copy; nothing else moves.
    let to_host = match request.device {
        None => false,
        Some(wanted) if wanted == source.device => false,
        Some(wanted) if kind.is_cuda() && wanted == Device::CPU => true,
        Some(_) => return Err(ErrorCode::Buffer),
    };
    let quiet = matches!(
        request.stream,
        StreamRequest::Omitted | StreamRequest::NoSync
    );
    // A CPU tensor, and a copy to the host (host memory), take no stream.
    let host_wanted = request.device == Some(Device::CPU);
    if (kind == DeviceKind::Cpu || host_wanted) && !quiet {
        return Err(ErrorCode::Invalid);
    }
    let memory = match (to_host, request.copy) {
        (true, Some(false)) => return Err(ErrorCode::Buffer),
        (true, _) if cuda => Memory::DeviceToHost,
        (true, _) => Memory::HostCopy,
        // No device copies; host copies only of host-readable memory, and only where the
        // consumer did not name a device other than the host's.
        (false, Some(true)) if cuda || !kind.host_accessible() => return Err(ErrorCode::Buffer),
        (false, Some(true)) if request.device.is_some() && kind != DeviceKind::Cpu => {
            return Err(ErrorCode::Buffer);
        }
        (false, Some(true)) => Memory::HostCopy,
        // Pinned host memory and other devices cannot honour a stream.
        (false, _)
            if !quiet
                && !matches!(
                    kind,
                    DeviceKind::Cpu | DeviceKind::Cuda | DeviceKind::CudaManaged
                ) =>
        {
            return Err(ErrorCode::Buffer);
        }
        (false, _) => Memory::Shared {
            consumer_stream: match request.stream {
                _ if !matches!(kind, DeviceKind::Cuda | DeviceKind::CudaManaged) => None,
                StreamRequest::NoSync => None,
                StreamRequest::Omitted | StreamRequest::LegacyDefault => Some(1),
                StreamRequest::PerThreadDefault => Some(2),
                StreamRequest::Handle(h) => Some(h),
            },
        },
    };
    let shared = matches!(memory, Memory::Shared { .. });
    let read_only = shared && source.read_only;
    let capsule = match max_minor(request) {
        None if read_only || is_padded(source.element) => return Err(ErrorCode::Buffer),
        None => Capsule::Legacy,
        Some(max) => {
            let claimed = max.min(CURRENT_MINOR);
            if claimed < needed_minor(source.element) {
                return Err(ErrorCode::Buffer);
            }
            Capsule::Versioned { minor: claimed }
        }
    };
    Ok(ExportPlan {
        memory,
        device: if shared { source.device } else { Device::CPU },
        read_only,
        is_copied: !shared,
        capsule,
    })
}

fn check_plan(
    source: &Source,
    request: &ExportRequest,
    plan: &Result<ExportPlan, rsdlpack::Error>,
) {
    let expected = model(source, request);
    let plan = match plan {
        Ok(plan) => plan,
        Err(e) => {
            let _ = e.to_string();
            assert_eq!(
                Err(ErrorCode::from(e.kind())),
                expected,
                "{e} for {source:?} {request:?}"
            );
            // Refusals of the capsule and of copies of device memory are the core's export
            // and device rules, with their kind.
            if matches!(
                e,
                rsdlpack::Error::LegacyCannotCarry { .. }
                    | rsdlpack::Error::VersionTooOld { .. }
                    | rsdlpack::Error::UnsupportedDevice { .. }
            ) {
                assert_eq!(e.kind(), ErrorKind::BufferRefusal, "{e}");
            }
            return;
        }
    };
    assert_eq!(Ok(*plan), expected, "{source:?} {request:?}");
    // The protocol's invariants, stated directly.
    match plan.capsule {
        Capsule::Legacy => {
            assert!(max_minor(request).is_none());
            assert!(!plan.read_only && !is_padded(source.element), "{plan:?}");
        }
        Capsule::Versioned { minor } => {
            let max = max_minor(request).expect("a versioned request");
            assert!(minor <= max && minor <= CURRENT_MINOR, "{plan:?}");
            assert!(
                minor >= needed_minor(source.element),
                "{plan:?} for {source:?}"
            );
            if is_padded(source.element) {
                assert!(minor >= 1, "{plan:?} for {source:?}");
            }
        }
    }
    match request.copy {
        Some(false) => assert!(matches!(plan.memory, Memory::Shared { .. }), "{plan:?}"),
        Some(true) => assert!(!matches!(plan.memory, Memory::Shared { .. }), "{plan:?}"),
        None => {}
    }
    match plan.memory {
        Memory::Shared { consumer_stream } => {
            assert!(!plan.is_copied);
            assert_eq!(
                (plan.device, plan.read_only),
                (source.device, source.read_only)
            );
            assert_eq!(
                consumer_stream.is_some(),
                matches!(
                    source.device.kind,
                    DeviceKind::Cuda | DeviceKind::CudaManaged
                ) && request.stream != StreamRequest::NoSync
            );
        }
        Memory::HostCopy | Memory::DeviceToHost => {
            assert!(plan.is_copied && !plan.read_only);
            assert_eq!(plan.device, Device::CPU);
        }
    }
    if let Some(wanted) = request.device {
        assert!(
            wanted == plan.device || (wanted == Device::CPU && plan.device == Device::CPU),
            "asked {wanted:?}, planned {plan:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The real `__dlpack__`, in an embedded interpreter.

/// A source tensor over a real, patterned buffer (row-major for packed sub-byte types, which
/// allow no other layout).
fn source_tensor(input: &SourceIn, source: &Source, count: &Arc<AtomicUsize>) -> ImportedTensor {
    let packed = matches!(source.element, ElementType::PackedBits { .. });
    let small = SmallSource {
        device: source.device,
        element: source.element,
        rank: input.rank,
        dims: input.dims,
        row_major: packed || !input.column_major,
        read_only: source.read_only,
        is_copied: input.is_copied,
    };
    small.over(patterned_buffer(256, 37, 0x5a), count)
}

fn scalar<'py>(py: Python<'py>, value: Scalar) -> Bound<'py, PyAny> {
    match value {
        Scalar::None => py.None().into_bound(py),
        Scalar::Small(v) => v.into_pyobject(py).unwrap().into_any(),
        Scalar::Int(v) => v.into_pyobject(py).unwrap().into_any(),
        Scalar::Huge(negative, k) => {
            let v = (1i128 << 64) + i128::from(k);
            (if negative { -v } else { v })
                .into_pyobject(py)
                .unwrap()
                .into_any()
        }
        Scalar::True => PyBool::new(py, true).to_owned().into_any(),
        Scalar::False => PyBool::new(py, false).to_owned().into_any(),
        Scalar::Float(v) => PyFloat::new(py, f64::from(v)).into_any(),
        Scalar::Str => PyString::new(py, "1").into_any(),
    }
}

fn argument<'py>(py: Python<'py>, arg: PyArg) -> Option<Bound<'py, PyAny>> {
    Some(match arg {
        PyArg::Absent => return None,
        PyArg::Scalar(s) => scalar(py, s),
        PyArg::Tuple1(a) => PyTuple::new(py, [scalar(py, a)]).unwrap().into_any(),
        PyArg::Tuple2(a, b) => PyTuple::new(py, [scalar(py, a), scalar(py, b)])
            .unwrap()
            .into_any(),
        PyArg::Tuple3(a, b, c) => PyTuple::new(py, [scalar(py, a), scalar(py, b), scalar(py, c)])
            .unwrap()
            .into_any(),
        PyArg::List2(a, b) => PyList::new(py, [scalar(py, a), scalar(py, b)])
            .unwrap()
            .into_any(),
    })
}

/// What the bridge's own parsers make of the arguments (the first error wins, in signature
/// order).
fn parse(
    stream: Option<&Bound<'_, PyAny>>,
    max_version: Option<&Bound<'_, PyAny>>,
    dl_device: Option<&Bound<'_, PyAny>>,
    copy: Option<&Bound<'_, PyAny>>,
) -> Result<ExportRequest, BridgeError> {
    Ok(ExportRequest {
        stream: stream_from_python(stream)?,
        version: version_from_python(max_version)?,
        device: device_from_python(dl_device)?,
        copy: copy_from_python(copy)?,
    })
}

fn check_python(input: &SourceIn, source: &Source, request: &PyRequest) {
    let count = Arc::new(AtomicUsize::new(0));
    Python::attach(|py| {
        let tensor = source_tensor(input, source, &count);
        let descriptor = tensor.descriptor().clone();
        let exporter = Exporter::new(tensor, None)
            .unwrap()
            .into_pyobject(py)
            .unwrap();
        let device: (u32, i32) = exporter
            .call_method0("__dlpack_device__")
            .unwrap()
            .extract()
            .unwrap();
        let dl = source.device.to_dlpack();
        assert_eq!(device, (dl.device_type.0, dl.device_id));

        let stream = argument(py, request.stream);
        let max_version = argument(py, request.max_version);
        let dl_device = argument(py, request.dl_device);
        let copy = argument(py, request.copy);
        let kwargs = PyDict::new(py);
        let mut args = Vec::new();
        if let Some(v) = &stream {
            if request.positional {
                args.push(v.clone());
            } else {
                kwargs.set_item("stream", v).unwrap();
            }
        }
        for (name, value) in [
            ("max_version", &max_version),
            ("dl_device", &dl_device),
            ("copy", &copy),
        ] {
            if let Some(v) = value {
                kwargs.set_item(name, v).unwrap();
            }
        }
        let args = PyTuple::new(py, args).unwrap();
        let expected = if request.positional && stream.is_some() {
            None // TypeError: keyword-only
        } else {
            let parsed = parse(
                stream.as_ref(),
                max_version.as_ref(),
                dl_device.as_ref(),
                copy.as_ref(),
            );
            Some(parsed.and_then(|r| {
                let plan = plan_export(source, &r);
                check_plan(source, &r, &plan);
                plan.map_err(BridgeError::from)
            }))
        };
        let calls = if request.twice { 2 } else { 1 };
        let mut capsules = Vec::new();
        for _ in 0..calls {
            let outcome = exporter.call_method("__dlpack__", &args, Some(&kwargs));
            match (&expected, outcome) {
                (None, Err(err)) => assert!(err.is_instance_of::<PyTypeError>(py), "{err}"),
                (None, Ok(_)) => panic!("a positional stream was accepted"),
                (Some(Err(e)), Err(err)) => {
                    let want = exception_for(py, e.code());
                    assert!(err.get_type(py).is(&want), "{err} but the plan said {e}");
                }
                (Some(Err(e)), Ok(c)) => panic!("__dlpack__ gave {c} but the plan said {e}"),
                (Some(Ok(plan)), Err(err)) if plan.memory.needs_driver() => {
                    assert!(!rsdlpack::cuda::driver_available());
                    assert!(
                        err.is_instance_of::<pyo3::exceptions::PyBufferError>(py),
                        "{err} for {plan:?}"
                    );
                }
                (Some(Ok(plan)), Err(err)) => panic!("__dlpack__ raised {err} for {plan:?}"),
                (Some(Ok(plan)), Ok(capsule)) => {
                    assert!(!plan.memory.needs_driver(), "{plan:?} without a driver");
                    let capsule = capsule.cast_into::<PyCapsule>().expect("a capsule");
                    check_capsule(&capsule, plan, &descriptor);
                    capsules.push(capsule);
                }
            }
        }
        for capsule in capsules {
            if request.consume {
                let owned = rsdlpack_python::protocol::capsule::consume(capsule.as_any()).unwrap();
                drop(owned);
            }
            drop(capsule);
        }
        assert_eq!(
            count.load(Ordering::SeqCst),
            0,
            "the exporter still holds the source"
        );
        drop(exporter);
        drop(kwargs);
        drop(args);
        assert!(PyErr::take(py).is_none(), "an exception was left set");
    });
    assert_eq!(
        count.load(Ordering::SeqCst),
        1,
        "the source's owner is released exactly once"
    );
}

/// The capsule holds what the plan says, over the source's memory or a faithful copy.
fn check_capsule(capsule: &Bound<'_, PyCapsule>, plan: &ExportPlan, source: &TensorDescriptor) {
    let raw = capsule.as_ptr();
    let (name, versioned) = match plan.capsule {
        Capsule::Legacy => (c"dltensor", false),
        Capsule::Versioned { .. } => (c"dltensor_versioned", true),
    };
    // SAFETY: a live object; IsValid never raises.
    assert_eq!(
        unsafe { pyo3::ffi::PyCapsule_IsValid(raw, name.as_ptr()) },
        1,
        "capsule name for {plan:?}"
    );
    // SAFETY: valid under `name`.
    let pointer = unsafe { pyo3::ffi::PyCapsule_GetPointer(raw, name.as_ptr()) };
    let (tensor, version, flags) = if versioned {
        // SAFETY: a "dltensor_versioned" capsule of ours holds a live DLManagedTensorVersioned.
        let m = unsafe { &*pointer.cast::<DLManagedTensorVersioned>() };
        (&m.dl_tensor, Some(m.version), m.flags)
    } else {
        // SAFETY: a "dltensor" capsule of ours holds a live DLManagedTensor.
        let m = unsafe { &*pointer.cast::<DLManagedTensor>() };
        (&m.dl_tensor, None, DlpackFlags::empty())
    };
    if let Capsule::Versioned { minor } = plan.capsule {
        assert_eq!(version, Some(DLPackVersion { major: 1, minor }));
        let mut want = DlpackFlags::empty();
        want.set(DlpackFlags::READ_ONLY, plan.read_only);
        want.set(DlpackFlags::IS_COPIED, plan.is_copied);
        want.set(
            DlpackFlags::IS_SUBBYTE_TYPE_PADDED,
            is_padded(source.element()),
        );
        assert_eq!(flags, want, "{plan:?}");
    }
    // SAFETY: our capsule's metadata lives as long as the capsule.
    let d = unsafe { TensorDescriptor::validate(tensor, version, flags) }
        .unwrap_or_else(|e| panic!("an exported capsule does not validate: {e}"));
    assert_eq!(d.device(), plan.device);
    assert_eq!(d.element(), source.element());
    assert_eq!(d.shape(), source.shape());
    match plan.memory {
        Memory::Shared { .. } => {
            assert_eq!(d.first_element(), source.first_element());
            assert_eq!(d.strides(), source.strides());
        }
        _ => same_elements(source, &d),
    }
}

/// Every element of `copy` equals the element of `source` at the same index.
fn same_elements(source: &TensorDescriptor, copy: &TensorDescriptor) {
    assert_ne!(
        copy.first_element(),
        source.first_element(),
        "a copy shares memory"
    );
    let size = source.element().size();
    let read = |d: &TensorDescriptor, offset: i64, len: usize| {
        let at = (d.first_element() as i64 + offset * size as i64) as *const u8;
        // SAFETY: inside the tensor's span (the index is in range), memory alive while the
        // capsule and the exporter live.
        unsafe { std::slice::from_raw_parts(at, len) }.to_vec()
    };
    if matches!(source.element(), ElementType::PackedBits { .. }) {
        let bytes = source.dense_byte_size();
        assert_eq!(read(source, 0, bytes), read(copy, 0, bytes));
        return;
    }
    for flat in 0..source.element_count() {
        let (mut rest, mut a, mut b) = (flat, 0i64, 0i64);
        for k in (0..source.ndim()).rev() {
            let n = source.shape()[k] as usize;
            let i = (rest % n) as i64;
            rest /= n;
            a += i * source.strides()[k];
            b += i * copy.strides()[k];
        }
        assert_eq!(read(source, a, size), read(copy, b, size), "element {flat}");
    }
}
