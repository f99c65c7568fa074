//! The C exchange API's `managed_tensor_allocator`: a fresh, zeroed, row-major host tensor
//! aligned to 64 bytes (the copy engine's [`AlignedBuffer`]), whose deleter frees the buffer.
//! Host only. Unlike the table's other functions it reports errors through the caller's
//! `set_error(error_ctx, kind, message)`, naming a Python exception, and returns -1.

use crate::error::BridgeError;
use rsdlpack::copy::AlignedBuffer;
use rsdlpack::dlpark::ffi::{DLDataType, DLManagedTensorVersioned, DLPackVersion, DLTensor};
use rsdlpack::{Device, DeviceKind, ElementType, MAX_NDIM, TensorDescriptor};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Why an allocation was refused; [`Refusal::exception`] names the Python exception.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error("{0} must not be null")]
    Null(&'static str),

    #[error("managed_tensor_allocator: only host (CPU) tensors are allocated here, not {0:?}")]
    NotHost(Device),

    #[error("managed_tensor_allocator: sub-byte element types ({0:?}) are not allocated here")]
    Packed(DLDataType),

    #[error("managed_tensor_allocator: ndim {0} is not in 0..={MAX_NDIM}")]
    Rank(i32),

    #[error("managed_tensor_allocator: ndim is {0} but shape is null")]
    NullShape(usize),

    #[error("managed_tensor_allocator: shape {shape:?} of {element:?} overflows isize bytes")]
    TooLarge {
        shape: Vec<i64>,
        element: ElementType,
    },

    /// The core refused the prototype.
    #[error("managed_tensor_allocator: {0}")]
    Invalid(rsdlpack::Error),

    #[error("managed_tensor_allocator: {0}")]
    OutOfMemory(rsdlpack::Error),

    #[error(transparent)]
    Panic(BridgeError),
}

impl Refusal {
    fn exception(&self) -> &'static CStr {
        match self {
            Self::NotHost(_) => c"BufferError",
            Self::OutOfMemory(_) => c"MemoryError",
            Self::Panic(_) => c"RuntimeError",
            _ => c"ValueError",
        }
    }
}

/// `managed_tensor_allocator`: a fresh host tensor shaped like `prototype`.
///
/// # Safety
/// `prototype` must be null (refused) or a readable `DLTensor` whose `shape` holds `ndim`
/// values; `out` writable (or null, refused); `set_error`, if not null, callable with
/// `error_ctx`.
pub(super) unsafe extern "C" fn managed_tensor_allocator(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    set_error: Option<unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char)>,
) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        if out.is_null() {
            return Err(Refusal::Null("out"));
        }
        // SAFETY: null or a readable DLTensor (contract).
        let prototype = unsafe { prototype.as_ref() }.ok_or(Refusal::Null("prototype"))?;
        // SAFETY: `prototype.shape` holds `ndim` values (contract).
        let tensor = unsafe { allocate(prototype) }?;
        // SAFETY: `out` is writable (checked non-null; contract); ownership passes on.
        unsafe { *out = tensor.into_raw() };
        Ok(())
    }));
    let refusal = match outcome {
        Ok(Ok(())) => return 0,
        Ok(Err(refusal)) => refusal,
        Err(panic) => Refusal::Panic(BridgeError::panic("'s managed_tensor_allocator", &*panic)),
    };
    if let Some(set_error) = set_error {
        let kind = refusal.exception();
        let message = CString::new(refusal.to_string().replace('\0', " ")).unwrap_or_default();
        // SAFETY: `set_error` is callable with `error_ctx` (contract); both strings live for
        // the call.
        let _ = catch_unwind(|| unsafe { set_error(error_ctx, kind.as_ptr(), message.as_ptr()) });
    }
    -1
}

/// The allocation itself: validates `prototype`'s device, dtype and shape, then exports a
/// zeroed, 64-byte-aligned, row-major buffer owned by the tensor.
///
/// # Safety
/// `prototype.shape` must hold `prototype.ndim` readable values when `ndim > 0`.
unsafe fn allocate(
    prototype: &DLTensor,
) -> Result<rsdlpack::dlpark::Managed<DLManagedTensorVersioned>, Refusal> {
    let device = Device::from_dlpack(prototype.device);
    if device.kind != DeviceKind::Cpu {
        return Err(Refusal::NotHost(device));
    }
    let element = ElementType::from_dlpack(prototype.dtype, false).map_err(Refusal::Invalid)?;
    if matches!(element, ElementType::PackedBits { .. }) {
        return Err(Refusal::Packed(prototype.dtype));
    }
    // SAFETY: forwarded from this function's contract.
    let shape = unsafe { shape_of(prototype) }?;
    // The core's count, as validation makes it (an empty shape holds no bytes however large
    // its other dimensions).
    let bytes = rsdlpack::descriptor::compact_byte_size(element, shape).map_err(|e| match e {
        rsdlpack::Error::ExtentOverflow { .. } => Refusal::TooLarge {
            shape: shape.to_vec(),
            element,
        },
        other => Refusal::Invalid(other),
    })?;
    let buffer = AlignedBuffer::try_zeroed(bytes).map_err(Refusal::OutOfMemory)?;
    let described =
        TensorDescriptor::compact(buffer.as_ptr() as usize, Device::CPU, element, shape, true)
            .map_err(Refusal::Invalid)?;
    rsdlpack::export::export_versioned(&described, buffer, DLPackVersion::CURRENT.minor)
        .map_err(Refusal::Invalid)
}

/// The prototype's shape, its rank checked.
///
/// # Safety
/// As [`allocate`].
unsafe fn shape_of(prototype: &DLTensor) -> Result<&[i64], Refusal> {
    let ndim = usize::try_from(prototype.ndim)
        .ok()
        .filter(|&n| n <= MAX_NDIM)
        .ok_or(Refusal::Rank(prototype.ndim))?;
    if ndim == 0 {
        Ok(&[])
    } else if prototype.shape.is_null() {
        Err(Refusal::NullShape(ndim))
    } else {
        // SAFETY: non-null and holding `ndim` values (contract).
        Ok(unsafe { std::slice::from_raw_parts(prototype.shape, ndim) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsdlpack::dlpark::ffi::{DLDataTypeCode, DLDevice, DLDeviceType};
    use rsdlpack::{ImportedTensor, ManagedTensor};

    fn prototype(shape: &mut [i64]) -> DLTensor {
        DLTensor {
            data: std::ptr::null_mut(),
            device: DLDevice {
                device_type: DLDeviceType::CPU,
                device_id: 0,
            },
            ndim: shape.len() as i32,
            dtype: DLDataType::scalar(DLDataTypeCode::FLOAT, 32),
            shape: shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        }
    }

    /// Found by `fuzz/fuzz_targets/exchange_api.rs`: an empty prototype whose other dimensions
    /// overflow before its zero, `[i64::MAX, 0, 0]` of f32, was refused as "overflows isize
    /// bytes" although it holds none (and is a valid DLPack tensor).
    #[test]
    fn an_empty_prototype_is_allocated_however_large_its_other_dimensions() {
        for mut shape in [
            vec![i64::MAX, 0, 0],
            vec![1 << 62, 1 << 62, 0],
            vec![0, i64::MAX],
        ] {
            let mut proto = prototype(&mut shape);
            let mut out = std::ptr::null_mut();
            // SAFETY: the prototype's shape holds ndim values; `out` is writable.
            let status = unsafe {
                managed_tensor_allocator(&mut proto, &mut out, std::ptr::null_mut(), None)
            };
            assert_eq!(status, 0, "{shape:?}");
            // SAFETY: on success `out` is an owned tensor.
            let managed = unsafe { ManagedTensor::from_versioned_raw(out) }.unwrap();
            let imported = ImportedTensor::new(managed).unwrap();
            let d = imported.descriptor();
            assert_eq!(d.shape(), &shape[..]);
            assert_eq!(d.element_count(), 0);
        }
        // Not empty: still refused.
        let mut shape = vec![i64::MAX, 2];
        let mut proto = prototype(&mut shape);
        let mut out = std::ptr::null_mut();
        // SAFETY: as above.
        let status =
            unsafe { managed_tensor_allocator(&mut proto, &mut out, std::ptr::null_mut(), None) };
        assert_eq!(status, -1);
    }
}
