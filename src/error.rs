//! The core's one error type. Every message names the offending input and, where there is one,
//! what the caller can do instead; the bridges turn these into Python exceptions or Julia
//! exceptions without rewording them.

use dlpark::ffi::{DLDataType, DLDevice};

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

    #[error(
        "data pointer {address:#x} (byte_offset applied) is not aligned to {align} bytes as \
         {element} requires; ask for a copy (copy=true) to get an aligned array"
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
        "device {} (type {}, id {}) is not supported here; ask the producer for \
         dl_device=(CPU, 0){hint}", device_name(.device), .device.device_type.0, .device.device_id
    )]
    UnsupportedDevice {
        device: DLDevice,
        hint: &'static str,
    },

    #[error(
        "a zero-copy view is impossible for shape {shape:?} with strides {strides:?} ({reason}); \
         allow a copy (copy=true or copy=nothing) to get a fresh array"
    )]
    CopyRequired {
        shape: Vec<i64>,
        strides: Vec<i64>,
        reason: &'static str,
    },

    #[error(
        "the tensor is read-only and a writable array was requested; import it read-only or ask for a copy"
    )]
    ReadOnly,

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
    DeviceCopyUnavailable { reason: &'static str },

    #[error("the tensor's elements are {found}, not the requested {expected}")]
    TypeMismatch { expected: String, found: String },

    #[error("the tensor has {found} dimensions, not the requested {expected}")]
    RankMismatch { expected: usize, found: usize },

    #[error("cannot export: {0}")]
    Export(String),

    #[error(
        "no CUDA driver (libcuda) could be loaded on this machine; CUDA tensors need an NVIDIA \
         driver — import with dl_device=(CPU, 0) to get a host copy instead"
    )]
    NoCudaDriver,

    #[error("CUDA driver call {call} failed: {message}")]
    Cuda { call: &'static str, message: String },

    #[error("the tensor's memory is not what its DLPack device says: {0}")]
    CudaPointer(String),

    #[error("{0}")]
    Stream(String),
}

impl Error {
    /// Whether this is one of the DLPack specification's `BufferError` cases: the tensor cannot
    /// be exchanged as asked (layout, dtype, device, read-only, or a copy that is forbidden),
    /// as opposed to input that is simply invalid.
    pub fn is_exchange_refusal(&self) -> bool {
        matches!(
            self,
            Self::CopyRequired { .. }
                | Self::UnsupportedDevice { .. }
                | Self::Export(_)
                | Self::ReadOnly
                | Self::VectorDtype { .. }
                | Self::NoCudaDriver
                | Self::NotOnTarget { .. }
                | Self::DeviceCopyUnavailable { .. }
                | Self::TypeMismatch { .. }
                | Self::RankMismatch { .. }
        )
    }
}

/// `Result` with the core's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn device_name(device: &DLDevice) -> &'static str {
    crate::device::DeviceKind::name_of(device.device_type)
}
