//! Pointer-attribute checks: before anything wraps an imported CUDA, CUDAHost or CUDAManaged
//! tensor, the driver confirms the memory type, the device ordinal and the context.

use super::{DeviceContext, call};
use crate::descriptor::TensorDescriptor;
use crate::device::DeviceKind;
use crate::error::{Error, Result};
use cudarc::driver::sys;
use std::ffi::c_void;

/// What the driver says about a pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PointerInfo {
    /// `CU_MEMORYTYPE_*`: 1 host, 2 device, 4 unified.
    pub memory_type: u32,
    pub device_ordinal: i32,
    pub managed: bool,
    /// The `CUcontext` the allocation belongs to (0 when the driver reports none).
    pub context: usize,
}

const HOST: u32 = sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32;
const DEVICE: u32 = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32;

/// Queries the driver about `address`, with `ordinal`'s primary context current.
pub fn pointer_info(address: usize, ordinal: i32) -> Result<PointerInfo> {
    let _context = DeviceContext::enter(ordinal)?;
    let query = |attribute: sys::CUpointer_attribute, out: *mut c_void, what: &'static str| {
        // SAFETY: `out` points to a value of the size the attribute writes (u32/i32/pointer,
        // chosen per attribute below); the driver only reads `address`.
        call(
            unsafe { sys::cuPointerGetAttribute(out, attribute, address as sys::CUdeviceptr) },
            what,
        )
    };
    let mut memory_type: u32 = 0;
    let mut ordinal_found: i32 = -1;
    let mut managed: u32 = 0;
    let mut context: sys::CUcontext = std::ptr::null_mut();
    use sys::CUpointer_attribute as A;
    query(
        A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        (&raw mut memory_type).cast(),
        "cuPointerGetAttribute(MEMORY_TYPE)",
    )?;
    query(
        A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        (&raw mut ordinal_found).cast(),
        "cuPointerGetAttribute(DEVICE_ORDINAL)",
    )?;
    query(
        A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        (&raw mut managed).cast(),
        "cuPointerGetAttribute(IS_MANAGED)",
    )?;
    // Memory from the stream-ordered allocator (torch, CuPy pools) may have no context.
    let _ = query(
        A::CU_POINTER_ATTRIBUTE_CONTEXT,
        (&raw mut context).cast(),
        "cuPointerGetAttribute(CONTEXT)",
    );
    Ok(PointerInfo {
        memory_type,
        device_ordinal: ordinal_found,
        managed: managed != 0,
        context: context as usize,
    })
}

/// What `info` lacks to be memory of DLPack device `kind` with id `id`, or `None` when it is
/// that memory. Managed memory passes as kDLCUDA memory of any device: the driver reports it
/// as host or device memory "regardless of its physical location", and every device of the
/// process may use it.
fn mismatch(kind: DeviceKind, id: i32, info: &PointerInfo) -> Option<&'static str> {
    match kind {
        DeviceKind::Cuda if info.managed => None,
        DeviceKind::Cuda if info.memory_type != DEVICE => Some("device memory"),
        DeviceKind::Cuda if info.device_ordinal != id => Some("memory of this device ordinal"),
        DeviceKind::CudaManaged if !info.managed => Some("managed (unified) memory"),
        DeviceKind::CudaHost if info.memory_type != HOST => Some("page-locked host memory"),
        _ => None,
    }
}

/// Checks that a CUDA-family tensor's memory is what its DLPack device claims.
///
/// Without a usable driver the answer is that ([`Error::NoCudaDriver`] or
/// [`Error::CudaInit`]), not a verdict on the pointer: nothing is known about it then.
pub fn check_pointer(descriptor: &TensorDescriptor) -> Result<PointerInfo> {
    let kind = descriptor.device().kind;
    if !kind.is_cuda() {
        return Err(Error::NotCudaMemory {
            device: descriptor.device().to_dlpack(),
        });
    }
    super::driver()?;
    let id = descriptor.device().id;
    let ordinal = super::device_of_memory(kind, id, super::current_device()).unwrap_or(id);
    // With a driver, any failure (an ordinal that does not exist, an address it never saw)
    // means the tensor's claim is false.
    let info = pointer_info(descriptor.first_element(), ordinal).map_err(|cause| {
        Error::CudaPointerUnknown {
            address: descriptor.first_element(),
            device: descriptor.device().to_dlpack(),
            cause: Box::new(cause),
        }
    })?;
    match mismatch(kind, descriptor.device().id, &info) {
        Some(expected) => Err(Error::CudaPointerMismatch {
            device: descriptor.device().to_dlpack(),
            expected,
            memory_type: info.memory_type,
            device_ordinal: info.device_ordinal,
            managed: info.managed,
        }),
        None => Ok(info),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(memory_type: u32, device_ordinal: i32, managed: bool) -> PointerInfo {
        PointerInfo {
            memory_type,
            device_ordinal,
            managed,
            context: 0,
        }
    }

    #[test]
    fn managed_memory_passes_as_device_memory_wherever_the_driver_says_it_is() {
        for memory_type in [HOST, DEVICE] {
            assert_eq!(
                mismatch(DeviceKind::Cuda, 0, &info(memory_type, 0, true)),
                None
            );
            assert_eq!(
                mismatch(DeviceKind::Cuda, 1, &info(memory_type, 0, true)),
                None
            );
            assert_eq!(
                mismatch(DeviceKind::CudaManaged, 0, &info(memory_type, 0, true)),
                None
            );
        }
    }

    #[test]
    fn other_memory_must_be_what_its_device_says() {
        assert_eq!(mismatch(DeviceKind::Cuda, 0, &info(DEVICE, 0, false)), None);
        assert_eq!(
            mismatch(DeviceKind::Cuda, 0, &info(HOST, 0, false)),
            Some("device memory")
        );
        assert_eq!(
            mismatch(DeviceKind::Cuda, 1, &info(DEVICE, 0, false)),
            Some("memory of this device ordinal")
        );
        assert_eq!(
            mismatch(DeviceKind::CudaManaged, 0, &info(DEVICE, 0, false)),
            Some("managed (unified) memory")
        );
        assert_eq!(
            mismatch(DeviceKind::CudaHost, 0, &info(HOST, -1, false)),
            None
        );
        assert_eq!(
            mismatch(DeviceKind::CudaHost, 0, &info(DEVICE, 0, false)),
            Some("page-locked host memory")
        );
    }
}
