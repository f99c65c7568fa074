//! The copy engine: any strided host tensor into a fresh, dense, column-major buffer.
//!
//! The buffer is aligned to 64 bytes because JAX copies (instead of sharing) anything less
//! aligned, and 64 is what Julia uses for large arrays. The result's dims are the planner's
//! result dims (see [`crate::dims::IndexOrder`]), first index fastest, so the Julia glue wraps
//! it with `unsafe_wrap(Array, ptr, dims)` and nothing else. Large copies are split across
//! rayon's threads: a contiguous one into a piece per thread, others by runs or bands of rows.

use crate::descriptor::TensorDescriptor;
use crate::dims::{DimVec, IndexOrder};
use crate::dtype::ElementType;
use crate::error::{Error, Result};
use rayon::prelude::*;
use std::alloc::Layout;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

/// Alignment of every buffer the copy engine returns.
pub const BUFFER_ALIGN: usize = 64;

/// Below this many bytes a copy stays on the calling thread.
const PARALLEL_THRESHOLD: usize = 1 << 20;

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

/// The tensor's dims in `order` without its size-1 dims, each merged into the dim before it
/// where the source steps through the two as through one (its stride is the previous stride
/// times the previous extent). The output is dense column-major, so it steps through such a
/// pair as one too: a column-major source becomes a single dim of stride 1, and a transpose
/// of several dims the fewest planes. Empty for a one-element tensor. Written into the
/// caller's empty lists: returned, the two 32-slot lists would be moved whole, a `memcpy` that
/// small copies feel (BENCHMARKS.md, "Measured choices").
fn merge_dims(
    descriptor: &TensorDescriptor,
    order: IndexOrder,
    merged_shape: &mut DimVec<i64>,
    merged_strides: &mut DimVec<i64>,
) {
    let mut merge = |(&n, &s): (&i64, &i64)| {
        if n == 1 {
            return;
        }
        if let (Some(last_n), Some(&last_s)) = (merged_shape.last_mut(), merged_strides.last()) {
            // The merged extent is a product of extents, at most the element count.
            if last_s.checked_mul(*last_n) == Some(s) {
                *last_n *= n;
                return;
            }
        }
        merged_shape.push(n);
        merged_strides.push(s);
    };
    let dims = descriptor.shape().iter().zip(descriptor.strides());
    match order {
        IndexOrder::Producer => dims.for_each(&mut merge),
        IndexOrder::Reversed => dims.rev().for_each(&mut merge),
    }
}

/// Copies `out.len()` consecutive bytes from `source`, split across rayon's threads when large.
///
/// # Safety
/// `source` must be readable for `out.len()` bytes, none of them inside `out`.
unsafe fn copy_contiguous(source: *const u8, out: &mut [u8]) {
    if out.len() < PARALLEL_THRESHOLD {
        // SAFETY: forwarded from this function's contract.
        unsafe { std::ptr::copy_nonoverlapping(source, out.as_mut_ptr(), out.len()) };
        return;
    }
    // One piece per thread: a single long `memcpy` streams its stores past the caches,
    // short ones do not.
    let piece = out
        .len()
        .div_ceil(rayon::current_num_threads())
        .next_multiple_of(BUFFER_ALIGN);
    let source_address = source as usize;
    out.par_chunks_mut(piece)
        .enumerate()
        .for_each(|(k, chunk)| {
            let source = source_address as *const u8;
            // SAFETY: bytes `k * piece..` of the source, as many as `chunk` holds (contract).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    source.add(k * piece),
                    chunk.as_mut_ptr(),
                    chunk.len(),
                )
            };
        });
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

/// Bytes of the local tile a transpose goes through: half of L1, leaving room for the source
/// and output lines in flight.
const TILE_BYTES: usize = 16 << 10;

/// Rows and columns of the tile for `n`-byte elements: every output column piece written
/// (rows × n bytes) and every source row piece read (columns × n) is 128–512 contiguous bytes,
/// and the tile fits in [`TILE_BYTES`]: shorter pieces written across columns cost more than
/// a sequential write of the same bytes, and larger tiles gained nothing (the shapes tried,
/// side by side: BENCHMARKS.md, "Measured choices").
const fn tile_shape(n: usize) -> (usize, usize) {
    match n {
        1 => (128, 128),
        2 => (64, 128),
        4 => (64, 64),
        _ => (32, 32),
    }
}

/// Outputs from this many bytes on are written with non-temporal stores (x86_64): they cannot
/// stay in a core's caches anyway, and plain stores first read every output line from memory,
/// an extra pass over memory for a large transpose (BENCHMARKS.md, "Measured choices").
const STREAM_THRESHOLD: usize = 8 << 20;

/// Outputs of at most this many bytes (the tile's size) are transposed straight into place.
const DIRECT_THRESHOLD: usize = TILE_BYTES;

/// The local tile, aligned so that its columns start on cache lines.
#[repr(C, align(64))]
struct TileBuffer([MaybeUninit<u8>; TILE_BYTES]);

/// A copy whose output's fastest dimension (0) is not the source's: gathering along dim 0
/// would read one element per cache line. Instead the plane of dim 0 and the dimension `t`
/// the source is fastest along is copied tile by tile (a cache-blocked transpose), so that
/// every cache line read or written is used whole while it is hot.
struct Tiles<'a> {
    shape: &'a [i64],
    strides: &'a [i64],
    /// The dimension (≥ 1) with the smallest |source stride|, smaller than dim 0's.
    t: usize,
    /// Output stride of dim `t`, in elements (the product of the dims before it).
    out_stride_t: usize,
}

impl<'a> Tiles<'a> {
    /// `None` when runs along dim 0 are already the better order.
    fn new(shape: &'a [i64], strides: &'a [i64]) -> Option<Self> {
        let first = strides.first()?.unsigned_abs();
        if shape[0] < 2 || first <= 1 {
            return None;
        }
        let t = (1..shape.len())
            .filter(|&k| shape[k] >= 2)
            .min_by_key(|&k| strides[k].unsigned_abs())?;
        if strides[t].unsigned_abs() >= first {
            return None;
        }
        // Validated: the dense size fits in isize, so these products do too.
        let out_stride_t = shape[..t].iter().map(|&n| n as usize).product();
        Some(Self {
            shape,
            strides,
            t,
            out_stride_t,
        })
    }

    /// Source offset and output index (in elements) of the plane's element (0, 0): planes
    /// enumerate the dims other than 0 and `t`, first fastest.
    fn plane_start(&self, mut plane: usize) -> (isize, usize) {
        let (mut source, mut out, mut out_stride) = (0isize, 0usize, 1usize);
        for (k, (&n, &s)) in self.shape.iter().zip(self.strides).enumerate() {
            let n = n as usize;
            if k != 0 && k != self.t {
                source += (plane % n) as isize * s as isize;
                out += (plane % n) * out_stride;
                plane /= n;
            }
            out_stride *= n;
        }
        (source, out)
    }
}

/// What a tiled copy settles once for all its bands (see [`Tiles::copy_band`]).
struct Bands {
    /// Rows per band and columns per tile.
    tile_rows: usize,
    tile_cols: usize,
    /// The plane: dim 0 (rows) and dim `t` (columns), with their source strides in elements.
    rows: usize,
    cols: usize,
    row_stride: isize,
    col_stride: isize,
    /// Bands per plane.
    per_plane: usize,
    /// Write with non-temporal stores.
    stream: bool,
    /// Transpose straight into the output, without the local tile.
    direct: bool,
}

impl Tiles<'_> {
    /// The bands of a copy of `N`-byte elements into `out_len` bytes.
    fn bands<const N: usize>(&self, out_len: usize) -> Bands {
        let (tile_rows, tile_cols) = const {
            let (tile_rows, tile_cols) = tile_shape(N);
            assert!(tile_rows * tile_cols * N <= TILE_BYTES);
            (tile_rows, tile_cols)
        };
        let rows = self.shape[0] as usize;
        Bands {
            tile_rows,
            tile_cols,
            rows,
            cols: self.shape[self.t] as usize,
            row_stride: self.strides[0] as isize,
            col_stride: self.strides[self.t] as isize,
            per_plane: rows.div_ceil(tile_rows),
            stream: out_len >= STREAM_THRESHOLD,
            // An output this small stays in L1 while it is written: the local tile would only
            // add a second pass.
            direct: out_len <= DIRECT_THRESHOLD,
        }
    }

    /// Copies band `task` (plane `task / per_plane`, its band `task % per_plane`): `tile_rows`
    /// rows across all columns, so that the source is read as `tile_rows` streams of whole
    /// rows, which the hardware prefetchers follow, and each output column receives a
    /// `tile_rows`-element piece. (Walking a column strip down all rows instead reads a few
    /// lines per row, each a fresh cache miss.)
    ///
    /// # Safety
    /// As [`StridedCopy::copy`], `out` being the output's first byte; no other task may write
    /// this band's output elements while it runs.
    unsafe fn copy_band<const N: usize>(
        &self,
        bands: &Bands,
        task: usize,
        source: *const u8,
        out: *mut u8,
    ) {
        let (plane, band) = (task / bands.per_plane, task % bands.per_plane);
        let (source_base, out_base) = self.plane_start(plane);
        let tile_rows = bands.tile_rows;
        let (row_start, row_end) = (band * tile_rows, ((band + 1) * tile_rows).min(bands.rows));
        let height = row_end - row_start;
        // The tile goes through a small local buffer, column-major: rows are read along
        // the source's fast dimension and columns written along the output's, each in
        // pieces of whole cache lines. Keeping a tile in cache instead fails for
        // power-of-two row strides, whose rows all fall into the same few cache sets.
        // Uninitialised: only the entries written by `Block::transpose_into` are read.
        let mut tile = TileBuffer([MaybeUninit::uninit(); TILE_BYTES]);
        let tile = tile.0.as_mut_ptr().cast::<MaybeUninit<[u8; N]>>();
        for col_start in (0..bands.cols).step_by(bands.tile_cols) {
            let width = bands.tile_cols.min(bands.cols - col_start);
            let first = source_base + row_start as isize * bands.row_stride;
            let first = first + col_start as isize * bands.col_stride;
            let block = Block {
                // SAFETY: element (row_start, col_start) of the plane, which the tensor
                // addresses (function contract).
                first: unsafe { source.offset(first * N as isize) },
                row_stride: bands.row_stride * N as isize,
                col_stride: bands.col_stride,
                height,
                width,
            };
            // Output element of the block's (0, 0); its column `j` starts `j * out_stride_t`
            // further.
            let out_first = out_base + col_start * self.out_stride_t + row_start;
            // SAFETY: the block's elements are elements the tensor addresses; its output
            // columns are runs of dim 0 in this plane, inside `out`, written by this task
            // alone (planes and row bands partition the output).
            unsafe { self.write_block::<N>(bands, &block, tile, out.add(out_first * N)) };
        }
        if bands.stream {
            // Non-temporal stores are weakly ordered: make them visible before the task
            // counts as done (and the buffer may be read, here or on another thread).
            store_fence();
        }
    }

    /// Writes `block` to the output from `out_first` (its element (0, 0)), column `j` of the
    /// block `out_stride_t` elements after column `j - 1`: transposed straight there for small
    /// outputs, else through `tile`.
    ///
    /// # Safety
    /// Every element of the block must be readable; the block's output columns (`height`
    /// elements each) must be writable and written by no one else meanwhile; `tile` must hold
    /// `tile_cols` columns of `tile_rows` elements, the block at most `tile_rows` × `tile_cols`.
    unsafe fn write_block<const N: usize>(
        &self,
        bands: &Bands,
        block: &Block,
        tile: *mut MaybeUninit<[u8; N]>,
        out_first: *mut u8,
    ) {
        if bands.direct {
            // SAFETY: the block is readable, and its element (i, j) goes to output element
            // `j * out_stride_t + i` from `out_first` (function contract).
            unsafe {
                block.transpose_into::<N>(
                    out_first.cast::<MaybeUninit<[u8; N]>>(),
                    self.out_stride_t,
                )
            };
            return;
        }
        // SAFETY: the block is readable and fits in `tile` (function contract).
        unsafe { block.transpose_into::<N>(tile, bands.tile_rows) };
        for col in 0..block.width {
            // SAFETY: column `col` of the tile holds `height` elements written just above;
            // the output column is writable (function contract).
            unsafe {
                write_run(
                    out_first.add(col * self.out_stride_t * N),
                    tile.add(col * bands.tile_rows).cast::<u8>(),
                    block.height * N,
                    bands.stream,
                )
            };
        }
    }
}

impl StridedCopy for Tiles<'_> {
    unsafe fn copy<const N: usize>(&self, source: *const u8, out: &mut [u8]) {
        let bands = self.bands::<N>(out.len());
        let planes = out.len() / N / (bands.rows * bands.cols);
        // Addresses, not pointers, so that the closure may be shared with rayon's threads.
        let (source_address, out_address) = (source as usize, out.as_mut_ptr() as usize);
        let copy_task = |task: usize| {
            // SAFETY: the tensor's source and output (function contract); planes and row
            // bands partition the output, one task per band.
            unsafe {
                self.copy_band::<N>(
                    &bands,
                    task,
                    source_address as *const u8,
                    out_address as *mut u8,
                )
            }
        };
        let tasks = planes * bands.per_plane;
        if out.len() < PARALLEL_THRESHOLD {
            (0..tasks).for_each(copy_task);
        } else {
            let task_bytes = bands.tile_rows * bands.cols * N;
            let min_tasks = (PARALLEL_THRESHOLD / task_bytes).max(1);
            (0..tasks)
                .into_par_iter()
                .with_min_len(min_tasks)
                .for_each(copy_task);
        }
    }
}

/// A block of a strided plane: `height` rows `row_stride` bytes apart, `width` elements per
/// row `col_stride` elements apart, from element (0, 0) at `first`.
struct Block {
    first: *const u8,
    row_stride: isize,
    col_stride: isize,
    height: usize,
    width: usize,
}

impl Block {
    /// Writes element (i, j) of the block to `tile[j * tile_rows + i]`.
    ///
    /// # Safety
    /// Every element of the block must be readable; `tile` must be writable for
    /// `(width - 1) * tile_rows + height` elements.
    unsafe fn transpose_into<const N: usize>(
        &self,
        tile: *mut MaybeUninit<[u8; N]>,
        tile_rows: usize,
    ) {
        // The part the SIMD kernels covered: whole squares from (0, 0).
        #[allow(unused_mut)]
        let (mut done_rows, mut done_cols) = (0, 0);
        #[cfg(target_arch = "x86_64")]
        if matches!(N, 1 | 2 | 4 | 8) {
            // SAFETY: forwarded from this function's contract.
            (done_rows, done_cols) =
                unsafe { self.transpose_squares::<N>(tile.cast::<u8>(), tile_rows) };
        }
        // SAFETY: (both) forwarded from this function's contract.
        unsafe { self.transpose_scalar(tile, tile_rows, 0..self.height, done_cols..self.width) };
        // SAFETY: as above.
        unsafe { self.transpose_scalar(tile, tile_rows, done_rows..self.height, 0..done_cols) };
    }

    /// As [`Self::transpose_into`], for the given rows and columns only.
    ///
    /// # Safety
    /// As [`Self::transpose_into`].
    unsafe fn transpose_scalar<const N: usize>(
        &self,
        tile: *mut MaybeUninit<[u8; N]>,
        tile_rows: usize,
        rows: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
    ) {
        for i in rows {
            for j in cols.clone() {
                let offset =
                    i as isize * self.row_stride + j as isize * self.col_stride * N as isize;
                // SAFETY: element (i, j) of the block, readable (contract); bytes only, so
                // unaligned reads are fine. `j * tile_rows + i` is inside the tile (contract).
                unsafe {
                    let value = self.first.offset(offset).cast::<[u8; N]>().read_unaligned();
                    tile.add(j * tile_rows + i).write(MaybeUninit::new(value));
                }
            }
        }
    }

    /// The block's whole squares of 16 bytes per row (16×16 1-byte, 8×8 2-byte, 4×4 4-byte or
    /// 2×2 8-byte elements), each transposed in SSE2 registers, when the columns are
    /// contiguous or every other element (else nothing). Returns how many rows and columns
    /// that covered.
    ///
    /// Faster than the scalar path for every width measured, contiguous and stepped (side by
    /// side: BENCHMARKS.md, "Measured choices").
    ///
    /// # Safety
    /// As [`Self::transpose_into`], with `tile` in bytes and `N` 1, 2, 4 or 8.
    #[cfg(target_arch = "x86_64")]
    unsafe fn transpose_squares<const N: usize>(
        &self,
        tile: *mut u8,
        tile_rows: usize,
    ) -> (usize, usize) {
        match (N, self.col_stride) {
            // SAFETY: forwarded from this function's contract.
            (_, 1) => unsafe { self.transpose_squares_by::<N, 1>(tile, tile_rows) },
            // SAFETY: as above.
            (_, 2) => unsafe { self.transpose_squares_by::<N, 2>(tile, tile_rows) },
            _ => (0, 0),
        }
    }

    /// [`Self::transpose_squares`] for a column stride of `STEP` (1 or 2).
    ///
    /// # Safety
    /// As [`Self::transpose_squares`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn transpose_squares_by<const N: usize, const STEP: usize>(
        &self,
        tile: *mut u8,
        tile_rows: usize,
    ) -> (usize, usize) {
        let square = 16 / N;
        let (rows, cols) = (self.height & !(square - 1), self.width & !(square - 1));
        for i in (0..rows).step_by(square) {
            for j in (0..cols).step_by(square) {
                let offset = i as isize * self.row_stride + (j * STEP * N) as isize;
                // SAFETY: rows i..i + square, columns j..j + square are inside the block
                // (readable by contract), and their transpose goes to tile columns
                // j..j + square, rows i..i + square, inside the tile (contract). SSE2 is
                // enabled on every x86_64 target.
                unsafe {
                    sse2::transpose_square::<N, STEP>(
                        self.first.offset(offset),
                        self.row_stride,
                        tile.add((j * tile_rows + i) * N),
                        tile_rows * N,
                    )
                };
            }
        }
        (rows, cols)
    }
}

/// Copies `len` bytes from `source` to `destination`, bypassing the caches if `stream`.
///
/// # Safety
/// As `copy_nonoverlapping`; after streaming, [`store_fence`] before the bytes are read.
unsafe fn write_run(destination: *mut u8, source: *const u8, len: usize, stream: bool) {
    #[cfg(target_arch = "x86_64")]
    if stream {
        // SAFETY: forwarded from this function's contract.
        return unsafe { sse2::stream(destination, source, len) };
    }
    let _ = stream;
    // SAFETY: forwarded from this function's contract.
    unsafe { std::ptr::copy_nonoverlapping(source, destination, len) };
}

/// Orders the non-temporal stores of [`write_run`] before any later store.
fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    sse2::store_fence();
}

/// SSE2 kernels. SSE2 is part of the x86_64 baseline (every x86_64 target enables it), so they
/// need no runtime feature check; AVX2 ones would need one and gain nothing while the copy is
/// bound by memory (BENCHMARKS.md, "Measured choices").
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use std::arch::x86_64::*;

    /// Transposes the square block of `16 / N` rows of `16 / N` elements of `N` bytes (1, 2, 4
    /// or 8) at `source` (rows `row_stride` bytes apart, elements `STEP` apart within a row,
    /// `STEP` 1 or 2) into as many 16-byte columns at `destination`, `column_stride` bytes
    /// apart. Moves bits only.
    ///
    /// # Safety
    /// Rows 0..16 / N, elements 0, STEP, 2·STEP, … of each, must be readable, and the 16-byte
    /// columns writable. No alignment needed.
    #[inline]
    #[target_feature(enable = "sse2")]
    pub unsafe fn transpose_square<const N: usize, const STEP: usize>(
        source: *const u8,
        row_stride: isize,
        destination: *mut u8,
        column_stride: usize,
    ) {
        let side = 16 / N;
        debug_assert!(matches!(N, 1 | 2 | 4 | 8) && side.is_power_of_two());
        let mut rows = [_mm_setzero_si128(); 16];
        for (i, row) in rows[..side].iter_mut().enumerate() {
            // SAFETY: row i of the block (contract).
            *row = unsafe { load_row::<N, STEP>(source.offset(i as isize * row_stride)) };
        }
        // With lanes doubling from one element to half a register, register k ends up holding
        // the column whose index is k with its bits reversed. The rounds are spelled out, not
        // looped over widths: LLVM left such a loop rolled for 1-byte elements, with the
        // registers in memory and a branch on the width per round, which is markedly slower
        // (BENCHMARKS.md, "Measured choices").
        if N == 1 {
            perfect_shuffle::<1>(&mut rows, side);
        }
        if N <= 2 {
            perfect_shuffle::<2>(&mut rows, side);
        }
        if N <= 4 {
            perfect_shuffle::<4>(&mut rows, side);
        }
        perfect_shuffle::<8>(&mut rows, side);
        let bits = side.trailing_zeros();
        // Indices from a table: computing them in the loop left it rolled (for 16 registers),
        // with the registers spilled to be indexed.
        for (k, column) in rows[..side].iter().enumerate() {
            let j = FOUR_BITS_REVERSED[k] >> (4 - bits);
            // SAFETY: column j < side of the destination (contract).
            unsafe { _mm_storeu_si128(destination.add(j * column_stride).cast(), *column) };
        }
    }

    /// `k` with its four low bits reversed, for k < 16.
    const FOUR_BITS_REVERSED: [usize; 16] = {
        let mut table = [0; 16];
        let mut k = 0;
        while k < 16 {
            table[k] = k.reverse_bits() >> (usize::BITS - 4);
            k += 1;
        }
        table
    };

    /// Elements 0, STEP, 2·STEP, … of the row at `start`: 16 bytes.
    ///
    /// # Safety
    /// Those elements must be readable (only they and the bytes between them are read).
    #[inline]
    #[target_feature(enable = "sse2")]
    unsafe fn load_row<const N: usize, const STEP: usize>(start: *const u8) -> __m128i {
        // SAFETY: (all loads) 16 bytes from the row's start when STEP is 1; when 2, the row
        // spans 32 - N bytes, and every load below lies inside that span.
        unsafe {
            if STEP == 1 {
                return _mm_loadu_si128(start.cast());
            }
            match N {
                1 => {
                    // Elements 0..16 and 15..31: the even ones of the first and the odd ones
                    // of the second, each zero-extended to 16 bits so that packing them back
                    // to 8 saturates nothing.
                    let low = _mm_loadu_si128(start.cast());
                    let high = _mm_loadu_si128(start.add(15).cast());
                    let even = _mm_and_si128(low, _mm_set1_epi16(0xff));
                    _mm_packus_epi16(even, _mm_srli_epi16::<8>(high))
                }
                2 => {
                    // Elements 0..8 and 7..15: the even ones of the first and the odd ones
                    // of the second, each sign-extended to 32 bits so that packing them back
                    // to 16 saturates nothing.
                    let low = _mm_loadu_si128(start.cast());
                    let high = _mm_loadu_si128(start.add(14).cast());
                    let even = _mm_srai_epi32::<16>(_mm_slli_epi32::<16>(low));
                    _mm_packs_epi32(even, _mm_srai_epi32::<16>(high))
                }
                4 => {
                    // Elements 0..4 and 3..7: 0 and 2 of the first, 1 and 3 of the second.
                    let low = _mm_castsi128_ps(_mm_loadu_si128(start.cast()));
                    let high = _mm_castsi128_ps(_mm_loadu_si128(start.add(12).cast()));
                    _mm_castps_si128(_mm_shuffle_ps::<0b11_01_10_00>(low, high))
                }
                // Elements 0 and 2, 8 bytes each.
                _ => _mm_unpacklo_epi64(
                    _mm_loadl_epi64(start.cast()),
                    _mm_loadl_epi64(start.add(16).cast()),
                ),
            }
        }
    }

    /// One round: registers 2k and 2k + 1 (of the first `side`) interleaved in lanes of `WIDTH`
    /// bytes, the low halves into register k, the high ones into k + side / 2 (a perfect
    /// shuffle of the registers, as in an FFT).
    #[inline]
    #[target_feature(enable = "sse2")]
    fn perfect_shuffle<const WIDTH: usize>(rows: &mut [__m128i; 16], side: usize) {
        let mut next = *rows;
        for k in 0..side / 2 {
            (next[k], next[k + side / 2]) = interleave::<WIDTH>(rows[2 * k], rows[2 * k + 1]);
        }
        *rows = next;
    }

    /// The low and the high halves of `a` and `b` interleaved in lanes of `WIDTH` bytes.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn interleave<const WIDTH: usize>(a: __m128i, b: __m128i) -> (__m128i, __m128i) {
        match WIDTH {
            1 => (_mm_unpacklo_epi8(a, b), _mm_unpackhi_epi8(a, b)),
            2 => (_mm_unpacklo_epi16(a, b), _mm_unpackhi_epi16(a, b)),
            4 => (_mm_unpacklo_epi32(a, b), _mm_unpackhi_epi32(a, b)),
            _ => (_mm_unpacklo_epi64(a, b), _mm_unpackhi_epi64(a, b)),
        }
    }

    /// Copies `len` bytes with non-temporal stores where the destination is 16-byte aligned,
    /// plain ones at the unaligned ends.
    ///
    /// # Safety
    /// As `copy_nonoverlapping`.
    #[target_feature(enable = "sse2")]
    pub unsafe fn stream(destination: *mut u8, source: *const u8, len: usize) {
        let head = destination.align_offset(16).min(len);
        let tail = head + ((len - head) & !15);
        // SAFETY: the ranges split `0..len` (contract); the body's stores are 16-byte aligned.
        // (The ends are usually empty: they are tested first, so that no piece pays for a
        // `memcpy` call that copies nothing.)
        unsafe {
            if head > 0 {
                std::ptr::copy_nonoverlapping(source, destination, head);
            }
            for k in (head..tail).step_by(16) {
                let value = _mm_loadu_si128(source.add(k).cast());
                _mm_stream_si128(destination.add(k).cast(), value);
            }
            if tail < len {
                std::ptr::copy_nonoverlapping(source.add(tail), destination.add(tail), len - tail);
            }
        }
    }

    pub fn store_fence() {
        // SAFETY: a fence has no memory-safety preconditions, and SSE2 is enabled on every
        // x86_64 target.
        unsafe { _mm_sfence() }
    }
}

/// The tensor seen as runs along its first (result-order) dimension.
struct Runs<'a> {
    shape: &'a [i64],
    strides: &'a [i64],
    run_len: usize,
    run_stride: isize,
}

impl<'a> Runs<'a> {
    fn new(shape: &'a [i64], strides: &'a [i64]) -> Self {
        let (run_len, run_stride) = match (shape.first(), strides.first()) {
            (Some(&n), Some(&s)) => (n as usize, s as isize),
            _ => (1, 0),
        };
        Self {
            shape,
            strides,
            run_len,
            run_stride,
        }
    }
}

/// Where run number `index` starts (runs counted column-major over the dims after the first),
/// stepped from run to run without dividing.
struct RunPosition {
    /// The run's index along each dim (entry 0 unused).
    index: DimVec<usize>,
    /// Element offset of the run's first element.
    offset: isize,
}

impl RunPosition {
    fn at(runs: &Runs, mut run: usize) -> Self {
        let mut position = Self {
            index: DimVec::filled(0, runs.shape.len()).expect("validated rank"),
            offset: 0,
        };
        for k in 1..runs.shape.len() {
            let n = runs.shape[k] as usize;
            position.index[k] = run % n;
            position.offset += (run % n) as isize * runs.strides[k] as isize;
            run /= n;
        }
        position
    }

    /// Moves to the next run (past the last one, back to the first).
    fn advance(&mut self, runs: &Runs) {
        for k in 1..runs.shape.len() {
            let (n, s) = (runs.shape[k] as usize, runs.strides[k] as isize);
            self.offset += s;
            self.index[k] += 1;
            if self.index[k] < n {
                return;
            }
            self.offset -= s * n as isize;
            self.index[k] = 0;
        }
    }
}

impl StridedCopy for Runs<'_> {
    unsafe fn copy<const N: usize>(&self, source: *const u8, out: &mut [u8]) {
        let run_bytes = self.run_len * N;
        // An address, not a pointer, so that the closure may be shared with rayon's threads.
        let source_address = source as usize;
        let copy_runs = |first_run: usize, chunk: &mut [u8]| {
            let source = source_address as *const u8;
            let mut position = RunPosition::at(self, first_run);
            for run_out in chunk.chunks_exact_mut(run_bytes) {
                let start = position.offset;
                position.advance(self);
                if self.run_stride == 1 {
                    // SAFETY: a run of `run_len` consecutive elements the tensor addresses
                    // (function contract), disjoint from `out`, which we own.
                    let run = unsafe {
                        std::slice::from_raw_parts(source.offset(start * N as isize), run_bytes)
                    };
                    run_out.copy_from_slice(run);
                    continue;
                }
                for (j, element) in run_out.chunks_exact_mut(N).enumerate() {
                    let offset = (start + j as isize * self.run_stride) * N as isize;
                    // SAFETY: `offset` is an element the tensor addresses (function contract);
                    // the read is unaligned-tolerant because only bytes are moved.
                    let value = unsafe { source.offset(offset).cast::<[u8; N]>().read_unaligned() };
                    element.copy_from_slice(&value);
                }
            }
        };
        if out.len() < PARALLEL_THRESHOLD {
            copy_runs(0, out);
        } else {
            let runs_per_task = (PARALLEL_THRESHOLD / run_bytes).max(1);
            out.par_chunks_mut(runs_per_task * run_bytes)
                .enumerate()
                .for_each(|(task, chunk)| copy_runs(task * runs_per_task, chunk));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::layout::ordered;
    use crate::test_support::host_descriptor as descriptor;
    use proptest::prelude::*;

    /// The copy by definition: element at Julia index (column-major over `dims`).
    fn naive(source: &[u32], base: isize, shape: &[i64], strides: &[i64]) -> Vec<u32> {
        let total: usize = shape.iter().map(|&n| n as usize).product();
        (0..total)
            .map(|mut flat| {
                let mut offset = base;
                for (&n, &s) in shape.iter().zip(strides) {
                    offset += (flat % n as usize) as isize * s as isize;
                    flat /= n as usize;
                }
                source[offset as usize]
            })
            .collect()
    }

    fn as_u32(buffer: &AlignedBuffer) -> Vec<u32> {
        buffer
            .as_slice()
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }

    proptest! {
        #[test]
        fn copies_match_the_definition_for_any_strides(
            shape in prop::collection::vec(1i64..=5, 0..=4),
            raw_strides in prop::collection::vec(-7i64..=7, 4),
            reversed in any::<bool>(),
        ) {
            let strides = &raw_strides[..shape.len()];
            let source: Vec<u32> = (0..400).collect();
            let low: i64 = shape.iter().zip(strides).map(|(&n, &s)| ((n - 1) * s).min(0)).sum();
            let base = (-low) as usize;
            let d = descriptor(source.as_ptr() as usize + base * 4, &shape, strides, ElementType::UInt32);
            let order = if reversed { IndexOrder::Reversed } else { IndexOrder::Producer };
            // SAFETY: every addressed offset lies inside `source` (|offsets| ≤ 4·4·7 < 200).
            let buffer = unsafe { materialize(&d, order) }.unwrap();
            prop_assert_eq!(buffer.as_ptr() as usize % BUFFER_ALIGN, 0);
            let (rs, rt) = ordered(&d, order);
            prop_assert_eq!(as_u32(&buffer), naive(&source, base as isize, &rs, &rt));
        }
    }

    #[test]
    fn large_copies_take_the_parallel_path_and_stay_exact() {
        let rows = 1024i64;
        let cols = 600i64;
        // A transposed view of a row-major rows×cols matrix whose rows are padded to
        // `cols + 3` elements: runs of `cols` elements that do not merge into one.
        let source: Vec<u32> = (0..(rows * (cols + 3)) as u32).collect();
        let (shape, strides) = ([cols, rows], [1, cols + 3]);
        let d = descriptor(
            source.as_ptr() as usize,
            &shape,
            &strides,
            ElementType::UInt32,
        );
        let mut merged = (DimVec::new(), DimVec::new());
        merge_dims(&d, IndexOrder::Producer, &mut merged.0, &mut merged.1);
        assert_eq!(merged.0, shape);
        // SAFETY: the view addresses elements inside `source`.
        let buffer = unsafe { materialize(&d, IndexOrder::Producer) }.unwrap();
        assert!(buffer.len() >= PARALLEL_THRESHOLD);
        assert_eq!(as_u32(&buffer), naive(&source, 0, &shape, &strides));
    }

    #[test]
    fn dims_merge_where_the_source_steps_through_them_as_one() {
        let merged = |shape: &[i64], strides: &[i64], order| {
            let d = descriptor(4096, shape, strides, ElementType::UInt32);
            let (mut shape, mut strides) = (DimVec::new(), DimVec::new());
            merge_dims(&d, order, &mut shape, &mut strides);
            (shape.to_vec(), strides.to_vec())
        };
        use IndexOrder::{Producer, Reversed};
        // Column-major in the order asked for, size-1 dims anywhere, with any stride.
        let column_major = (vec![24], vec![1]);
        assert_eq!(
            merged(&[2, 1, 3, 4], &[1, 99, 2, 6], Producer),
            column_major
        );
        assert_eq!(
            merged(&[4, 3, 1, 2], &[6, 2, -7, 1], Reversed),
            column_major
        );
        // Reversed and stepped sources merge as long as each stride continues the last.
        assert_eq!(merged(&[3, 4], &[-2, -6], Producer), (vec![12], vec![-2]));
        assert_eq!(merged(&[3, 4], &[0, 0], Producer), (vec![12], vec![0]));
        // Row-major 3-d sources, read reversed: whole, or with padded matrices, whose
        // rows still run on into one another.
        assert_eq!(
            merged(&[2, 3, 4], &[12, 4, 1], Reversed),
            (vec![24], vec![1])
        );
        assert_eq!(
            merged(&[2, 3, 4], &[20, 4, 1], Reversed),
            (vec![12, 2], vec![1, 20])
        );
        assert_eq!(
            merged(&[2, 3, 4], &[12, 4, 1], Producer),
            (vec![2, 3, 4], vec![12, 4, 1])
        );
        assert_eq!(
            merged(&[3, 4, 2], &[1, 3, 100], Producer),
            (vec![12, 2], vec![1, 100])
        );
        // One element: no dims at all.
        assert_eq!(merged(&[1, 1], &[5, 7], Producer), (vec![], vec![]));
        // A product that overflows merges nothing (and does not panic).
        assert_eq!(
            merged(&[2, 3], &[i64::MAX / 2 + 1, 0], Producer).0,
            vec![2, 3]
        );
    }

    #[test]
    fn large_contiguous_copies_split_into_one_piece_per_thread_and_stay_exact() {
        // Not a multiple of the thread count times the alignment: the last piece is shorter.
        let len = PARALLEL_THRESHOLD + 4 * 1001;
        let source: Vec<u32> = (0..len as u32 / 4).collect();
        let d = descriptor(
            source.as_ptr() as usize,
            &[(len / 4) as i64],
            &[1],
            ElementType::UInt32,
        );
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        // SAFETY: the descriptor addresses exactly `source`.
        let buffer = pool.install(|| unsafe { materialize(&d, IndexOrder::Producer) }.unwrap());
        assert_eq!(as_u32(&buffer), source);
    }

    #[test]
    fn large_transposes_take_the_parallel_tiled_path_and_stay_exact() {
        // A row-major 3-d source read in producer order: dim 2 is the source's fastest, so
        // the (dim 0, dim 2) planes are copied by tiles, one plane per index of dim 1.
        let (a, b, c) = (300i64, 3i64, 401i64);
        let source: Vec<u32> = (0..(a * b * c) as u32).collect();
        let shape = [a, b, c];
        let strides = [b * c, c, 1];
        let d = descriptor(
            source.as_ptr() as usize,
            &shape,
            &strides,
            ElementType::UInt32,
        );
        assert!(Tiles::new(&shape, &strides).is_some_and(|t| t.t == 2));
        // SAFETY: the descriptor addresses exactly `source`.
        let buffer = unsafe { materialize(&d, IndexOrder::Producer) }.unwrap();
        assert!(buffer.len() >= PARALLEL_THRESHOLD);
        assert_eq!(as_u32(&buffer), naive(&source, 0, &shape, &strides));
    }

    /// The copy by definition, in bytes: element `flat` (column-major over `shape`) of the
    /// tensor whose element (0, …, 0) is at byte `base` of `source`.
    fn naive_bytes(
        source: &[u8],
        base: isize,
        shape: &[i64],
        strides: &[i64],
        size: usize,
    ) -> Vec<u8> {
        let total: usize = shape.iter().map(|&n| n as usize).product();
        (0..total)
            .flat_map(|mut flat| {
                let mut offset = base;
                for (&n, &s) in shape.iter().zip(strides) {
                    offset += (flat % n as usize) as isize * s as isize * size as isize;
                    flat /= n as usize;
                }
                source[offset as usize..offset as usize + size]
                    .iter()
                    .copied()
            })
            .collect()
    }

    /// Distinct-looking bytes, with NaN-like 4- and 8-byte patterns among them (the SIMD
    /// kernels must move bits, never values).
    fn pattern(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| match i % 11 {
                3 => 0x7f,
                4 => 0xa0,
                _ => (i.wrapping_mul(2_654_435_761) >> 7) as u8,
            })
            .collect()
    }

    /// Copies the `shape`/`strides` view (strides in elements, any sign) of a fresh patterned
    /// source into `out` and checks it against the definition.
    fn check_view(element: ElementType, shape: &[i64], strides: &[i64], out: &mut [u8]) {
        let size = element.size();
        let low: i64 = shape
            .iter()
            .zip(strides)
            .map(|(&n, &s)| ((n - 1) * s).min(0))
            .sum();
        let high: i64 = shape
            .iter()
            .zip(strides)
            .map(|(&n, &s)| ((n - 1) * s).max(0))
            .sum();
        // One spare byte in front, so that the source is misaligned for every element size.
        let base = 1 + (-low) as usize * size;
        let source = pattern(base + (high as usize + 1) * size);
        let d = descriptor(source.as_ptr() as usize + base, shape, strides, element);
        // SAFETY: every addressed element lies inside `source` (`low` and `high` bound it).
        unsafe { copy_into(&d, IndexOrder::Producer, out) }.unwrap();
        let expected = naive_bytes(&source, base as isize, shape, strides, size);
        assert!(out == expected, "{element:?} {shape:?} {strides:?}");
    }

    /// Transposes, straight and stepped, of every element size, at sizes around the tile and
    /// SIMD kernel sizes (1, 2, 3, 4, 5 rows or columns; 63–65, 127–129), reversed too.
    #[test]
    fn tiled_copies_match_the_definition_for_every_element_size_and_edge() {
        let elements = [
            ElementType::UInt8,
            ElementType::BFloat16,
            ElementType::Float32,
            ElementType::Float64,
            ElementType::ComplexF64,
        ];
        let sides = [2i64, 3, 4, 5, 7, 8, 31, 33, 63, 64, 65, 129];
        for element in elements {
            for (k, &rows) in sides.iter().enumerate() {
                for &cols in &sides[k % 3..] {
                    for (step, sign) in [(1, 1), (2, 1), (1, -1), (3, 1), (2, -1)] {
                        let (row_stride, col_stride) = (cols * step * sign, step * sign);
                        let shape = [rows, cols];
                        assert!(Tiles::new(&shape, &[row_stride, col_stride]).is_some());
                        let mut out = vec![0u8; (rows * cols) as usize * element.size()];
                        check_view(element, &shape, &[row_stride, col_stride], &mut out);
                    }
                }
            }
        }
    }

    /// Outputs of 8 MiB and more are written with non-temporal stores (on x86_64), in pieces
    /// whose ends are not 16-byte aligned when the column length is odd or `out` is
    /// misaligned; and they take the parallel path. For each element size with a SIMD kernel.
    #[test]
    fn streamed_transposes_match_the_definition_at_any_alignment() {
        let cols = 1403i64;
        for (element, rows) in [
            (ElementType::UInt8, 6001i64),
            (ElementType::Float32, 1501),
            (ElementType::BFloat16, 3001),
            (ElementType::Float64, 751),
        ] {
            let len = (rows * cols) as usize * element.size();
            assert!(len >= STREAM_THRESHOLD);
            let mut buffer = vec![0u8; len + 3];
            for offset in [0, 3] {
                let out = &mut buffer[offset..][..len];
                // Contiguous rows, then every other element of every other row.
                check_view(element, &[rows, cols], &[cols, 1], out);
                check_view(element, &[rows, cols], &[4 * cols, 2], out);
            }
        }
    }

    #[test]
    fn empty_buffers_are_aligned_too_and_huge_ones_are_errors() {
        assert_eq!(AlignedBuffer::zeroed(0).as_ptr() as usize % BUFFER_ALIGN, 0);
        let huge = AlignedBuffer::try_zeroed(usize::MAX - 100).err();
        assert!(
            matches!(huge, Some(Error::AllocationFailed { bytes }) if bytes == usize::MAX - 100),
            "{huge:?}"
        );
        assert_eq!(huge.unwrap().kind(), crate::error::ErrorKind::Resource);
    }

    #[test]
    fn copy_into_checks_the_destination_size() {
        let source = [1u32, 2, 3];
        let d = descriptor(source.as_ptr() as usize, &[3], &[1], ElementType::UInt32);
        let mut short = [0u8; 8];
        // SAFETY: refused before any read.
        let result = unsafe { copy_into(&d, IndexOrder::Producer, &mut short) };
        assert!(matches!(
            result,
            Err(Error::CopyDestinationSize {
                given: 8,
                needed: 12
            })
        ));
        let mut exact = [0u8; 12];
        // SAFETY: the descriptor addresses `source`.
        unsafe { copy_into(&d, IndexOrder::Producer, &mut exact) }.unwrap();
        assert_eq!(exact[4..8], 2u32.to_ne_bytes());
    }

    /// NumPy makes such tensors (`np.frombuffer(b, np.float64, offset=1)`) and the planner
    /// sends them here: every read must tolerate any address. Covers the three ways the engine
    /// reads (contiguous runs, strided runs, tiles); an aligned read of a misaligned address is
    /// undefined behaviour and trips the standard library's debug checks.
    #[test]
    fn misaligned_sources_are_read_correctly_on_every_path() {
        let values: Vec<f64> = (0..12).map(|i| i as f64 + 0.5).collect();
        let mut bytes = [0u8; 12 * 8 + 8];
        for (i, v) in values.iter().enumerate() {
            bytes[1 + 8 * i..9 + 8 * i].copy_from_slice(&v.to_ne_bytes());
        }
        let address = bytes.as_ptr() as usize + 1;
        assert_ne!(address % 8, 0, "the source really is misaligned");
        let as_f64 = |buffer: &AlignedBuffer| -> Vec<f64> {
            buffer
                .as_slice()
                .chunks_exact(8)
                .map(|c| f64::from_ne_bytes(c.try_into().unwrap()))
                .collect()
        };
        let cases: [(&[i64], &[i64], IndexOrder); 3] = [
            // Row-major 3×4 in reversed order: runs of 4 contiguous elements.
            (&[3, 4], &[4, 1], IndexOrder::Reversed),
            // Every other element: a strided run.
            (&[6], &[2], IndexOrder::Producer),
            // Row-major 3×4 in producer order: dim 0 is not the fastest, so tiles.
            (&[3, 4], &[4, 1], IndexOrder::Producer),
        ];
        for (shape, strides, order) in cases {
            let d = descriptor(address, shape, strides, ElementType::Float64);
            let (rs, rt) = ordered(&d, order);
            // SAFETY: every addressed element lies inside `bytes` (at most 12 from `address`).
            let buffer = unsafe { materialize(&d, order) }.unwrap();
            let expected: Vec<f64> = naive(&(0..12).collect::<Vec<u32>>(), 0, &rs, &rt)
                .into_iter()
                .map(|i| values[i as usize])
                .collect();
            assert_eq!(as_f64(&buffer), expected, "{shape:?} {strides:?} {order:?}");
        }
    }

    #[test]
    fn device_memory_is_refused() {
        let cuda = Device {
            kind: crate::device::DeviceKind::Cuda,
            id: 0,
        };
        let d = crate::test_support::descriptor_on(cuda, 64, &[2], &[1], ElementType::UInt32);
        // SAFETY: refused before any read.
        let result = unsafe { materialize(&d, IndexOrder::Producer) };
        assert!(matches!(result, Err(Error::UnsupportedDevice { .. })));
    }
}
