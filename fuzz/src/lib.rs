//! What the fuzz targets share: input pieces that decode the same in every target that draws
//! them, and the helpers that build sources, flags and buffers from them or check the Python
//! error convention.
//!
//! A `#[derive(Arbitrary)]` type's variants, their order and their fields are the byte encoding
//! of a target's committed corpus and kept regressions (`fuzz/corpus`, `fuzz/regressions`).
//! An input type is therefore shared only where each target that uses it decoded exactly this
//! type before; a target whose choices differ (`exchange_api`'s devices add raw type and id
//! pairs, `validate_plan_copy` draws its own device kinds) keeps its own enum and maps it onto
//! the conversions here. Changing a shared type re-encodes every target that uses it.

use arbitrary::Arbitrary;
use pyo3::prelude::*;
use pyo3::types::PyType;
use rsdlpack::copy::AlignedBuffer;
use rsdlpack::dlpark::DlpackFlags;
use rsdlpack::dlpark::ffi::{DLDevice, DLDeviceType, DLPackVersion};
use rsdlpack::{Device, ElementType, ImportedTensor, ManagedTensor, TensorDescriptor};
use rsdlpack_python::ErrorCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A device kind, with a CUDA ordinal of 0..=2 (enough to differ from the source's).
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Dev {
    Cpu,
    Cuda(u8),
    CudaHost,
    CudaManaged,
    /// Any device type number (ROCm is 10; 0 is never valid).
    Other(u8),
}

impl Dev {
    pub fn to_dlpack(self) -> DLDevice {
        let (device_type, device_id) = match self {
            Dev::Cpu => (DLDeviceType::CPU, 0),
            Dev::Cuda(id) => (DLDeviceType::CUDA, i32::from(id % 3)),
            Dev::CudaHost => (DLDeviceType::CUDAHOST, 0),
            Dev::CudaManaged => (DLDeviceType::CUDAMANAGED, 0),
            Dev::Other(t) => (DLDeviceType(u32::from(t)), 0),
        };
        DLDevice {
            device_type,
            device_id,
        }
    }

    pub fn device(self) -> Device {
        Device::from_dlpack(self.to_dlpack())
    }
}

/// DLPack flags from an input's low three bits (READ_ONLY, IS_COPIED, IS_SUBBYTE_TYPE_PADDED)
/// and, sometimes, one unknown bit (3..=63).
pub fn dlpack_flags(bits: u8, unknown: Option<u8>) -> DlpackFlags {
    let mut flags = DlpackFlags::from_bits_retain(u64::from(bits & 7));
    if let Some(bit) = unknown {
        flags |= DlpackFlags::from_bits_retain(1 << (3 + u32::from(bit) % 61));
    }
    flags
}

/// A buffer of `len` bytes, byte `j` being `j · multiplier ^ mask` (so that copies can be told
/// from the source and misplaced elements show).
pub fn patterned_buffer(len: usize, multiplier: u8, mask: u8) -> AlignedBuffer {
    let buffer = AlignedBuffer::zeroed(len);
    for j in 0..len {
        // SAFETY: inside the buffer, which nobody else sees yet.
        unsafe {
            buffer
                .as_ptr()
                .add(j)
                .write((j as u8).wrapping_mul(multiplier) ^ mask)
        };
    }
    buffer
}

/// Counts releases of a source's owner (each must happen exactly once).
pub struct Counted(pub Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// What a small dense source tensor is: rank `rank % 3`, each dim `dims[k] % 4`.
pub struct SmallSource {
    pub device: Device,
    pub element: ElementType,
    pub rank: u8,
    pub dims: [u8; 2],
    /// Row-major strides (packed sub-byte types allow no other layout).
    pub row_major: bool,
    pub read_only: bool,
    pub is_copied: bool,
}

impl SmallSource {
    /// The tensor over `buffer`, exported as a versioned managed tensor whose owner holds the
    /// buffer and a [`Counted`] on `count`, and imported back: what a target wraps in an
    /// exporter.
    pub fn over(&self, buffer: AlignedBuffer, count: &Arc<AtomicUsize>) -> ImportedTensor {
        let rank = usize::from(self.rank % 3);
        let shape: Vec<i64> = self.dims[..rank]
            .iter()
            .map(|&d| i64::from(d % 4))
            .collect();
        let spec = TensorDescriptor::compact(
            buffer.as_ptr() as usize,
            self.device,
            self.element,
            &shape,
            self.row_major,
        )
        .unwrap_or_else(|e| panic!("a small dense source is not valid: {e}"))
        .with_read_only(self.read_only)
        .with_is_copied(self.is_copied);
        let owner = (buffer, Counted(Arc::clone(count)));
        let minor = DLPackVersion::CURRENT.minor;
        let managed = match rsdlpack::export::export_versioned(&spec, owner, minor) {
            Ok(managed) => managed,
            Err(e) => panic!("a small dense source does not export: {e}; {spec:?}"),
        };
        ImportedTensor::new(ManagedTensor::Versioned(managed)).expect("validated on export")
    }
}

/// The Python exception of each error code (the table in `bridges/python/src/error.rs`).
pub fn exception_for(py: Python<'_>, code: ErrorCode) -> Bound<'_, PyType> {
    use pyo3::exceptions::*;
    match code {
        ErrorCode::Invalid => py.get_type::<PyValueError>(),
        ErrorCode::Buffer | ErrorCode::Declined => py.get_type::<PyBufferError>(),
        ErrorCode::NotDlpack => py.get_type::<PyTypeError>(),
        ErrorCode::Resource => py.get_type::<PyMemoryError>(),
        ErrorCode::Producer
        | ErrorCode::Driver
        | ErrorCode::Interpreter
        | ErrorCode::Internal => py.get_type::<PyRuntimeError>(),
    }
}

/// Whether `element` is a padded sub-byte type (IS_SUBBYTE_TYPE_PADDED on export).
pub fn is_padded(element: ElementType) -> bool {
    matches!(element, ElementType::RawBytes { bits, .. } if bits < 8)
}
