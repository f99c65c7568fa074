//! Device → host copies, for `__dlpack__(dl_device=(CPU, 0))` on a CUDA tensor.
//!
//! The bytes the tensor spans are copied on a private stream that first waits for the event
//! marking the producer's writes ([`ReadyEvent`]), and that stream (only) is synchronised — the
//! host must hold the data before it returns it. A non-compact tensor is then compacted on the
//! host by the copy engine.
//!
//! The copy blocks the calling thread until the device has finished the producer's work and
//! the copy (a pageable `cuMemcpyDtoHAsync` returns only when done): callers holding a lock
//! others need (Python's GIL) let go of it around [`copy_to_host`], which touches no Python.
//! Every driver call runs with the thread's capture mode relaxed (the private stream's
//! creation, the synchronisation), so a graph capture on another thread is left valid.

use super::call;
use super::context::HeldContext;
use super::order::ReadyEvent;
use crate::copy::{AlignedBuffer, materialize};
use crate::descriptor::TensorDescriptor;
use crate::device::Device;
use crate::dims::IndexOrder;
use crate::error::{Error, Result};
use cudarc::driver::sys;

/// A host copy of a device tensor: the buffer, and its descriptor (row-major compact).
pub struct HostCopy {
    pub buffer: AlignedBuffer,
    pub descriptor: TensorDescriptor,
}

/// Copies `descriptor`'s elements from the device, after `ready` (the producer's writes; `None`
/// when nothing was written on a stream).
///
/// # Safety
/// `descriptor` must describe live device memory (a validated import).
pub unsafe fn copy_to_host(
    descriptor: &TensorDescriptor,
    ready: Option<&ReadyEvent>,
) -> Result<HostCopy> {
    if descriptor.device().kind != crate::device::DeviceKind::Cuda {
        return Err(Error::NotCudaMemory {
            device: descriptor.device().to_dlpack(),
        });
    }
    let context = HeldContext::primary(descriptor.device().id)?;
    let _current = context.enter()?;
    let (low, high) = descriptor.byte_span();
    let span = AlignedBuffer::try_zeroed((high - low) as usize)?;
    if !span.is_empty() {
        let source = (descriptor.first_element() as i64 + low) as sys::CUdeviceptr;
        let stream = PrivateStream::create()?;
        if let Some(ready) = ready {
            // SAFETY: our live stream.
            unsafe { ready.order_before(stream.0 as usize) }?;
        }
        let (destination, bytes) = (span.as_ptr().cast(), span.len());
        // SAFETY: `span` holds exactly the bytes the tensor spans on the device; the source
        // range is the tensor's own extent (validated at import); the stream is ours.
        let status = unsafe { sys::cuMemcpyDtoHAsync_v2(destination, source, bytes, stream.0) };
        call(status, "cuMemcpyDtoHAsync")?;
        // SAFETY: our live stream.
        let status = unsafe { sys::cuStreamSynchronize(stream.0) };
        call(status, "cuStreamSynchronize")?;
    }
    let on_host = descriptor.moved_to((span.as_ptr() as i64 - low) as usize, Device::CPU)?;
    if on_host.is_row_major_compact() {
        return Ok(HostCopy {
            buffer: span,
            descriptor: on_host,
        });
    }
    // SAFETY: `on_host` describes `span`, which we own and nobody writes.
    let buffer = unsafe { materialize(&on_host, IndexOrder::Reversed) }?;
    let compact = TensorDescriptor::compact(
        buffer.as_ptr() as usize,
        Device::CPU,
        on_host.element(),
        on_host.shape(),
        true,
    )?
    .with_is_copied(true);
    Ok(HostCopy {
        buffer,
        descriptor: compact,
    })
}

/// A non-blocking stream of the current context, destroyed on drop.
struct PrivateStream(sys::CUstream);

impl PrivateStream {
    fn create() -> Result<Self> {
        let mut stream: sys::CUstream = std::ptr::null_mut();
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
        // SAFETY: out-pointer valid; a context is current (the caller entered one).
        let status = unsafe { sys::cuStreamCreate(&mut stream, flags) };
        call(status, "cuStreamCreate")?;
        Ok(Self(stream))
    }
}

impl Drop for PrivateStream {
    fn drop(&mut self) {
        // SAFETY: our stream, destroyed once; errors are ignored in Drop.
        let _ = unsafe { sys::cuStreamDestroy_v2(self.0) };
    }
}
