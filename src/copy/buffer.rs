//! The buffers copies land in: aligned, zero-filled, and mapped from the kernel when large.

use crate::error::{Error, Result};
use std::alloc::Layout;
use std::ptr::NonNull;

/// Alignment of every buffer the copy engine returns.
pub const BUFFER_ALIGN: usize = 64;

/// Gives the dangling pointer of an empty buffer the promised alignment.
#[repr(align(64))]
struct Aligned;

const _: () = assert!(std::mem::align_of::<Aligned>() == BUFFER_ALIGN);

/// Buffers of at least this many bytes are mapped from the kernel directly (see
/// [`AlignedBuffer`]).
const MAPPED_THRESHOLD: usize = 4 << 20;

/// A heap buffer aligned to [`BUFFER_ALIGN`], zero-filled, freed on drop.
///
/// Large buffers (≥ 4 MiB) are anonymous mappings on Linux rather than allocator memory: the
/// allocator's aligned `alloc_zeroed` writes zeros over every page before the copy writes the
/// data (a second pass over the whole buffer), whereas a new mapping is zero already and its
/// pages arrive on first write. They are marked for transparent huge pages where the kernel
/// offers them (`madvise` mode), so a 1 GiB copy takes ~512 page faults instead of ~262,000.
/// Reusing buffers across copies is not done: each copy's buffer is owned by the tensor it
/// backs.
pub struct AlignedBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is plain bytes exclusively owned by this value.
unsafe impl Send for AlignedBuffer {}
// SAFETY: shared access only reads through `&self`.
unsafe impl Sync for AlignedBuffer {}

impl AlignedBuffer {
    /// A zero-filled buffer of `len` bytes; an error (not an abort) when the memory cannot be
    /// had, since `len` may come from a tensor's shape.
    pub fn try_zeroed(len: usize) -> Result<Self> {
        if len == 0 {
            // An aligned dangling pointer: never dereferenced, never freed.
            return Ok(Self {
                ptr: NonNull::<Aligned>::dangling().cast(),
                len,
            });
        }
        let too_big = || Error::AllocationFailed { bytes: len };
        if Self::is_mapped(len) {
            return mapped::zeroed(len)
                .map(|ptr| Self { ptr, len })
                .ok_or_else(too_big);
        }
        let layout = Layout::from_size_align(len, BUFFER_ALIGN).map_err(|_| too_big())?;
        // SAFETY: `layout` has non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(too_big)?;
        Ok(Self { ptr, len })
    }

    /// As [`Self::try_zeroed`], for sizes the caller knows to be reasonable.
    pub fn zeroed(len: usize) -> Self {
        Self::try_zeroed(len).expect("allocation of a known-small buffer")
    }

    fn is_mapped(len: usize) -> bool {
        cfg!(target_os = "linux") && len >= MAPPED_THRESHOLD
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, BUFFER_ALIGN).expect("checked when the buffer was allocated")
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` initialised bytes (zeroed at allocation).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        if Self::is_mapped(self.len) {
            // SAFETY: mapped by `mapped::zeroed` with this length, unmapped once, here.
            unsafe { mapped::unmap(self.ptr, self.len) };
        } else {
            // SAFETY: allocated in `try_zeroed` with this very layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) };
        }
    }
}

/// Anonymous mappings for large buffers (Linux).
#[cfg(target_os = "linux")]
mod mapped {
    use std::ptr::NonNull;

    /// `len` zero bytes, page-aligned (so aligned to `BUFFER_ALIGN`), or `None`.
    pub fn zeroed(len: usize) -> Option<NonNull<u8>> {
        // SAFETY: a fresh private anonymous mapping: no file, no address hint, no aliasing.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        // Advice only: without transparent huge pages the mapping works the same.
        // SAFETY: the range is the mapping just made.
        unsafe { libc::madvise(raw, len, libc::MADV_HUGEPAGE) };
        NonNull::new(raw.cast())
    }

    /// # Safety
    /// `ptr` and `len` must be a mapping from [`zeroed`], not used afterwards.
    pub unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
        // SAFETY: forwarded; an unmap error would mean a bad range, which the contract rules out.
        unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
    }
}

#[cfg(not(target_os = "linux"))]
mod mapped {
    use std::ptr::NonNull;

    pub fn zeroed(_len: usize) -> Option<NonNull<u8>> {
        unreachable!("only Linux maps buffers")
    }

    pub unsafe fn unmap(_ptr: NonNull<u8>, _len: usize) {
        unreachable!("only Linux maps buffers")
    }
}
