//! The core's one error type, and the one place that decides what kind of failure each error
//! is. Every message names the offending input and, where there is one, what the caller can do
//! instead; the bridges turn these into Python exceptions or Julia exceptions without rewording
//! them, and carry the [`ErrorKind`] across the C boundary as a number — code never parses the
//! text.

use crate::copy_reason::CopyReason;
use crate::device::Device;
use dlpark::ffi::{DLDataType, DLDevice};

/// What kind of failure an [`Error`] is: decided here, once ([`Error::kind`]), and mapped by
/// each bridge to its own world (the Python bridge: a return code and an exception type; the
/// Julia bridge: `DLPackError`'s kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The input is not a valid DLPack tensor, or an argument is out of range (Python
    /// `ValueError`).
    InvalidInput,
    /// A valid tensor that cannot be exchanged as asked: the array API's `BufferError` cases
    /// (unsupported device, dtype or layout, vector dtype, a copy that is forbidden or needed,
    /// read-only refusals, a DLPack version the consumer does not speak).
    BufferRefusal,
    /// Memory (host or device) could not be had (Python `MemoryError`).
    Resource,
    /// The CUDA driver failed a call for a reason other than memory (Python `RuntimeError`):
    /// the status and the call are in the message.
    Driver,
    /// A bug in RsDLPack: an invariant that should have held did not.
    Internal,
}

/// The return codes of the C entry points (0 is success); C names them `RsdlErrorCode`
/// (`RSDL_ERROR_CODE_INVALID`, …), and the jlrs bridge throws them to Julia with the message.
/// The numbers are ABI: never reuse one. Julia's `DLPackError` kind is the code's name in
/// lower case (`:not_dlpack`).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The input was invalid (a Python `ValueError`).
    Invalid = 1,
    /// The tensor cannot be exchanged as asked (a Python `BufferError`).
    Buffer = 2,
    /// The object does not speak DLPack (a Python `TypeError`).
    NotDlpack = 3,
    /// The producer raised a Python exception (a Python `RuntimeError` naming it).
    Producer = 4,
    /// Memory could not be had (a Python `MemoryError`).
    Resource = 5,
    /// The CUDA driver failed a call, not for memory (a Python `RuntimeError`).
    Driver = 6,
    /// The Python interpreter is not running in this process (a C caller's code only: there is
    /// no Python to raise into).
    Interpreter = 7,
    /// The caller asked to be told, rather than given the import's error, when the object is
    /// not one to import: not a tensor (no `__dlpack__`, a Python type object), or a tensor its
    /// producer refuses to export or that cannot be exchanged as asked (the import's
    /// `NotDlpack`, `Buffer` and `Producer` errors). Only the entry points that take
    /// `RSDLPACK_CALL_DECLINE_REFUSALS` answer it, the import's message still written: a
    /// converter that may pass an object on to others (PythonCall's `pyconvert` rules) declines
    /// it. Never a Python exception.
    Declined = 8,
    /// A bug in RsDLPack: a panic caught at the border, or a broken invariant.
    Internal = 99,
}

impl From<ErrorKind> for ErrorCode {
    fn from(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::InvalidInput => Self::Invalid,
            ErrorKind::BufferRefusal => Self::Buffer,
            ErrorKind::Resource => Self::Resource,
            ErrorKind::Driver => Self::Driver,
            ErrorKind::Internal => Self::Internal,
        }
    }
}

/// Everything that can go wrong while taking, checking, planning, copying or exporting a tensor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("the managed tensor pointer is null")]
    NullTensor,

    #[error(
        "DLPack major version {found} is not supported (this library speaks {supported}.x); \
         the tensor was released unread"
    )]
    UnsupportedVersion { found: u32, supported: u32 },

    #[error(
        "unknown DLPack flag bits {bits:#x}; this library understands READ_ONLY, IS_COPIED and \
         IS_SUBBYTE_TYPE_PADDED and will not guess what the others mean"
    )]
    UnknownFlags { bits: u64 },

    /// A negative `ndim` is invalid; a valid one above [`crate::MAX_NDIM`] is refused.
    #[error("ndim is {ndim}; DLPack tensors here must have 0 to {max} dimensions")]
    BadRank { ndim: i64, max: usize },

    #[error("the tensor has ndim {ndim} but its shape pointer is null")]
    NullShape { ndim: usize },

    #[error(
        "DLPack {major}.{minor} requires explicit strides for ndim {ndim}, but strides is null"
    )]
    MissingStrides { major: u32, minor: u32, ndim: usize },

    #[error("shape[{axis}] is {value}; dimensions must be non-negative")]
    NegativeDimension { axis: usize, value: i64 },

    #[error(
        "the tensor is too large to address (shape {shape:?}, strides {strides:?}): its element \
         count, dense size or byte span exceeds isize::MAX, or it reaches outside the address space"
    )]
    ExtentOverflow { shape: Vec<i64>, strides: Vec<i64> },

    #[error("the data pointer is null but the tensor has {elements} elements")]
    NullData { elements: usize },

    /// Raised by the layout planner, not by validation: a misaligned tensor is valid DLPack,
    /// it only cannot be a zero-copy view (Julia arrays are aligned).
    #[error(
        "a zero-copy view is impossible: the first element at {address:#x} (byte_offset \
         applied) is misaligned, not aligned to {align} bytes as {element} requires; allow a copy \
         (copy=true or copy=nothing) to get an aligned array"
    )]
    Misaligned {
        address: usize,
        align: usize,
        element: &'static str,
    },

    #[error(
        "dtype (code {}, bits {}, lanes {}) has {} lanes; vector dtypes have no Julia \
         element type, export the tensor with lanes = 1", .dtype.code.0, .dtype.bits, .dtype.lanes, .dtype.lanes
    )]
    VectorDtype { dtype: DLDataType },

    #[error("dtype code {} with {} bits is not a DLPack element type this library knows", .dtype.code.0, .dtype.bits)]
    UnsupportedDtype { dtype: DLDataType },

    #[error(
        "packed {bits}-bit elements (dtype code {code}) can only be imported from a compact \
         row-major tensor, as raw bytes; ask the producer for a contiguous tensor"
    )]
    PackedSubbyteLayout { code: u8, bits: u8 },

    #[error(
        "packed {bits}-bit elements (dtype code {code}) are smaller than a byte: no strided \
         array can index them; import a compact row-major tensor of them as raw bytes into an \
         Array instead (from_dlpack(Array, t))"
    )]
    PackedSubbyteStrided { code: u8, bits: u8 },

    #[error(
        "device {} (type {}, id {}) is not supported here; ask the producer for \
         dl_device=(CPU, 0){hint}", device_name(.device), .device.device_type.0, .device.device_id
    )]
    UnsupportedDevice {
        device: DLDevice,
        hint: &'static str,
    },

    #[error(
        "device type {device_type} (id {device_id}) is not a DLPack device type{}; refused \
         before anything reads the tensor (callers that know what the producer means can opt in \
         to unknown device types)",
        if *.device_type == 0 { " (0 is never valid)" } else { " this library knows" }
    )]
    UnknownDeviceType { device_type: u32, device_id: i32 },

    #[error(
        "a zero-copy view is impossible for shape {shape:?} with strides {strides:?} ({reason}); \
         allow a copy (copy=true or copy=nothing) to get a fresh array"
    )]
    CopyRequired {
        shape: Vec<i64>,
        strides: Vec<i64>,
        reason: CopyReason,
    },

    #[error(
        "the tensor is read-only and a writable array was requested; import it read-only or ask for a copy"
    )]
    ReadOnly,

    #[error(
        "the tensor is read-only and the requested array type has no read-only form (a typed \
         Array{{T,N}} or CuArray{{T,N}} is always writable); ask for ReadOnlyArray{{T,N}}, for the \
         untyped form with readonly=true, or for a copy (copy=true)"
    )]
    ReadOnlyIntoWritableType,

    #[error(
        "the tensor is on device {} (type {}, id {}), which {target} cannot hold; import host \
         memory into an Array and CUDA memory into a CuArray, or ask the producer for \
         dl_device=(CPU, 0)", device_name(.device), .device.device_type.0, .device.device_id
    )]
    NotOnTarget {
        device: DLDevice,
        target: &'static str,
    },

    #[error(
        "a CUDA array would need a copy here ({reason}), and RsDLPack copies on the host only; \
         ask the producer for a contiguous tensor (e.g. t.contiguous()) or import into an Array"
    )]
    DeviceCopyUnavailable { reason: CopyReason },

    #[error("the tensor's elements are {found}, not the requested {expected}")]
    TypeMismatch { expected: String, found: String },

    #[error("the tensor has {found} dimensions, not the requested {expected}")]
    RankMismatch { expected: usize, found: usize },

    #[error(
        "cannot export: the tensor is {property} and the consumer asked for a legacy \
         (unversioned) DLPack tensor, which cannot carry the {flag} flag; ask with \
         max_version=(1, x)"
    )]
    LegacyCannotCarry {
        flag: &'static str,
        property: &'static str,
    },

    #[error(
        "cannot export: {feature} needs DLPack 1.{needed_minor}, but the consumer accepts at \
         most 1.{allowed_minor}; ask with max_version=(1, {needed_minor}) or newer"
    )]
    VersionTooOld {
        feature: &'static str,
        needed_minor: u32,
        allowed_minor: u32,
    },

    /// The export plan's refusals (see [`crate::export::plan`]).
    #[error("cannot export a tensor on {device:?} to dl_device {wanted:?}{}", host_hint(.wanted))]
    ExportDevice { device: Device, wanted: Device },

    #[error("dl_device=(CPU, 0) needs a copy of this {device:?} tensor but copy=False")]
    HostCopyForbidden { device: Device },

    #[error(
        "copy=True of device memory is not supported by this exporter; ask for \
         dl_device=(CPU, 0) or copy on the consumer side"
    )]
    NoDeviceCopies,

    #[error("stream must be None for a CPU tensor, got {value:?}")]
    StreamOnCpu { value: Option<i64> },

    #[error(
        "copy=True of this {device:?} tensor makes a host copy, not one on \
         dl_device {device:?}; ask for dl_device=(CPU, 0)"
    )]
    HostCopyNotOnDevice { device: Device },

    #[error(
        "stream={value:?} cannot be honoured for a tensor on {device:?}: this exporter orders \
         CUDA and CUDA-managed memory only; pass stream=None or -1 and order the producer's \
         work yourself"
    )]
    StreamNotHonoured { value: Option<i64>, device: Device },

    #[error("cannot export: {dims} dims but {strides} strides were given")]
    DimsStridesMismatch { dims: usize, strides: usize },

    #[error("cannot export: dims {dims:?} or strides {strides:?} do not fit in i64")]
    ExportExtentOverflow {
        dims: Vec<usize>,
        strides: Vec<isize>,
    },

    /// dlpark refused metadata that our own checks had accepted.
    #[error("internal error in RsDLPack (please report): building the managed tensor: {reason}")]
    ExportMetadata { reason: String },

    #[error("cannot allocate {bytes} bytes for a copy")]
    AllocationFailed { bytes: usize },

    #[error("the copy destination holds {given} bytes but the tensor needs {needed}")]
    CopyDestinationSize { given: usize, needed: usize },

    #[error(
        "device {} (type {}, id {}) is not CUDA memory; this operation needs a CUDA tensor",
        device_name(.device), .device.device_type.0, .device.device_id
    )]
    NotCudaMemory { device: DLDevice },

    #[error(
        "no CUDA driver (libcuda) could be loaded on this machine; CUDA tensors need an NVIDIA \
         driver — import with dl_device=(CPU, 0) to get a host copy instead"
    )]
    NoCudaDriver,

    #[error(
        "the CUDA driver is present but cuInit failed ({message}); CUDA tensors cannot be used \
         here — import with dl_device=(CPU, 0) to get a host copy instead"
    )]
    CudaInit { message: String },

    /// `status` is the driver's `CUresult`.
    #[error("CUDA driver call {call} failed: {message}")]
    Cuda {
        call: &'static str,
        status: u32,
        message: String,
    },

    #[error(
        "the tensor's memory is not what its DLPack device says: the driver does not know \
         address {address:#x} on device {} (id {}) ({cause})",
        device_name(.device), .device.device_id
    )]
    CudaPointerUnknown {
        address: usize,
        device: DLDevice,
        cause: Box<Error>,
    },

    #[error(
        "the tensor's memory is not what its DLPack device says: device {} (id {}) claims \
         {expected}, but the driver reports memory type {memory_type}, device {device_ordinal}, \
         managed {managed}",
        device_name(.device), .device.device_id
    )]
    CudaPointerMismatch {
        device: DLDevice,
        expected: &'static str,
        memory_type: u32,
        device_ordinal: i32,
        managed: bool,
    },

    #[error(
        "stream=0 is disallowed by the DLPack specification (ambiguous); use 1 for the legacy \
         default stream or 2 for the per-thread default stream"
    )]
    StreamZero,

    #[error("stream={value} is not a valid DLPack stream (None, -1, 1, 2 or a handle > 2)")]
    InvalidStream { value: i64 },

    #[error(
        "stream handle {handle} is a default-stream alias with no context of its own; pass a \
         created stream (torch.cuda.current_stream().cuda_stream, cupy's stream.ptr)"
    )]
    DefaultStreamAlias { handle: usize },

    #[error(
        "this CUDA tensor was imported with stream=-1 (its consumer orders its own work), so its \
         release names no stream to wait for; pass the stream your work on it ran on \
         (rsdlpack_imported_release_after; Julia's RsDLPack.unsafe_free! passes the task's \
         CUDA.stream()) — this release waits instead for the device's whole context to be \
         synchronised, which only the explicit flush does (flush_releases, \
         rsdlpack_py_flush_releases: call it where no CUDA graph is being captured)"
    )]
    ReleaseNeedsStream,

    #[error(
        "the stream a CUDA tensor was used on is being captured into a graph, so its release \
         cannot wait for that work yet; release it after the capture has ended \
         (queued releases wait by themselves; an export's memory whose consumer released it \
         during a capture waits for `flush_releases` after the capture)"
    )]
    ReleaseDuringCapture,

    #[error(
        "the producer's CUDA stream is being captured into a graph, so the work that writes this \
         tensor has not run and nothing outside that capture can wait for it; hand the tensor \
         over after the capture has ended (or from a stream that is not capturing)"
    )]
    ProducerCapturing,
}

impl Error {
    /// The one decision of what kind of failure this is (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        use ErrorKind::*;
        match self {
            Self::NullTensor
            | Self::UnsupportedVersion { .. }
            | Self::UnknownFlags { .. }
            | Self::NullShape { .. }
            | Self::MissingStrides { .. }
            | Self::NegativeDimension { .. }
            | Self::ExtentOverflow { .. }
            | Self::NullData { .. }
            | Self::DimsStridesMismatch { .. }
            | Self::ExportExtentOverflow { .. }
            | Self::CopyDestinationSize { .. }
            | Self::NotCudaMemory { .. }
            | Self::CudaPointerUnknown { .. }
            | Self::CudaPointerMismatch { .. }
            | Self::StreamZero
            | Self::InvalidStream { .. }
            | Self::DefaultStreamAlias { .. }
            | Self::StreamOnCpu { .. }
            | Self::ReleaseNeedsStream
            | Self::ReleaseDuringCapture => InvalidInput,
            Self::BadRank { ndim, .. } if *ndim < 0 => InvalidInput,
            Self::BadRank { .. }
            | Self::Misaligned { .. }
            | Self::VectorDtype { .. }
            | Self::UnsupportedDtype { .. }
            | Self::PackedSubbyteLayout { .. }
            | Self::PackedSubbyteStrided { .. }
            | Self::UnsupportedDevice { .. }
            | Self::UnknownDeviceType { .. }
            | Self::CopyRequired { .. }
            | Self::ReadOnly
            | Self::ReadOnlyIntoWritableType
            | Self::LegacyCannotCarry { .. }
            | Self::VersionTooOld { .. }
            | Self::ExportDevice { .. }
            | Self::HostCopyForbidden { .. }
            | Self::NoDeviceCopies
            | Self::HostCopyNotOnDevice { .. }
            | Self::StreamNotHonoured { .. }
            | Self::ProducerCapturing
            | Self::NoCudaDriver
            | Self::CudaInit { .. }
            | Self::NotOnTarget { .. }
            | Self::DeviceCopyUnavailable { .. }
            | Self::TypeMismatch { .. }
            | Self::RankMismatch { .. } => BufferRefusal,
            Self::AllocationFailed { .. } => Resource,
            Self::Cuda { status, .. } if *status == CUDA_ERROR_OUT_OF_MEMORY => Resource,
            Self::Cuda { .. } => Driver,
            Self::ExportMetadata { .. } => Internal,
        }
    }
}

/// `CUDA_ERROR_OUT_OF_MEMORY`, the one driver status that is a resource failure.
const CUDA_ERROR_OUT_OF_MEMORY: u32 =
    cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY as u32;

/// `Result` with the core's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn device_name(device: &DLDevice) -> &'static str {
    crate::device::DeviceKind::name_of(device.device_type)
}

/// Where a consumer asked for another host than `(CPU, 0)`: what the host is called.
fn host_hint(wanted: &Device) -> &'static str {
    if wanted.kind == crate::device::DeviceKind::Cpu {
        "; the host is dl_device=(CPU, 0)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlpark::ffi::DLDeviceType;

    /// One example of each variant with its kind: adding a variant without deciding its kind
    /// fails to compile (the match in `kind` is exhaustive); changing a kind fails here.
    #[test]
    fn every_error_has_the_documented_kind() {
        use ErrorKind::*;
        let device = DLDevice {
            device_type: DLDeviceType::CUDA,
            device_id: 0,
        };
        let dtype = DLDataType::F32;
        let cases: Vec<(Error, ErrorKind)> = vec![
            (Error::NullTensor, InvalidInput),
            (
                Error::UnsupportedVersion {
                    found: 2,
                    supported: 1,
                },
                InvalidInput,
            ),
            (Error::UnknownFlags { bits: 8 }, InvalidInput),
            (Error::BadRank { ndim: -1, max: 32 }, InvalidInput),
            (Error::BadRank { ndim: 33, max: 32 }, BufferRefusal),
            (Error::NullShape { ndim: 1 }, InvalidInput),
            (
                Error::MissingStrides {
                    major: 1,
                    minor: 2,
                    ndim: 1,
                },
                InvalidInput,
            ),
            (
                Error::NegativeDimension { axis: 0, value: -1 },
                InvalidInput,
            ),
            (
                Error::ExtentOverflow {
                    shape: vec![],
                    strides: vec![],
                },
                InvalidInput,
            ),
            (Error::NullData { elements: 1 }, InvalidInput),
            (
                Error::Misaligned {
                    address: 1,
                    align: 8,
                    element: "Float64",
                },
                BufferRefusal,
            ),
            (Error::VectorDtype { dtype }, BufferRefusal),
            (Error::UnsupportedDtype { dtype }, BufferRefusal),
            (
                Error::PackedSubbyteLayout { code: 17, bits: 4 },
                BufferRefusal,
            ),
            (
                Error::PackedSubbyteStrided { code: 17, bits: 4 },
                BufferRefusal,
            ),
            (Error::UnsupportedDevice { device, hint: "" }, BufferRefusal),
            (
                Error::UnknownDeviceType {
                    device_type: 0,
                    device_id: 0,
                },
                BufferRefusal,
            ),
            (
                Error::CopyRequired {
                    shape: vec![],
                    strides: vec![],
                    reason: CopyReason::NoNest,
                },
                BufferRefusal,
            ),
            (Error::ReadOnly, BufferRefusal),
            (Error::ReadOnlyIntoWritableType, BufferRefusal),
            (
                Error::LegacyCannotCarry {
                    flag: "READ_ONLY",
                    property: "read-only",
                },
                BufferRefusal,
            ),
            (
                Error::VersionTooOld {
                    feature: "fp8",
                    needed_minor: 1,
                    allowed_minor: 0,
                },
                BufferRefusal,
            ),
            (
                Error::ExportDevice {
                    device: crate::Device::CPU,
                    wanted: crate::Device::CPU,
                },
                BufferRefusal,
            ),
            (
                Error::HostCopyForbidden {
                    device: crate::Device::CPU,
                },
                BufferRefusal,
            ),
            (Error::NoDeviceCopies, BufferRefusal),
            (Error::StreamOnCpu { value: Some(1) }, InvalidInput),
            (
                Error::HostCopyNotOnDevice {
                    device: crate::Device::CPU,
                },
                BufferRefusal,
            ),
            (
                Error::StreamNotHonoured {
                    value: Some(1),
                    device: crate::Device::CPU,
                },
                BufferRefusal,
            ),
            (
                Error::DimsStridesMismatch {
                    dims: 1,
                    strides: 2,
                },
                InvalidInput,
            ),
            (
                Error::ExportExtentOverflow {
                    dims: vec![],
                    strides: vec![],
                },
                InvalidInput,
            ),
            (
                Error::ExportMetadata {
                    reason: String::new(),
                },
                Internal,
            ),
            (Error::AllocationFailed { bytes: 1 }, Resource),
            (
                Error::CopyDestinationSize {
                    given: 1,
                    needed: 2,
                },
                InvalidInput,
            ),
            (Error::NotCudaMemory { device }, InvalidInput),
            (Error::ReleaseNeedsStream, InvalidInput),
            (Error::ReleaseDuringCapture, InvalidInput),
            (Error::ProducerCapturing, BufferRefusal),
            (Error::NoCudaDriver, BufferRefusal),
            (
                Error::CudaInit {
                    message: String::new(),
                },
                BufferRefusal,
            ),
            (
                Error::Cuda {
                    call: "cuMemAlloc",
                    status: CUDA_ERROR_OUT_OF_MEMORY,
                    message: String::new(),
                },
                Resource,
            ),
            (
                Error::Cuda {
                    call: "cuStreamGetCtx",
                    status: 1,
                    message: String::new(),
                },
                Driver,
            ),
            (
                Error::CudaPointerUnknown {
                    address: 0,
                    device,
                    cause: Box::new(Error::NullTensor),
                },
                InvalidInput,
            ),
            (
                Error::CudaPointerMismatch {
                    device,
                    expected: "",
                    memory_type: 1,
                    device_ordinal: 0,
                    managed: false,
                },
                InvalidInput,
            ),
            (Error::StreamZero, InvalidInput),
            (Error::InvalidStream { value: -5 }, InvalidInput),
            (Error::DefaultStreamAlias { handle: 1 }, InvalidInput),
            (
                Error::NotOnTarget {
                    device: crate::Device::CPU.to_dlpack(),
                    target: "a CUDA array (CuArray)",
                },
                BufferRefusal,
            ),
            (
                Error::DeviceCopyUnavailable {
                    reason: CopyReason::Misaligned,
                },
                BufferRefusal,
            ),
            (
                Error::TypeMismatch {
                    expected: "Float64".into(),
                    found: "Float32".into(),
                },
                BufferRefusal,
            ),
            (
                Error::RankMismatch {
                    expected: 3,
                    found: 2,
                },
                BufferRefusal,
            ),
        ];
        for (error, kind) in cases {
            assert_eq!(error.kind(), kind, "{error:?}");
        }
    }

    #[test]
    fn unknown_device_types_are_named_by_number() {
        let zero = Error::UnknownDeviceType {
            device_type: 0,
            device_id: 0,
        }
        .to_string();
        assert!(
            zero.starts_with("device type 0 ") && zero.contains("never valid"),
            "{zero}"
        );
        let future = Error::UnknownDeviceType {
            device_type: 99,
            device_id: 1,
        }
        .to_string();
        assert!(future.starts_with("device type 99 (id 1)"), "{future}");
    }
}
