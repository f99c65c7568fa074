//! The copy engine: any strided host tensor into a fresh, dense, column-major buffer.
//!
//! The buffer is aligned to 64 bytes because JAX copies (instead of sharing) anything less
//! aligned, and 64 is what Julia uses for large arrays. The result's dims are the planner's
//! result dims (see [`crate::dims::IndexOrder`]), first index fastest, so the Julia glue wraps
//! it with `unsafe_wrap(Array, ptr, dims)` and nothing else. Large copies are split across
//! rayon's threads: a contiguous one into a piece per thread, others by runs or bands of rows.
//!
//! The engine's parts, one concept each: `buffer` (where a copy lands), `merge` (the fewest dims
//! to walk), `runs` (copies along the output's first dim), `tiles` and `block` (cache-blocked
//! transposes) and `kernels` (the SIMD and streaming stores under them).

mod block;
mod buffer;
mod kernels;
mod merge;
mod runs;
mod tiles;

pub use buffer::{AlignedBuffer, BUFFER_ALIGN};

use crate::descriptor::TensorDescriptor;
use crate::dims::{DimVec, IndexOrder};
use crate::dtype::ElementType;
use crate::error::{Error, Result};
use merge::merge_dims;
use runs::{Runs, copy_contiguous};
use tiles::Tiles;

/// Below this many bytes a copy stays on the calling thread.
const PARALLEL_THRESHOLD: usize = 1 << 20;

/// Copies the tensor's elements into a fresh column-major buffer with dims in `order`.
///
/// # Safety
/// `descriptor` must describe memory that is readable by the host for the whole extent its
/// shape and strides address, and that nobody writes during the copy.
pub unsafe fn materialize(
    descriptor: &TensorDescriptor,
    order: IndexOrder,
) -> Result<AlignedBuffer> {
    check_host_readable(descriptor)?;
    let mut buffer = AlignedBuffer::try_zeroed(descriptor.dense_byte_size())?;
    // SAFETY: forwarded from this function's contract; the buffer has the dense size.
    unsafe { copy_into(descriptor, order, buffer.as_mut_slice()) }?;
    Ok(buffer)
}

/// Copies the tensor's elements into `out` (column-major, dims in `order`), for example the
/// memory of an `Array` that Julia just allocated. `out` must hold exactly
/// [`TensorDescriptor::dense_byte_size`] bytes.
///
/// # Safety
/// As [`materialize`].
pub unsafe fn copy_into(
    descriptor: &TensorDescriptor,
    order: IndexOrder,
    out: &mut [u8],
) -> Result<()> {
    check_host_readable(descriptor)?;
    let needed = descriptor.dense_byte_size();
    if out.len() != needed {
        return Err(Error::CopyDestinationSize {
            given: out.len(),
            needed,
        });
    }
    if out.is_empty() {
        return Ok(());
    }
    let source = descriptor.first_element() as *const u8;
    if let ElementType::PackedBits { .. } = descriptor.element() {
        // SAFETY: validation guaranteed a compact layout of exactly this many bytes.
        unsafe { std::ptr::copy_nonoverlapping(source, out.as_mut_ptr(), out.len()) };
        return Ok(());
    }
    let (mut shape, mut strides) = (DimVec::new(), DimVec::new());
    merge_dims(descriptor, order, &mut shape, &mut strides);
    if shape.is_empty() || (shape.len() == 1 && strides[0] == 1) {
        // SAFETY: the merged dims say the elements are `out.len()` consecutive bytes from
        // `source` (function contract), and `out` is ours.
        unsafe { copy_contiguous(source, out) };
        return Ok(());
    }
    let size = descriptor.element().size();
    match Tiles::new(&shape, &strides) {
        // SAFETY: forwarded from this function's contract; `out` holds exactly
        // `element_count × size` bytes (checked above).
        Some(tiles) => unsafe { by_element_size(&tiles, size, source, out) },
        // SAFETY: as above.
        None => unsafe { by_element_size(&Runs::new(&shape, &strides), size, source, out) },
    }
    Ok(())
}

/// A way of copying a strided tensor into a column-major buffer, for elements of `N` bytes.
trait StridedCopy {
    /// # Safety
    /// `source` must be readable at every element offset the shape and strides address;
    /// `out` must hold exactly the tensor's elements.
    unsafe fn copy<const N: usize>(&self, source: *const u8, out: &mut [u8]);
}

/// Runs `copier` for the element size at hand (moving `[u8; N]` values, whatever the type).
///
/// # Safety
/// As [`StridedCopy::copy`].
unsafe fn by_element_size(
    copier: &impl StridedCopy,
    size: usize,
    source: *const u8,
    out: &mut [u8],
) {
    // SAFETY: (all arms) forwarded from this function's contract.
    unsafe {
        match size {
            1 => copier.copy::<1>(source, out),
            2 => copier.copy::<2>(source, out),
            4 => copier.copy::<4>(source, out),
            8 => copier.copy::<8>(source, out),
            16 => copier.copy::<16>(source, out),
            other => unreachable!("no element type is {other} bytes"),
        }
    }
}

/// Refuses memory the host cannot read, before anything is allocated for it.
fn check_host_readable(descriptor: &TensorDescriptor) -> Result<()> {
    if !descriptor.device().kind.host_accessible() {
        return Err(Error::UnsupportedDevice {
            device: descriptor.device().to_dlpack(),
            hint: " or copy it on the device first",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
