//! The copy engine: any strided host tensor into a fresh, dense, column-major buffer.
//!
//! The buffer is aligned to 64 bytes because JAX copies (instead of sharing) anything less
//! aligned, and 64 is what Julia uses for large arrays. The result's dims are the planner's
//! result dims (see [`crate::layout::IndexOrder`]), first index fastest, so the Julia glue wraps
//! it with `unsafe_wrap(Array, ptr, dims)` and nothing else. Large copies are split across
//! rayon's threads by runs of the fastest dimension.

use crate::descriptor::TensorDescriptor;
use crate::dtype::ElementType;
use crate::error::{Error, Result};
use crate::layout::{IndexOrder, ordered};
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
/// data (measured: a fresh 1 GiB buffer then costs more than the copy itself), whereas a new
/// mapping is zero already and its pages arrive on first write. They are marked for
/// transparent huge pages where the kernel offers them (`madvise` mode), so a 1 GiB copy
/// takes ~512 page faults instead of ~262,000. Reusing buffers across copies is not done:
/// each copy's buffer is owned by the tensor it backs.
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
    let (shape, strides) = ordered(descriptor, order);
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

/// Elements per side of a tile: 32 rows of a few cache lines each stay in L1 for any element
/// size, on the source side and on the output side.
const TILE: usize = 64;

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

impl StridedCopy for Tiles<'_> {
    unsafe fn copy<const N: usize>(&self, source: *const u8, out: &mut [u8]) {
        let (rows, cols) = (self.shape[0] as usize, self.shape[self.t] as usize);
        let (row_stride, col_stride) = (self.strides[0] as isize, self.strides[self.t] as isize);
        let col_blocks = cols.div_ceil(TILE);
        let planes = out.len() / N / (rows * cols);
        // Addresses, not pointers, so that the closure may be shared with rayon's threads.
        let (source_address, out_address) = (source as usize, out.as_mut_ptr() as usize);
        let copy_task = |task: usize| {
            let (plane, block) = (task / col_blocks, task % col_blocks);
            let (source_base, out_base) = self.plane_start(plane);
            let source = source_address as *const u8;
            let out = out_address as *mut u8;
            let (col_start, col_end) = (block * TILE, ((block + 1) * TILE).min(cols));
            // The tile goes through a small local buffer: rows are read along the source's
            // fast dimension and columns written along the output's, each cache line used
            // whole at once. Keeping a tile in cache instead fails for power-of-two row
            // strides, whose rows all fall into the same few cache sets.
            // Uninitialised (a 64×64 tile of 16-byte elements is 64 KiB): only the entries
            // written below are read.
            let mut tile = [[MaybeUninit::<[u8; N]>::uninit(); TILE]; TILE];
            for row_start in (0..rows).step_by(TILE) {
                let row_end = (row_start + TILE).min(rows);
                for row in row_start..row_end {
                    let source_row = source_base + row as isize * row_stride;
                    for col in col_start..col_end {
                        let offset = (source_row + col as isize * col_stride) * N as isize;
                        // SAFETY: an element the tensor addresses (function contract); bytes
                        // only, so unaligned reads are fine.
                        tile[col - col_start][row - row_start] = MaybeUninit::new(unsafe {
                            source.offset(offset).cast::<[u8; N]>().read_unaligned()
                        });
                    }
                }
                for col in col_start..col_end {
                    let out_first = out_base + col * self.out_stride_t + row_start;
                    let column = &tile[col - col_start][..row_end - row_start];
                    // SAFETY: rows `row_start..row_end` of this column were written above;
                    // `MaybeUninit<[u8; N]>` has the layout of `[u8; N]`.
                    let bytes = unsafe {
                        std::slice::from_raw_parts(column.as_ptr().cast::<u8>(), column.len() * N)
                    };
                    // SAFETY: output elements `out_first..out_first + column.len()` are a run
                    // of dim 0 in this plane and column: every task writes its own (planes and
                    // column blocks partition the output), all inside `out`.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            bytes.as_ptr(),
                            out.add(out_first * N),
                            bytes.len(),
                        )
                    };
                }
            }
        };
        let tasks = planes * col_blocks;
        if out.len() < PARALLEL_THRESHOLD {
            (0..tasks).for_each(copy_task);
        } else {
            let task_bytes = rows * TILE * N;
            let min_tasks = (PARALLEL_THRESHOLD / task_bytes).max(1);
            (0..tasks)
                .into_par_iter()
                .with_min_len(min_tasks)
                .for_each(copy_task);
        }
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

    /// Element offset of the start of run number `run` (runs counted first-dim-excluded,
    /// column-major over the remaining dims).
    fn run_start(&self, mut run: usize) -> isize {
        let mut offset = 0isize;
        for (&n, &s) in self.shape.iter().zip(self.strides).skip(1) {
            let n = n as usize;
            offset += (run % n) as isize * s as isize;
            run /= n;
        }
        offset
    }
}

impl StridedCopy for Runs<'_> {
    unsafe fn copy<const N: usize>(&self, source: *const u8, out: &mut [u8]) {
        let run_bytes = self.run_len * N;
        // An address, not a pointer, so that the closure may be shared with rayon's threads.
        let source_address = source as usize;
        let copy_runs = |first_run: usize, chunk: &mut [u8]| {
            let source = source_address as *const u8;
            for (i, run_out) in chunk.chunks_exact_mut(run_bytes).enumerate() {
                let start = self.run_start(first_run + i);
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
        let source: Vec<u32> = (0..(rows * cols) as u32).collect();
        // A transposed view of a row-major rows×cols matrix.
        let d = descriptor(
            source.as_ptr() as usize,
            &[cols, rows],
            &[1, cols],
            ElementType::UInt32,
        );
        // SAFETY: the view addresses exactly `source`.
        let buffer = unsafe { materialize(&d, IndexOrder::Producer) }.unwrap();
        assert!(buffer.len() >= PARALLEL_THRESHOLD);
        assert_eq!(
            as_u32(&buffer),
            naive(&source, 0, &[cols, rows], &[1, cols])
        );
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
