//! Helpers shared by the core's unit tests.

use crate::device::Device;
use crate::dtype::ElementType;
use crate::export::export_versioned;
use dlpark::ffi::DLManagedTensorVersioned;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A host descriptor built directly (no validation), for tests that plan, copy or export.
pub fn host_descriptor(
    first_element: usize,
    shape: &[i64],
    strides: &[i64],
    element: ElementType,
) -> crate::TensorDescriptor {
    descriptor_on(Device::CPU, first_element, shape, strides, element)
}

/// A descriptor on `device` built directly (no validation).
pub fn descriptor_on(
    device: Device,
    first_element: usize,
    shape: &[i64],
    strides: &[i64],
    element: ElementType,
) -> crate::TensorDescriptor {
    crate::TensorDescriptor::unchecked_for_tests(first_element, device, element, shape, strides)
}

/// An owner that counts how often it has been released.
pub struct CountingOwner(Arc<AtomicUsize>);

impl CountingOwner {
    pub fn new() -> (Self, Arc<AtomicUsize>) {
        let count = Arc::new(AtomicUsize::new(0));
        (Self(Arc::clone(&count)), count)
    }

    pub fn releases(count: &Arc<AtomicUsize>) -> usize {
        count.load(Ordering::SeqCst)
    }
}

impl Drop for CountingOwner {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A raw versioned Float32 tensor over a leaked buffer, whose owner counts releases. The
/// metadata is written without validation so that tests can build invalid tensors.
pub fn counted_versioned(
    shape: &[i64],
    strides: &[i64],
) -> (*mut DLManagedTensorVersioned, Arc<AtomicUsize>) {
    static DATA: [f32; 64] = [0.0; 64];
    let ones = vec![1; shape.len()];
    let spec = crate::TensorDescriptor::unchecked_for_tests(
        DATA.as_ptr() as usize,
        Device::CPU,
        ElementType::Float32,
        &ones,
        &ones,
    );
    let (owner, count) = CountingOwner::new();
    let raw = export_versioned(&spec, owner, 3).unwrap().into_raw();
    // SAFETY: `raw` is ours; its shape and strides arrays have `shape.len()` entries.
    unsafe {
        let tensor = &mut (*raw).dl_tensor;
        std::ptr::copy_nonoverlapping(shape.as_ptr(), tensor.shape, shape.len());
        std::ptr::copy_nonoverlapping(strides.as_ptr(), tensor.strides, strides.len());
    }
    (raw, count)
}
