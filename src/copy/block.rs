//! One tile's transpose into the local buffer: SIMD squares where they fit, scalar moves at the
//! edges; 16-byte elements go straight into place instead, a cache line's worth at a time.

#[cfg(target_arch = "x86_64")]
use super::kernels::sse2;
use std::mem::MaybeUninit;

/// A block of a strided plane: `height` rows `row_stride` bytes apart, `width` elements per
/// row `col_stride` elements apart, from element (0, 0) at `first`.
pub(super) struct Block {
    pub(super) first: *const u8,
    pub(super) row_stride: isize,
    pub(super) col_stride: isize,
    pub(super) height: usize,
    pub(super) width: usize,
}

impl Block {
    /// Writes element (i, j) of the block to `tile[j * tile_rows + i]`.
    ///
    /// # Safety
    /// Every element of the block must be readable; `tile` must be writable for
    /// `(width - 1) * tile_rows + height` elements.
    pub(super) unsafe fn transpose_into<const N: usize>(
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

    /// For 16-byte elements: element (i, j) to `out[j * out_stride + i]`, four rows by four
    /// columns at a time, so that each source row gives and each output column receives a
    /// 64-byte piece (a cache line, when aligned) in one go; with `stream`, through
    /// non-temporal stores where the output is 16-byte aligned. An element is one register:
    /// the local tile would only add a second pass.
    ///
    /// # Safety
    /// Every element of the block must be readable; the output elements
    /// `j * out_stride + i` (in 16-byte elements from `out`) writable by no one else meanwhile.
    #[cfg(target_arch = "x86_64")]
    pub(super) unsafe fn transpose_lines(&self, out: *mut u8, out_stride: usize, stream: bool) {
        let stream = stream && (out as usize).is_multiple_of(16);
        let (rows, cols) = (self.height & !3, self.width & !3);
        let col_stride = self.col_stride * 16;
        for j0 in (0..cols).step_by(4) {
            for i0 in (0..rows).step_by(4) {
                for j in j0..j0 + 4 {
                    for i in i0..i0 + 4 {
                        let offset = i as isize * self.row_stride + j as isize * col_stride;
                        // SAFETY: element (i, j) of the block, readable, and its output
                        // element, writable (contract); unaligned loads, aligned streaming
                        // stores only when `out` (and so every element) is 16-byte aligned.
                        unsafe {
                            sse2::move_element(
                                out.add((j * out_stride + i) * 16),
                                self.first.offset(offset),
                                stream,
                            )
                        };
                    }
                }
            }
        }
        let out = out.cast::<MaybeUninit<[u8; 16]>>();
        // SAFETY: (both) the edges, as in `transpose_into`, with the output as the tile.
        unsafe { self.transpose_scalar(out, out_stride, 0..self.height, cols..self.width) };
        // SAFETY: as above.
        unsafe { self.transpose_scalar(out, out_stride, rows..self.height, 0..cols) };
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
