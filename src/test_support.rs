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

/// The test binary's allocator: the system's, counting each thread's allocations, so that a
/// test can show a call allocates nothing ([`allocations_during`]).
struct CountingAllocator;

std::thread_local! {
    static ALLOCATIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// contract; the count is a thread-local cell with a const initializer (it never allocates).
unsafe impl std::alloc::GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        // SAFETY: the caller's contract for `alloc` is the system allocator's.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        // SAFETY: as for `alloc`.
        unsafe { std::alloc::System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        // SAFETY: `ptr` came from this allocator, that is from the system's.
        unsafe { std::alloc::System.realloc(ptr, layout, size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: as for `realloc`.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// `f`'s result and how many allocations it made on this thread.
pub fn allocations_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = ALLOCATIONS.with(std::cell::Cell::get);
    let result = f();
    (result, ALLOCATIONS.with(std::cell::Cell::get) - before)
}

/// Asserts what happens without a driver (CI); scripts/test.sh skips the without_a_driver_*
/// tests where one exists (tests_gpu covers those cases there).
pub fn require_no_driver() {
    let here = crate::cuda::driver();
    assert!(
        matches!(here, Err(crate::Error::NoCudaDriver)),
        "asserts the no-driver behaviour, but this machine answers {here:?}: scripts/test.sh \
         skips without_a_driver_* tests where a driver exists"
    );
}
