//! The DLPack 1.3 C exchange API, both sides, in an embedded CPython.
//!
//! Producer: the five functions of `rsdlpack.DLPackTensor.__dlpack_c_exchange_api__` (found on
//! the type, as consumers find it) are called with hostile arguments: null pointers; objects
//! that are not exporters; exporters of read-only, padded sub-byte, CUDA and unknown-device
//! tensors; foreign managed tensors of any version, flags, rank, shape, strides, dtype, device
//! and data (with and without a deleter) handed to `managed_tensor_to_py_object_no_sync`;
//! allocator prototypes with any ndim (a shape array of exactly that length, or a short one
//! when ndim is out of range), shape, dtype and device, with and without `set_error`; any
//! device type and id for `current_work_stream`. Exporters made by one call are used by later
//! ones (their `__dlpack__`, their C API, an import through it).
//!
//! Consumer: `rsdlpack_python::import` of instances of Python classes whose
//! `__dlpack_c_exchange_api__` is a capsule over one of a fixed set of static tables (major
//! versions 0..=3 and u32::MAX, `prev_api` chains including a cycle, null function pointers)
//! or something else (None, an int, a wrongly named capsule, no attribute, a metaclass property
//! that raises). The tables' functions play a script from the input: a fuzz-built tensor, a
//! null one, a failure with or without a Python exception, success with an exception left set.
//!
//! Invariants: no panic or crash (libfuzzer-sys aborts on any panic, caught ones included, so
//! a panic caught at the C boundary counts); the Python-side functions return 0 with no
//! exception set or -1 with one set, of the type the error's kind gives (never RuntimeError,
//! which is what a caught panic becomes); the allocator returns -1 iff it calls `set_error` once
//! (when given); successes are what they claim (managed tensors validate and restate the
//! exporter's tensor, version 1.3 and its flags; a `DLTensor` view restates it; allocations are
//! zeroed, 64-byte aligned, row-major, of the prototype's shape and dtype);
//! `managed_tensor_to_py_object_no_sync` succeeds exactly when the tensor is a valid 1.x
//! tensor; every deleter runs exactly once (counted, by the end of the input; on error paths,
//! before the function returns); a source exporter's owner is released exactly once; imports
//! call the table's export function exactly when a usable major-1 table exists, turn its
//! failures into producer errors, leave no exception set, and restate the tensor they got.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyType};
use rsdlpack::copy::AlignedBuffer;
use rsdlpack::dlpark::DlpackFlags;
use rsdlpack::dlpark::ffi::{
    DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLManagedTensorVersioned,
    DLPackExchangeAPI, DLPackExchangeAPIHeader, DLPackVersion, DLTensor,
};
use rsdlpack::stream::StreamRequest;
use rsdlpack::{Device, DeviceKind, ElementType, ImportedTensor, ManagedTensor, TensorDescriptor};
use rsdlpack_fuzz::{SmallSource, dlpack_flags, exception_for, is_padded, patterned_buffer};
use rsdlpack_python::import::exchange_api::imports_through_c_api;
use rsdlpack_python::{ErrorCode, Exporter, ImportRequest, exporter_type, import};
use std::cell::RefCell;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr::{NonNull, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Most operations one input runs.
const MAX_OPS: usize = 6;
/// Largest span a foreign tensor's real buffer covers.
const REAL_SPAN_LIMIT: i64 = 1 << 14;
/// Largest dense copy of a foreign tensor that operations may ask for.
const COPY_LIMIT: usize = 1 << 18;

// ---------------------------------------------------------------------------------------------
// Input.

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Wide {
    Small(i8),
    Medium(i16),
    Min,
    Max,
    Pow(u8),
    Raw(i64),
}

impl Wide {
    fn value(self) -> i64 {
        match self {
            Wide::Small(v) => i64::from(v),
            Wide::Medium(v) => i64::from(v),
            Wide::Min => i64::MIN,
            Wide::Max => i64::MAX,
            Wide::Pow(k) => 1i64.wrapping_shl(u32::from(k % 64)),
            Wide::Raw(v) => v,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Dim {
    Small(u8),
    Any(Wide),
}

impl Dim {
    fn value(self) -> i64 {
        match self {
            Dim::Small(v) => i64::from(v % 5),
            Dim::Any(w) => w.value(),
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Rank {
    /// 0..=4.
    Usual(u8),
    /// 5..=40: past `MAX_NDIM` (32) too.
    Large(u8),
    Negative(i8),
    Raw(i32),
}

impl Rank {
    fn ndim(self) -> i32 {
        match self {
            Rank::Usual(v) => i32::from(v % 5),
            Rank::Large(v) => 5 + i32::from(v % 36),
            Rank::Negative(v) => -1 - i32::from(v.unsigned_abs()),
            Rank::Raw(v) => v,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Dtype {
    F32,
    F64,
    U8,
    Bool,
    C64,
    BF16,
    Fp8,
    Fp4,
    Fp6,
    Other { code: u8, bits: u8, lanes: u16 },
}

impl Dtype {
    fn to_dlpack(self) -> DLDataType {
        let scalar = DLDataType::scalar;
        match self {
            Dtype::F32 => scalar(DLDataTypeCode::FLOAT, 32),
            Dtype::F64 => scalar(DLDataTypeCode::FLOAT, 64),
            Dtype::U8 => scalar(DLDataTypeCode::UINT, 8),
            Dtype::Bool => scalar(DLDataTypeCode::BOOL, 8),
            Dtype::C64 => scalar(DLDataTypeCode::COMPLEX, 64),
            Dtype::BF16 => scalar(DLDataTypeCode::BFLOAT, 16),
            Dtype::Fp8 => scalar(DLDataTypeCode::FLOAT8_E4M3FN, 8),
            Dtype::Fp4 => scalar(DLDataTypeCode::FLOAT4_E2M1FN, 4),
            Dtype::Fp6 => scalar(DLDataTypeCode::FLOAT6_E2M3FN, 6),
            Dtype::Other { code, bits, lanes } => {
                DLDataType::new(DLDataTypeCode(code), bits, lanes)
            }
        }
    }
}

/// The shared device kinds ([`rsdlpack_fuzz::Dev`]) and any raw type and id. Its own enum, not
/// a wrapper of the shared one: the variants in this order are how the corpus encodes it.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Dev {
    Cpu,
    Cuda(u8),
    CudaHost,
    CudaManaged,
    Other(u8),
    Raw(u32, i32),
}

impl Dev {
    fn to_dlpack(self) -> DLDevice {
        use rsdlpack_fuzz::Dev as Kind;
        let kind = match self {
            Dev::Cpu => Kind::Cpu,
            Dev::Cuda(id) => Kind::Cuda(id),
            Dev::CudaHost => Kind::CudaHost,
            Dev::CudaManaged => Kind::CudaManaged,
            Dev::Other(t) => Kind::Other(t),
            Dev::Raw(t, device_id) => {
                return DLDevice {
                    device_type: DLDeviceType(t),
                    device_id,
                };
            }
        };
        kind.to_dlpack()
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Version {
    Current,
    /// 1.(0..=4).
    Minor(u8),
    Raw(u32, u32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Data {
    /// A real buffer covering exactly the tensor's span (when it validates, is host memory and
    /// spans at most 16 KiB; otherwise a fake address).
    Real,
    Null,
    Fake(u64),
}

/// A managed tensor someone else made.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct Foreign {
    version: Version,
    /// READ_ONLY, IS_COPIED, IS_SUBBYTE_TYPE_PADDED (low three bits).
    flags: u8,
    unknown_flag: Option<u8>,
    rank: Rank,
    dims: [Dim; 4],
    strides: [Wide; 4],
    null_shape: bool,
    null_strides: bool,
    dtype: Dtype,
    device: Dev,
    data: Data,
    byte_offset: u8,
    deleter: bool,
}

/// The exporter every input starts with, over a real buffer.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct SourceIn {
    device: Dev,
    dtype: Dtype,
    read_only: bool,
    rank: u8,
    dims: [u8; 2],
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Object {
    Null,
    /// An exporter from the pool (index modulo its length).
    Exporter(u8),
    NotExporter(u8),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum StreamIn {
    Omitted,
    Sentinel(u8),
    Handle(u32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct Request {
    stream: StreamIn,
    device: Option<Dev>,
    copy: Option<bool>,
    accept_unknown_device_types: bool,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Raise {
    No,
    BufferError,
    TypeError,
    KeyboardInterrupt,
}

/// What a fake producer's `managed_tensor_from_py_object_no_sync` does.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum ExportScript {
    Tensor(Foreign),
    /// A tensor, and an exception left set while reporting success.
    TensorRaising(Foreign),
    NullTensor(Raise),
    Fail {
        code: i32,
        raise: Raise,
    },
}

/// What a fake producer's `current_work_stream` does.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum StreamScript {
    Stream(u64),
    Fail { code: i32, raise: Raise },
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct Prototype {
    null: bool,
    rank: Rank,
    dims: [Dim; 4],
    dtype: Dtype,
    device: Dev,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    Allocate {
        prototype: Prototype,
        null_out: bool,
        set_error: bool,
    },
    ManagedFromPy {
        object: Object,
        null_out: bool,
    },
    DlTensorFromPy {
        object: Object,
        null_out: bool,
    },
    ToPy {
        tensor: Option<Foreign>,
        null_out: bool,
    },
    WorkStream {
        device: Dev,
        null_out: bool,
    },
    /// `__dlpack__` of a pool exporter.
    Dunder {
        object: u8,
        versioned: bool,
        copy: Option<bool>,
    },
    /// `import` of a pool exporter (through its own C exchange API).
    ImportOwn {
        object: u8,
        request: Request,
    },
    /// `import` of an instance of a fake producer type.
    ImportFake {
        producer: u8,
        request: Request,
        export: ExportScript,
        stream: StreamScript,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    source: SourceIn,
    ops: Vec<Op>,
}

fuzz_target!(|input: Input| run(&input));

// ---------------------------------------------------------------------------------------------
// Foreign tensors and their deleters.

/// A foreign managed tensor and everything it points into.
struct Holder {
    managed: DLManagedTensorVersioned,
    _shape: Vec<i64>,
    _strides: Vec<i64>,
    _data: Option<AlignedBuffer>,
    id: usize,
}

thread_local! {
    /// Deleter calls, per foreign tensor of the current input.
    static DELETES: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    /// Foreign tensors without a deleter: freed by the input's end.
    static ORPHANS: RefCell<Vec<*mut Holder>> = const { RefCell::new(Vec::new()) };
}

unsafe extern "C" fn counting_deleter(tensor: *mut DLManagedTensorVersioned) {
    // SAFETY: `tensor` is one of ours; its manager_ctx is its boxed Holder. A second call
    // would be a double free, which ASan reports.
    let holder = unsafe { Box::from_raw((*tensor).manager_ctx.cast::<Holder>()) };
    DELETES.with(|d| d.borrow_mut()[holder.id] += 1);
    drop(holder);
}

fn deletes(id: usize) -> u32 {
    DELETES.with(|d| d.borrow()[id])
}

/// A foreign tensor, built; `expected` is what validating it says (what our functions must
/// agree with), and `readable` whether it may be copied: its data is a real buffer covering its
/// span, and its dense copy is small (a broadcast over a small span can be gigabytes).
struct Built {
    raw: *mut DLManagedTensorVersioned,
    id: usize,
    has_deleter: bool,
    expected: Result<TensorDescriptor, rsdlpack::Error>,
    readable: bool,
}

fn build(f: &Foreign) -> Built {
    let ndim = f.rank.ndim();
    let len = ndim.clamp(0, 40) as usize;
    let mut shape: Vec<i64> = (0..len).map(|k| f.dims[k % 4].value()).collect();
    let mut strides: Vec<i64> = (0..len).map(|k| f.strides[k % 4].value()).collect();
    shape.shrink_to_fit();
    strides.shrink_to_fit();
    let version = match f.version {
        Version::Current => DLPackVersion::CURRENT,
        Version::Minor(m) => DLPackVersion {
            major: 1,
            minor: u32::from(m % 5),
        },
        Version::Raw(major, minor) => DLPackVersion { major, minor },
    };
    let flags = dlpack_flags(f.flags, f.unknown_flag);
    let device = f.device.to_dlpack();
    let fake = |address: usize| DLTensor {
        data: address as *mut c_void,
        device,
        ndim,
        dtype: f.dtype.to_dlpack(),
        shape: if f.null_shape {
            null_mut()
        } else {
            shape.as_ptr().cast_mut()
        },
        strides: if f.null_strides {
            null_mut()
        } else {
            strides.as_ptr().cast_mut()
        },
        byte_offset: u64::from(f.byte_offset),
    };
    let validate = |t: &DLTensor| {
        // SAFETY: shape and strides hold `len` values, `len == ndim` whenever ndim is in range
        // (and validation reads nothing for an ndim out of range).
        unsafe { TensorDescriptor::validate(t, Some(version), flags) }
    };
    let mut data = None;
    let mut tensor = match f.data {
        Data::Null => fake(0),
        Data::Fake(a) => fake(a as usize),
        Data::Real => fake(0x10_0000),
    };
    let mut readable = false;
    if let (Data::Real, Ok(d)) = (f.data, validate(&tensor)) {
        let (low, high) = d.byte_span();
        if d.element_count() > 0
            && d.device().kind.host_accessible()
            && high - low <= REAL_SPAN_LIMIT
        {
            let buffer = patterned_buffer((high - low) as usize, 29, 0xa5);
            let first = buffer.as_ptr() as usize + (-low) as usize;
            let offset = usize::from(f.byte_offset).min(first - buffer.as_ptr() as usize);
            tensor.data = (first - offset) as *mut c_void;
            tensor.byte_offset = offset as u64;
            data = Some(buffer);
            readable = d.dense_byte_size() <= COPY_LIMIT;
        }
    }
    let expected = if version.major == 1 {
        validate(&tensor)
    } else {
        Err(rsdlpack::Error::UnsupportedVersion {
            found: version.major,
            supported: 1,
        })
    };
    let id = DELETES.with(|d| {
        let mut d = d.borrow_mut();
        d.push(0);
        d.len() - 1
    });
    let holder = Box::into_raw(Box::new(Holder {
        managed: DLManagedTensorVersioned {
            version,
            manager_ctx: null_mut(),
            deleter: f.deleter.then_some(counting_deleter as _),
            flags,
            dl_tensor: tensor,
        },
        _shape: shape,
        _strides: strides,
        _data: data,
        id,
    }));
    // SAFETY: just allocated; the box stays where it is until freed.
    let raw = unsafe {
        (*holder).managed.manager_ctx = holder.cast();
        &raw mut (*holder).managed
    };
    if !f.deleter {
        ORPHANS.with(|o| o.borrow_mut().push(holder));
    }
    Built {
        raw,
        id,
        has_deleter: f.deleter,
        expected,
        readable,
    }
}

// ---------------------------------------------------------------------------------------------
// Our producer table.

fn our_table(py: Python<'_>) -> &'static DLPackExchangeAPI {
    static TABLE: OnceLock<usize> = OnceLock::new();
    let address = *TABLE.get_or_init(|| {
        let capsule = exporter_type(py)
            .expect("the exporter type")
            .getattr("__dlpack_c_exchange_api__")
            .expect("the class attribute");
        let capsule = capsule.cast::<PyCapsule>().expect("a capsule");
        // SAFETY: a live capsule; GetPointer checks the name.
        let pointer = unsafe {
            pyo3::ffi::PyCapsule_GetPointer(capsule.as_ptr(), c"dlpack_exchange_api".as_ptr())
        };
        assert!(
            !pointer.is_null(),
            "the capsule is named dlpack_exchange_api"
        );
        pointer as usize
    });
    // SAFETY: the capsule points at the bridge's static table.
    let table = unsafe { &*(address as *const DLPackExchangeAPI) };
    assert_eq!(table.header.version, DLPackVersion::CURRENT);
    assert!(table.header.prev_api.is_null());
    table
}

// ---------------------------------------------------------------------------------------------
// The pool of Python objects an input works on.

struct Entry {
    object: Py<PyAny>,
    /// The exporter's tensor as validated when it was made.
    descriptor: TensorDescriptor,
    /// Whether it may be copied (see `Built`).
    readable: bool,
}

fn source_entry(py: Python<'_>, s: &SourceIn, count: &Arc<AtomicUsize>) -> Entry {
    let source = SmallSource {
        device: Device::from_dlpack(s.device.to_dlpack()),
        element: ElementType::from_dlpack(s.dtype.to_dlpack(), true)
            .unwrap_or(ElementType::Float32),
        rank: s.rank,
        dims: s.dims,
        row_major: true,
        read_only: s.read_only,
        is_copied: false,
    };
    let tensor = source.over(AlignedBuffer::zeroed(256), count);
    let descriptor = tensor.descriptor().clone();
    Entry {
        object: Exporter::new(tensor, None)
            .unwrap()
            .into_pyobject(py)
            .unwrap()
            .unbind(),
        descriptor,
        readable: true,
    }
}

fn not_exporter(py: Python<'_>, k: u8) -> Bound<'_, PyAny> {
    match k % 5 {
        0 => py.None().into_bound(py),
        1 => 7i32.into_pyobject(py).unwrap().into_any(),
        2 => "a string".into_pyobject(py).unwrap().into_any(),
        3 => exporter_type(py).unwrap().into_any(),
        _ => {
            static DUMMY: u64 = 0;
            let pointer = NonNull::from(&DUMMY).cast::<c_void>();
            // SAFETY: a static, valid for the capsule's life; nobody reads through it.
            unsafe { PyCapsule::new_with_pointer(py, pointer, c"dltensor") }
                .unwrap()
                .into_any()
        }
    }
}

/// The object an op names (owned, so that the pool can grow meanwhile), or null.
fn object<'py>(
    py: Python<'py>,
    pool: &[Entry],
    o: Object,
) -> Option<(Bound<'py, PyAny>, Option<usize>)> {
    match o {
        Object::Null => None,
        Object::Exporter(k) => {
            let k = usize::from(k) % pool.len();
            Some((pool[k].object.bind(py).clone(), Some(k)))
        }
        Object::NotExporter(k) => Some((not_exporter(py, k), None)),
    }
}

// ---------------------------------------------------------------------------------------------
// The error convention.

/// A Python-side function's status: 0 with no exception, or -1 with one of type `allowed`
/// (never RuntimeError, a caught panic). Returns whether it succeeded.
fn convention(py: Python<'_>, status: c_int, allowed: &[ErrorCode], what: &str) -> bool {
    let err = PyErr::take(py);
    match (status, err) {
        (0, None) => true,
        (0, Some(err)) => panic!("{what}: success with an exception set: {err}"),
        (-1, Some(err)) => {
            assert!(
                allowed
                    .iter()
                    .any(|&c| err.get_type(py).is(&exception_for(py, c))),
                "{what}: raised {err}, expected one of {allowed:?}"
            );
            let _ = err.to_string();
            false
        }
        (status, err) => panic!("{what}: status {status} with {err:?}"),
    }
}

/// The error codes of an exporter's export on this machine (no CUDA driver: CUDA and managed
/// memory need it for the stream ordering).
fn export_outcome(d: &TensorDescriptor) -> Option<ErrorCode> {
    rsdlpack::export::plan::ordered_by_streams(d.device().kind).then_some(ErrorCode::Buffer)
}

fn same_tensor(a: &TensorDescriptor, b: &TensorDescriptor) {
    assert_eq!(
        (
            a.first_element(),
            a.device(),
            a.element(),
            &a.shape()[..],
            &a.strides()[..]
        ),
        (
            b.first_element(),
            b.device(),
            b.element(),
            &b.shape()[..],
            &b.strides()[..]
        )
    );
}

// ---------------------------------------------------------------------------------------------
// Producer operations.

thread_local! {
    static SET_ERROR: RefCell<Vec<(String, String, usize)>> = const { RefCell::new(Vec::new()) };
}

unsafe extern "C" fn record_error(ctx: *mut c_void, kind: *const c_char, message: *const c_char) {
    // SAFETY: the allocator passes NUL-terminated strings that live for the call.
    let (kind, message) = unsafe { (CStr::from_ptr(kind), CStr::from_ptr(message)) };
    SET_ERROR.with(|s| {
        s.borrow_mut().push((
            kind.to_string_lossy().into_owned(),
            message.to_string_lossy().into_owned(),
            ctx as usize,
        ))
    });
}

fn allocate(py: Python<'_>, p: &Prototype, null_out: bool, set_error: bool) {
    let table = our_table(py);
    let ndim = p.rank.ndim();
    // Exactly `ndim` values when in range (ASan sees any read past them), a short array
    // otherwise (which must not be read at all).
    let len = if (0..=32).contains(&ndim) {
        ndim as usize
    } else {
        2
    };
    let mut shape: Vec<i64> = (0..len).map(|k| p.dims[k % 4].value()).collect();
    shape.shrink_to_fit();
    let mut prototype = DLTensor {
        data: null_mut(),
        device: p.device.to_dlpack(),
        ndim,
        dtype: p.dtype.to_dlpack(),
        shape: shape.as_mut_ptr(),
        strides: null_mut(),
        byte_offset: 0,
    };
    let mut out: *mut DLManagedTensorVersioned = 0x1 as *mut _;
    SET_ERROR.with(|s| s.borrow_mut().clear());
    let alloc = table.managed_tensor_allocator.expect("present");
    // SAFETY: the contract: the prototype's shape holds ndim values when ndim is in range.
    let status = unsafe {
        alloc(
            if p.null { null_mut() } else { &mut prototype },
            if null_out { null_mut() } else { &mut out },
            0x5eed as *mut c_void,
            if set_error { Some(record_error) } else { None },
        )
    };
    assert!(
        PyErr::take(py).is_none(),
        "the allocator reports through set_error only"
    );
    let errors = SET_ERROR.with(|s| std::mem::take(&mut *s.borrow_mut()));
    // What the allocator must answer, in its order of checks (None: success).
    let element = ElementType::from_dlpack(prototype.dtype, false);
    let bytes = element.as_ref().ok().and_then(|e| {
        if shape.contains(&0) {
            return Some(0u128);
        }
        shape.iter().try_fold(e.size() as u128, |b, &d| {
            b.checked_mul(u128::try_from(d).ok()?)
        })
    });
    let refusal = if null_out || p.null {
        Some("ValueError")
    } else if Device::from_dlpack(prototype.device).kind != DeviceKind::Cpu {
        Some("BufferError")
    } else if !matches!(element, Ok(e) if !matches!(e, ElementType::PackedBits { .. })) {
        Some("ValueError")
    } else if !(0..=32).contains(&ndim) || shape.iter().any(|&d| d < 0) {
        Some("ValueError")
    } else if bytes.is_none_or(|b| b > isize::MAX as u128) {
        Some("ValueError")
    } else {
        None
    };
    if status != 0 {
        assert_eq!(status, -1);
        let kind = match refusal {
            Some(kind) => kind,
            // Only memory may be refused to a valid prototype, and only a lot of it.
            None => {
                assert!(
                    bytes.unwrap() >= 1 << 30,
                    "refused {bytes:?} bytes: {errors:?}"
                );
                "MemoryError"
            }
        };
        if set_error {
            assert_eq!(errors.len(), 1, "set_error once per failure");
            let (got, message, ctx) = &errors[0];
            assert_eq!(*ctx, 0x5eed, "set_error gets error_ctx");
            assert_eq!(got, kind, "{message} for {p:?}");
        } else {
            assert!(errors.is_empty());
        }
        return;
    }
    assert_eq!(refusal, None, "allocated for {p:?}");
    assert!(errors.is_empty(), "set_error on success: {errors:?}");
    assert!(!out.is_null());
    // SAFETY: on success `out` is an owned tensor.
    let managed = unsafe { ManagedTensor::from_versioned_raw(out) }.expect("a 1.x tensor");
    let d = describe(&managed).expect("an allocation validates");
    if let ManagedTensor::Versioned(m) = &managed {
        assert_eq!(m.version(), DLPackVersion::CURRENT);
        assert_eq!(m.flags(), DlpackFlags::empty());
    }
    assert_eq!(d.device(), Device::CPU);
    assert_eq!(d.element().to_dlpack(), prototype.dtype);
    assert_eq!(&d.shape()[..], &shape[..]);
    assert_eq!(
        d.strides(),
        &rsdlpack::descriptor::dense_strides(d.shape(), true)[..]
    );
    let bytes = d.dense_byte_size();
    if bytes > 0 {
        assert_eq!(d.first_element() % 64, 0, "64-byte aligned");
        let head = bytes.min(4096);
        // SAFETY: the allocation holds `bytes` bytes.
        let zeroes = unsafe { std::slice::from_raw_parts(d.first_element() as *const u8, head) };
        assert!(zeroes.iter().all(|&b| b == 0), "zeroed");
    }
    drop(managed);
}

/// Calls `f`, one of the two functions that read an exporter (`name`), on the object `o`
/// names, with `out` or a null out-pointer, and checks the error convention: null arguments are
/// ValueError, other objects TypeError, and an exporter gets `refusal` of its tensor (no error:
/// success). Returns the exporter's descriptor on success.
fn from_py<'a, T>(
    py: Python<'_>,
    pool: &'a [Entry],
    o: Object,
    (name, f): (&str, unsafe extern "C" fn(*mut c_void, *mut T) -> c_int),
    out: Option<&mut T>,
    refusal: impl Fn(&TensorDescriptor) -> Option<ErrorCode>,
) -> Option<&'a TensorDescriptor> {
    let target = object(py, pool, o);
    let null_out = out.is_none();
    // SAFETY: the GIL is held; the object is live or null; `out` writable or null.
    let status = unsafe {
        f(
            target
                .as_ref()
                .map_or(null_mut(), |(t, _)| t.as_ptr().cast()),
            out.map_or(null_mut(), |out| out as *mut T),
        )
    };
    let (allowed, expect_ok) = match &target {
        _ if null_out => (vec![ErrorCode::Invalid], false),
        None => (vec![ErrorCode::Invalid], false),
        Some((_, None)) => (vec![ErrorCode::NotDlpack], false),
        Some((_, Some(k))) => match refusal(&pool[*k].descriptor) {
            Some(code) => (vec![code], false),
            None => (vec![], true),
        },
    };
    let ok = convention(py, status, &allowed, name);
    assert_eq!(ok, expect_ok, "{name} {o:?}");
    ok.then(|| &pool[target.unwrap().1.unwrap()].descriptor)
}

fn managed_from_py(py: Python<'_>, pool: &[Entry], o: Object, null_out: bool) {
    let table = our_table(py);
    let f = table
        .managed_tensor_from_py_object_no_sync
        .expect("present");
    let mut out: *mut DLManagedTensorVersioned = null_mut();
    let call = ("managed_tensor_from_py_object_no_sync", f);
    let out_pointer = (!null_out).then_some(&mut out);
    let Some(source) = from_py(py, pool, o, call, out_pointer, export_outcome) else {
        return;
    };
    // SAFETY: on success `out` is an owned tensor.
    let managed = unsafe { ManagedTensor::from_versioned_raw(out) }.expect("a 1.x tensor");
    let d = describe(&managed).expect("an export validates");
    if let ManagedTensor::Versioned(m) = &managed {
        assert_eq!(m.version(), DLPackVersion::CURRENT);
        let mut want = DlpackFlags::empty();
        want.set(DlpackFlags::READ_ONLY, source.read_only());
        want.set(
            DlpackFlags::IS_SUBBYTE_TYPE_PADDED,
            is_padded(source.element()),
        );
        assert_eq!(m.flags(), want, "shared: never IS_COPIED");
    }
    same_tensor(&d, source);
    drop(managed);
}

fn dltensor_from_py(py: Python<'_>, pool: &[Entry], o: Object, null_out: bool) {
    let table = our_table(py);
    let f = table.dltensor_from_py_object_no_sync.expect("present");
    let mut out = DLTensor {
        data: 0x1 as *mut c_void,
        device: DLDevice {
            device_type: DLDeviceType(0),
            device_id: -7,
        },
        ndim: -7,
        dtype: DLDataType::scalar(DLDataTypeCode(0), 0),
        shape: null_mut(),
        strides: null_mut(),
        byte_offset: 7,
    };
    // A `DLTensor` has no flags: read-only and padded tensors are refused.
    let refusal = |d: &TensorDescriptor| {
        if d.read_only() || is_padded(d.element()) {
            Some(ErrorCode::Buffer)
        } else {
            export_outcome(d)
        }
    };
    let call = ("dltensor_from_py_object_no_sync", f);
    let Some(source) = from_py(py, pool, o, call, (!null_out).then_some(&mut out), refusal) else {
        return;
    };
    assert_eq!(out.byte_offset, 0);
    // SAFETY: the view's shape and strides point into the live exporter's descriptor.
    let d = unsafe { TensorDescriptor::validate(&out, None, DlpackFlags::empty()) }
        .expect("the view validates");
    same_tensor(&d, source);
}

fn to_py(py: Python<'_>, pool: &mut Vec<Entry>, tensor: Option<&Foreign>, null_out: bool) {
    let table = our_table(py);
    let built = tensor.map(build);
    let mut out: *mut c_void = null_mut();
    let f = table.managed_tensor_to_py_object_no_sync.expect("present");
    // SAFETY: the GIL is held; the tensor is ours to give (or null); `out` writable or null.
    let status = unsafe {
        f(
            built.as_ref().map_or(null_mut(), |b| b.raw),
            if null_out { null_mut() } else { &mut out },
        )
    };
    // In the function's order: ownership (the major version), the out-pointer, validation.
    let expected: Result<(), ErrorCode> = match &built {
        None => Err(ErrorCode::Invalid),
        Some(b) => match &b.expected {
            Err(e @ rsdlpack::Error::UnsupportedVersion { .. }) => Err(e.kind().into()),
            _ if null_out => Err(ErrorCode::Invalid),
            Err(e) => Err(e.kind().into()),
            Ok(_) => Ok(()),
        },
    };
    let allowed: Vec<ErrorCode> = expected.err().into_iter().collect();
    let ok = convention(py, status, &allowed, "managed_tensor_to_py_object_no_sync");
    assert_eq!(ok, expected.is_ok(), "managed_tensor_to_py_object_no_sync");
    let Some(b) = built else { return };
    if !ok {
        if b.has_deleter {
            assert_eq!(
                deletes(b.id),
                1,
                "a refused tensor is released before the return"
            );
        }
        return;
    }
    assert_eq!(deletes(b.id), 0, "released while an exporter holds it");
    // SAFETY: on success `out` is a new reference.
    let object = unsafe { Bound::from_owned_ptr(py, out.cast()) };
    assert!(object.is_instance(&exporter_type(py).unwrap()).unwrap());
    let descriptor = b.expected.unwrap();
    let device: (u32, i32) = object
        .call_method0("__dlpack_device__")
        .unwrap()
        .extract()
        .unwrap();
    let dl = descriptor.device().to_dlpack();
    assert_eq!(device, (dl.device_type.0, dl.device_id));
    pool.push(Entry {
        object: object.unbind(),
        descriptor,
        readable: b.readable,
    });
}

fn work_stream(py: Python<'_>, device: Dev, null_out: bool) {
    let table = our_table(py);
    let dl = device.to_dlpack();
    let mut out: *mut c_void = 0x1 as *mut c_void;
    let f = table.current_work_stream.expect("present");
    // SAFETY: `out` writable or null.
    let status = unsafe {
        f(
            dl.device_type,
            dl.device_id,
            if null_out { null_mut() } else { &mut out },
        )
    };
    let known = matches!(
        DeviceKind::of(dl.device_type),
        DeviceKind::Cpu | DeviceKind::Cuda | DeviceKind::CudaHost | DeviceKind::CudaManaged
    );
    let ok = convention(py, status, &[ErrorCode::Invalid], "current_work_stream");
    assert_eq!(ok, known && !null_out);
    if ok {
        assert!(out.is_null(), "the default stream");
    }
}

fn dunder(py: Python<'_>, pool: &[Entry], k: u8, versioned: bool, copy: Option<bool>) {
    let entry = &pool[usize::from(k) % pool.len()];
    let kwargs = PyDict::new(py);
    if versioned {
        kwargs.set_item("max_version", (1, 3)).unwrap();
    }
    // Copies read the memory: only of real, small buffers.
    if let Some(copy) = copy.filter(|&c| !c || entry.readable) {
        kwargs.set_item("copy", copy).unwrap();
    }
    match entry
        .object
        .bind(py)
        .call_method("__dlpack__", (), Some(&kwargs))
    {
        Ok(capsule) => {
            let tensor =
                rsdlpack_python::protocol::capsule::consume(&capsule).expect("our capsule");
            let d = ImportedTensor::new(tensor).expect("our capsule validates");
            assert_eq!(d.descriptor().shape(), entry.descriptor.shape());
        }
        Err(err) => {
            // Refusals: legacy capsules of read-only or padded tensors, versions, CUDA.
            let ok = [ErrorCode::Invalid, ErrorCode::Buffer]
                .iter()
                .any(|&c| err.get_type(py).is(&exception_for(py, c)));
            assert!(ok, "__dlpack__ raised {err}");
        }
    }
}

fn stream_request(s: StreamIn) -> StreamRequest {
    let value = match s {
        StreamIn::Omitted => return StreamRequest::Omitted,
        StreamIn::Sentinel(k) => i64::from(k % 6) - 2,
        StreamIn::Handle(h) => i64::from(h),
    };
    StreamRequest::from_value(value).unwrap_or(StreamRequest::Omitted)
}

fn import_request(r: &Request) -> ImportRequest {
    ImportRequest {
        stream: stream_request(r.stream),
        device: r.device.map(|d| Device::from_dlpack(d.to_dlpack())),
        copy: r.copy,
        accept_unknown_device_types: r.accept_unknown_device_types,
    }
}

fn import_own(py: Python<'_>, pool: &[Entry], k: u8, r: &Request) {
    let entry = &pool[usize::from(k) % pool.len()];
    let mut request = import_request(r);
    if !entry.readable {
        // Copies read the memory: a fake address (or a huge broadcast) is not copied.
        request.copy = request.copy.filter(|&c| !c);
        request.device = request.device.filter(|&d| d == entry.descriptor.device());
    }
    match import(entry.object.bind(py), &request) {
        Ok(tensor) => {
            // The exporter's memory itself (through the C exchange API or `__dlpack__`), or
            // a copy (copy=True, or dl_device the host).
            let d = tensor.descriptor();
            assert_eq!(d.shape(), entry.descriptor.shape());
            let copied = request.copy == Some(true)
                || request
                    .device
                    .is_some_and(|w| w != entry.descriptor.device());
            if copied {
                assert!(d.is_copied() && d.device() == Device::CPU, "{d:?}");
            } else {
                same_tensor(d, &entry.descriptor);
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    assert!(PyErr::take(py).is_none(), "import left an exception set");
}

// ---------------------------------------------------------------------------------------------
// Consumer: fake producers.

#[repr(transparent)]
struct Table(DLPackExchangeAPI);

// SAFETY: immutable function pointers and pointers to other such statics.
unsafe impl Sync for Table {}

const fn table(major: u32, minor: u32, prev: *const Table, export: bool, stream: bool) -> Table {
    Table(DLPackExchangeAPI {
        header: DLPackExchangeAPIHeader {
            version: DLPackVersion { major, minor },
            prev_api: prev as *mut DLPackExchangeAPIHeader,
        },
        managed_tensor_allocator: None,
        managed_tensor_from_py_object_no_sync: if export { Some(fake_export) } else { None },
        managed_tensor_to_py_object_no_sync: None,
        dltensor_from_py_object_no_sync: None,
        current_work_stream: if stream { Some(fake_stream) } else { None },
    })
}

const NO_PREV: *const Table = std::ptr::null();
static T0: Table = table(1, 3, NO_PREV, true, true);
static T1: Table = table(1, 0, NO_PREV, true, false);
static T2: Table = table(1, 3, NO_PREV, false, true);
static T3: Table = table(2, 0, &T0, true, true);
static T4: Table = table(2, 1, &T3, true, true);
static T5: Table = table(0, 9, NO_PREV, true, true);
static T6: Table = table(3, 0, &T7, true, true);
static T7: Table = table(3, 1, &T6, true, true);
static T8: Table = table(2, 0, NO_PREV, true, true);
static T9: Table = table(2, 0, &T5, true, true);
static T10: Table = table(u32::MAX, 0, &T1, true, true);
static TABLES: [&Table; 11] = [&T0, &T1, &T2, &T3, &T4, &T5, &T6, &T7, &T8, &T9, &T10];

/// The table a consumer must use, as the specification's chain walk finds it.
fn usable(mut t: &Table) -> Option<&Table> {
    for _ in 0..16 {
        let v = t.0.header.version;
        if v.major == 1 {
            return t
                .0
                .managed_tensor_from_py_object_no_sync
                .is_some()
                .then_some(t);
        }
        if v.major < 1 {
            return None;
        }
        // SAFETY: every prev_api here is null or one of the statics above.
        t = unsafe { t.0.header.prev_api.cast::<Table>().as_ref() }?;
    }
    None
}

struct Script {
    export: Option<ExportScript>,
    stream: Option<StreamScript>,
    /// The tensors handed out: (id, has deleter, what validating it says).
    handed: Vec<(usize, bool, Result<TensorDescriptor, ()>)>,
    export_calls: usize,
    stream_calls: usize,
}

thread_local! {
    static SCRIPT: RefCell<Script> = const {
        RefCell::new(Script {
            export: None,
            stream: None,
            handed: Vec::new(),
            export_calls: 0,
            stream_calls: 0,
        })
    };
}

fn raise(r: Raise) {
    use pyo3::ffi;
    // SAFETY: the GIL is held (the API's contract); the strings are static.
    unsafe {
        match r {
            Raise::No => {}
            Raise::BufferError => {
                ffi::PyErr_SetString(ffi::PyExc_BufferError, c"fake: no".as_ptr())
            }
            Raise::TypeError => ffi::PyErr_SetString(ffi::PyExc_TypeError, c"fake: type".as_ptr()),
            Raise::KeyboardInterrupt => {
                ffi::PyErr_SetString(ffi::PyExc_KeyboardInterrupt, c"fake: ^C".as_ptr())
            }
        }
    }
}

unsafe extern "C" fn fake_export(
    _object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    let script = SCRIPT.with(|s| {
        let mut s = s.borrow_mut();
        s.export_calls += 1;
        s.export.take()
    });
    let Some(script) = script else {
        panic!("the export function was called twice in one import");
    };
    let hand = |f: &Foreign| {
        let built = build(f);
        SCRIPT.with(|s| {
            s.borrow_mut().handed.push((
                built.id,
                built.has_deleter,
                built.expected.map_err(|_| ()),
            ))
        });
        // SAFETY: `out` is the consumer's out-pointer.
        unsafe { *out = built.raw };
    };
    match script {
        ExportScript::Tensor(f) => {
            hand(&f);
            0
        }
        ExportScript::TensorRaising(f) => {
            hand(&f);
            raise(Raise::BufferError);
            0
        }
        ExportScript::NullTensor(r) => {
            // SAFETY: as above.
            unsafe { *out = null_mut() };
            raise(r);
            0
        }
        ExportScript::Fail { code, raise: r } => {
            raise(r);
            if code == 0 { -1 } else { code }
        }
    }
}

unsafe extern "C" fn fake_stream(
    _device_type: DLDeviceType,
    _device_id: i32,
    out: *mut *mut c_void,
) -> c_int {
    let script = SCRIPT.with(|s| {
        let mut s = s.borrow_mut();
        s.stream_calls += 1;
        s.stream.take()
    });
    match script.expect("current_work_stream called twice in one import") {
        StreamScript::Stream(v) => {
            // SAFETY: the consumer's out-pointer.
            unsafe { *out = v as usize as *mut c_void };
            0
        }
        StreamScript::Fail { code, raise: r } => {
            raise(r);
            if code == 0 { -1 } else { code }
        }
    }
}

/// What the attribute of a fake producer type is.
#[derive(Clone, Copy, Debug)]
enum Attribute {
    Table(usize),
    None,
    Int,
    WrongName,
    Absent,
    Raising,
}

const ATTRIBUTES: [Attribute; 16] = [
    Attribute::Table(0),
    Attribute::Table(1),
    Attribute::Table(2),
    Attribute::Table(3),
    Attribute::Table(4),
    Attribute::Table(5),
    Attribute::Table(6),
    Attribute::Table(7),
    Attribute::Table(8),
    Attribute::Table(9),
    Attribute::Table(10),
    Attribute::None,
    Attribute::Int,
    Attribute::WrongName,
    Attribute::Absent,
    Attribute::Raising,
];

const FACTORY: &CStr = c"
def make(name, has_api, api, raising):
    ns = {
        '__init__': lambda self, e: setattr(self, 'e', e),
        '__dlpack__': lambda self, **kw: self.e.__dlpack__(**kw),
        '__dlpack_device__': lambda self: self.e.__dlpack_device__(),
    }
    if has_api:
        ns['__dlpack_c_exchange_api__'] = api
    if raising:
        class Meta(type):
            @property
            def __dlpack_c_exchange_api__(cls):
                raise RuntimeError('no API today')
        return Meta(name, (), ns)
    return type(name, (), ns)
";

fn fake_types(py: Python<'_>) -> &'static [Py<PyType>] {
    static TYPES: OnceLock<Vec<Py<PyType>>> = OnceLock::new();
    TYPES.get_or_init(|| {
        let module =
            PyModule::from_code(py, FACTORY, c"fake_producers.py", c"fake_producers").unwrap();
        let make = module.getattr("make").unwrap();
        let capsule = |t: &'static Table, name: &'static CStr| {
            let pointer = NonNull::from(&t.0).cast::<c_void>();
            // SAFETY: a static table, alive for the process; consumers only read it.
            unsafe { PyCapsule::new_with_pointer(py, pointer, name) }
                .unwrap()
                .into_any()
        };
        ATTRIBUTES
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let (has, api, raising) = match *a {
                    Attribute::Table(t) => {
                        (true, capsule(TABLES[t], c"dlpack_exchange_api"), false)
                    }
                    Attribute::None => (true, py.None().into_bound(py), false),
                    Attribute::Int => (true, 42i32.into_pyobject(py).unwrap().into_any(), false),
                    Attribute::WrongName => (true, capsule(&T0, c"dltensor"), false),
                    Attribute::Absent => (false, py.None().into_bound(py), false),
                    Attribute::Raising => (false, py.None().into_bound(py), true),
                };
                make.call1((format!("Producer{i}"), has, api, raising))
                    .unwrap()
                    .cast_into::<PyType>()
                    .unwrap()
                    .unbind()
            })
            .collect()
    })
}

fn import_fake(
    py: Python<'_>,
    pool: &[Entry],
    producer: u8,
    r: &Request,
    export: ExportScript,
    stream: StreamScript,
) {
    let index = usize::from(producer) % ATTRIBUTES.len();
    let attribute = ATTRIBUTES[index];
    let ty = fake_types(py)[index].bind(py);
    // The fallback `__dlpack__` serves the source exporter (real memory).
    let instance = ty.call1((pool[0].object.bind(py),)).unwrap();
    let request = import_request(r);
    SCRIPT.with(|s| {
        let mut s = s.borrow_mut();
        s.export = Some(export);
        s.stream = Some(stream);
        s.handed.clear();
        s.export_calls = 0;
        s.stream_calls = 0;
    });
    let before = imports_through_c_api();
    let result = import(&instance, &request);
    let through_api = imports_through_c_api() - before;
    assert!(PyErr::take(py).is_none(), "import left an exception set");
    let (export_calls, stream_calls, handed) = SCRIPT.with(|s| {
        let mut s = s.borrow_mut();
        s.export = None;
        s.stream = None;
        (
            s.export_calls,
            s.stream_calls,
            std::mem::take(&mut s.handed),
        )
    });
    // The table is called exactly when a usable one exists and the request can use it.
    let usable_table = match attribute {
        Attribute::Table(t) => usable(TABLES[t]).is_some(),
        _ => false,
    };
    let attribute_error = matches!(
        attribute,
        Attribute::Int | Attribute::WrongName | Attribute::Raising
    );
    let expect_call = usable_table && request.copy != Some(true);
    assert_eq!(
        export_calls,
        usize::from(expect_call),
        "{attribute:?} {request:?}"
    );
    assert!(stream_calls <= 1);
    if attribute_error {
        let e = result
            .as_ref()
            .err()
            .expect("a broken attribute is an error");
        let code = e.code();
        assert!(
            matches!(code, ErrorCode::Invalid | ErrorCode::Producer),
            "{e}"
        );
    }
    if expect_call {
        let failed = match export {
            ExportScript::Fail { .. }
            | ExportScript::NullTensor(_)
            | ExportScript::TensorRaising(_) => true,
            ExportScript::Tensor(_) => handed.first().is_some_and(|h| h.2.is_err()),
        };
        if failed {
            assert!(result.is_err(), "a failed export imported");
            if matches!(
                export,
                ExportScript::Fail { .. } | ExportScript::NullTensor(_)
            ) {
                assert_eq!(
                    result.as_ref().err().unwrap().code(),
                    ErrorCode::Producer,
                    "{:?}",
                    result.as_ref().err()
                );
            }
        }
    }
    match &result {
        Ok(tensor) => {
            // The API's tensor, or (when the API declined the request) the fallback
            // `__dlpack__` of the source exporter.
            let d = tensor.descriptor();
            let from_api = through_api > 0
                && handed
                    .first()
                    .and_then(|h| h.2.as_ref().ok())
                    .is_some_and(|e| {
                        e.first_element() == d.first_element() && e.shape() == d.shape()
                    });
            if from_api {
                let expected = handed[0].2.as_ref().unwrap();
                same_tensor(d, expected);
            } else {
                assert_eq!(d.shape(), pool[0].descriptor.shape());
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    drop(result);
    drop(instance);
    for (id, has_deleter, _) in handed {
        if has_deleter {
            assert_eq!(deletes(id), 1, "the producer's deleter runs exactly once");
        }
    }
}

// ---------------------------------------------------------------------------------------------

fn run(input: &Input) {
    DELETES.with(|d| d.borrow_mut().clear());
    let count = Arc::new(AtomicUsize::new(0));
    Python::attach(|py| {
        let mut pool = vec![source_entry(py, &input.source, &count)];
        for op in input.ops.iter().take(MAX_OPS) {
            match *op {
                Op::Allocate {
                    prototype,
                    null_out,
                    set_error,
                } => allocate(py, &prototype, null_out, set_error),
                Op::ManagedFromPy { object, null_out } => {
                    managed_from_py(py, &pool, object, null_out)
                }
                Op::DlTensorFromPy { object, null_out } => {
                    dltensor_from_py(py, &pool, object, null_out)
                }
                Op::ToPy { tensor, null_out } => to_py(py, &mut pool, tensor.as_ref(), null_out),
                Op::WorkStream { device, null_out } => work_stream(py, device, null_out),
                Op::Dunder {
                    object,
                    versioned,
                    copy,
                } => dunder(py, &pool, object, versioned, copy),
                Op::ImportOwn { object, request } => import_own(py, &pool, object, &request),
                Op::ImportFake {
                    producer,
                    request,
                    export,
                    stream,
                } => import_fake(py, &pool, producer, &request, export, stream),
            }
            assert!(PyErr::take(py).is_none(), "{op:?} left an exception set");
        }
        drop(pool);
    });
    assert_eq!(
        count.load(Ordering::SeqCst),
        1,
        "the source's owner is released once"
    );
    DELETES.with(|d| {
        for (id, &n) in d.borrow().iter().enumerate() {
            assert!(n <= 1, "foreign tensor {id} deleted {n} times");
        }
    });
    // Everything with a deleter was deleted (the pool is gone); orphans are ours to free.
    let orphans: Vec<usize> = ORPHANS.with(|o| {
        o.borrow_mut()
            .drain(..)
            .map(|h| {
                // SAFETY: a holder without a deleter, which nobody else frees; every exporter
                // that pointed into it is gone.
                let holder = unsafe { Box::from_raw(h) };
                holder.id
            })
            .collect()
    });
    DELETES.with(|d| {
        for (id, &n) in d.borrow().iter().enumerate() {
            if !orphans.contains(&id) {
                assert_eq!(n, 1, "foreign tensor {id} was not deleted");
            }
        }
    });
}

/// Validates what `managed` holds (the tensor stays owned by it).
fn describe(managed: &ManagedTensor) -> rsdlpack::Result<TensorDescriptor> {
    match managed {
        // SAFETY: a `Managed` owns its tensor, whose metadata stays readable while borrowed.
        ManagedTensor::Legacy(m) => unsafe {
            TensorDescriptor::validate(m.tensor(), None, m.flags())
        },
        // SAFETY: as above.
        ManagedTensor::Versioned(m) => unsafe {
            TensorDescriptor::validate(m.tensor(), Some(m.version()), m.flags())
        },
    }
}
