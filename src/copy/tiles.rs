//! Cache-blocked transposes: the plane of the output's fastest dim and the source's fastest,
//! copied tile by tile through a local buffer, in bands of source rows down panels of columns.

use super::block::Block;
use super::kernels::{store_fence, write_run};
use super::{PARALLEL_THRESHOLD, StridedCopy};
use rayon::prelude::*;
use std::mem::MaybeUninit;

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
pub(super) const STREAM_THRESHOLD: usize = 8 << 20;

/// A cache line's bytes.
const LINE: usize = 64;

/// Columns per panel: a band covers one panel's columns, and a panel's bands follow one
/// another, so that the output pages a band writes to (one per column, for columns of a page
/// or more) stay within the TLB. Bands across all columns of a 1 GiB f32 transpose touched
/// 16384 pages each, and ran 0.34–0.35× memcpy against 0.43–0.50× in panels of 1024 columns,
/// on 4 KiB pages; on huge pages the two were within the noise (BENCHMARKS.md).
pub(super) const PANEL_COLUMNS: usize = 1024;

/// Source rows a streamed transpose reads at once. The hardware prefetchers follow a limited
/// number of streams: a band's 64 or 128 rows read tile by tile, a piece of each row at a
/// time, leave most reads waiting on memory, while 16 rows at a time read almost as fast as
/// one sequential stream (BENCHMARKS.md, "Issue 29: where the copy gap goes"). So a streamed
/// band is read in sub-bands of this many rows across its whole panel into a band buffer, and
/// written from there: its output column pieces stay `tile_rows` long.
pub(super) const READ_ROWS: usize = 16;

/// Outputs of at most this many bytes (the tile's size) are transposed straight into place.
const DIRECT_THRESHOLD: usize = TILE_BYTES;

/// The local tile, aligned so that its columns start on cache lines.
#[repr(C, align(64))]
struct TileBuffer([MaybeUninit<u8>; TILE_BYTES]);

/// A cache line of a band buffer (see [`READ_ROWS`]), so that its columns start on lines.
#[repr(C, align(64))]
struct Line([MaybeUninit<u8>; LINE]);

/// The buffer a staged band goes through: `tile_rows` × `panel_cols` elements, column-major
/// (128–256 KiB: it stays in L2 while the band is written from it). Uninitialised: only the
/// entries the band's blocks wrote are read.
fn band_buffer<const N: usize>(bands: &Bands) -> Box<[MaybeUninit<Line>]> {
    Box::new_uninit_slice((bands.tile_rows * bands.panel_cols * N).div_ceil(LINE))
}

/// A copy whose output's fastest dimension (0) is not the source's: gathering along dim 0
/// would read one element per cache line. Instead the plane of dim 0 and the dimension `t`
/// the source is fastest along is copied tile by tile (a cache-blocked transpose), so that
/// every cache line read or written is used whole while it is hot.
pub(super) struct Tiles<'a> {
    shape: &'a [i64],
    strides: &'a [i64],
    /// The dimension (≥ 1) with the smallest |source stride|, smaller than dim 0's.
    pub(super) t: usize,
    /// Output stride of dim `t`, in elements (the product of the dims before it).
    out_stride_t: usize,
}

impl<'a> Tiles<'a> {
    /// `None` when runs along dim 0 are already the better order.
    pub(super) fn new(shape: &'a [i64], strides: &'a [i64]) -> Option<Self> {
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
pub(super) struct Bands {
    /// Rows per band and columns per tile.
    pub(super) tile_rows: usize,
    tile_cols: usize,
    /// The plane: dim 0 (rows) and dim `t` (columns), with their source strides in elements.
    rows: usize,
    cols: usize,
    row_stride: isize,
    col_stride: isize,
    /// Columns per panel, a multiple of `tile_cols`, and panels per plane.
    pub(super) panel_cols: usize,
    pub(super) panels: usize,
    /// Bands per panel.
    pub(super) per_plane: usize,
    /// Rows the bands are moved up by: band `k` covers rows `k * tile_rows - shift` to
    /// `(k + 1) * tile_rows - shift`, clipped to the plane.
    shift: usize,
    /// Write with non-temporal stores.
    pub(super) stream: bool,
    /// Read each band in sub-bands of [`READ_ROWS`] rows through a band buffer.
    pub(super) staged: bool,
    /// Transpose straight into the output, without the local tile.
    direct: bool,
}

/// Where one band lies (see [`Tiles::copy_band`]): its plane's element (0, 0) in the source
/// (an offset in elements) and in the output (an index), the panel's columns and the band's
/// rows, each from and up to.
struct Band {
    source_base: isize,
    out_base: usize,
    col_begin: usize,
    col_end: usize,
    row_start: usize,
    row_end: usize,
}

impl Band {
    /// The block of rows `rows` and columns from `col_start` (a tile's width at most, clipped
    /// to the panel) of this band's plane in `source`.
    ///
    /// # Safety
    /// `source` must be the tensor's first element's byte, and the block's element (rows.start,
    /// col_start) one the tensor addresses.
    #[inline(always)]
    unsafe fn block<const N: usize>(
        &self,
        bands: &Bands,
        source: *const u8,
        rows: std::ops::Range<usize>,
        col_start: usize,
    ) -> Block {
        let first = self.source_base
            + rows.start as isize * bands.row_stride
            + col_start as isize * bands.col_stride;
        Block {
            // SAFETY: element (rows.start, col_start) of the plane, which the tensor addresses
            // (function contract).
            first: unsafe { source.offset(first * N as isize) },
            row_stride: bands.row_stride * N as isize,
            col_stride: bands.col_stride,
            height: rows.len(),
            width: bands.tile_cols.min(self.col_end - col_start),
        }
    }
}

impl Bands {
    /// The rows band `band` of each panel covers, from and up to.
    pub(super) fn rows_of(&self, band: usize) -> (usize, usize) {
        let start = (band * self.tile_rows).saturating_sub(self.shift);
        (
            start,
            ((band + 1) * self.tile_rows - self.shift).min(self.rows),
        )
    }
}

impl Tiles<'_> {
    /// The bands of a copy of `N`-byte elements into `out_len` bytes at `out_address`.
    pub(super) fn bands<const N: usize>(&self, out_len: usize, out_address: usize) -> Bands {
        let (tile_rows, tile_cols) = const {
            let (tile_rows, tile_cols) = tile_shape(N);
            assert!(tile_rows * tile_cols * N <= TILE_BYTES);
            (tile_rows, tile_cols)
        };
        let rows = self.shape[0] as usize;
        let cols = self.shape[self.t] as usize;
        let stream = out_len >= STREAM_THRESHOLD;
        let staged = stream && N != 16 && tile_rows > READ_ROWS;
        let panel_cols = PANEL_COLUMNS
            .next_multiple_of(tile_cols)
            .min(cols.next_multiple_of(tile_cols));
        // Where every output column starts at the same offset in a cache line (its length is a
        // whole number of lines) and elements are aligned, the first band is cut short so
        // that every later one writes whole lines. A line written in parts by non-temporal
        // stores costs a read of it from memory: a 64 MiB f32 transpose into an output 16
        // bytes off a line took twice as long as into an aligned one.
        let lead = match (stream, (rows * N) % LINE, out_address % N) {
            (true, 0, 0) => (LINE - out_address % LINE) % LINE / N,
            _ => 0,
        };
        let shift = if lead == 0 { 0 } else { tile_rows - lead };
        Bands {
            tile_rows,
            tile_cols,
            rows,
            cols,
            panel_cols,
            panels: cols.div_ceil(panel_cols),
            row_stride: self.strides[0] as isize,
            col_stride: self.strides[self.t] as isize,
            per_plane: (rows + shift).div_ceil(tile_rows),
            shift,
            stream,
            staged,
            // An output this small stays in L1 while it is written: the local tile would only
            // add a second pass.
            direct: out_len <= DIRECT_THRESHOLD,
        }
    }

    /// Copies band `task` (tasks count bands down a panel, then panels across a plane, then
    /// planes): up to `tile_rows` rows across the panel's columns, so that the source is read
    /// as streams of long row pieces, which the hardware prefetchers follow, and each output
    /// column receives a `tile_rows`-element piece. (Walking a column strip down all rows
    /// instead reads a few lines per row, each a fresh cache miss.) A staged band reads
    /// [`READ_ROWS`] of its rows at a time across the panel into `staging`, then writes each
    /// column from there ([`Tiles::copy_staged_band`]); others go tile by tile through a local
    /// tile ([`Tiles::copy_tiled_band`]).
    ///
    /// # Safety
    /// As [`StridedCopy::copy`], `out` being the output's first byte; no other task may write
    /// this band's output elements while it runs; `staging`, where given, a buffer from
    /// [`band_buffer`] for these bands (a staged band without one goes through the tile).
    unsafe fn copy_band<const N: usize>(
        &self,
        bands: &Bands,
        task: usize,
        source: *const u8,
        out: *mut u8,
        staging: Option<&mut [MaybeUninit<Line>]>,
    ) {
        let band = self.band(bands, task);
        match staging.filter(|_| bands.staged) {
            // SAFETY: forwarded (this function's contract); the buffer is one for these bands.
            Some(staging) => unsafe {
                self.copy_staged_band::<N>(bands, &band, source, out, staging)
            },
            // SAFETY: forwarded (this function's contract).
            None => unsafe { self.copy_tiled_band::<N>(bands, &band, source, out) },
        }
        if bands.stream {
            // Non-temporal stores are weakly ordered: make them visible before the task
            // counts as done (and the buffer may be read, here or on another thread).
            store_fence();
        }
    }

    /// Where band `task` lies: its plane's start, its panel's columns and its rows.
    #[inline(always)]
    fn band(&self, bands: &Bands, task: usize) -> Band {
        let (panel, band) = (task / bands.per_plane, task % bands.per_plane);
        let (plane, panel) = (panel / bands.panels, panel % bands.panels);
        let (source_base, out_base) = self.plane_start(plane);
        let (row_start, row_end) = bands.rows_of(band);
        Band {
            source_base,
            out_base,
            col_begin: panel * bands.panel_cols,
            col_end: ((panel + 1) * bands.panel_cols).min(bands.cols),
            row_start,
            row_end,
        }
    }

    /// A staged band: [`READ_ROWS`] rows at a time across the panel, each block transposed into
    /// the band buffer `staging`, then every output column piece written from it in one run.
    ///
    /// # Safety
    /// As [`Tiles::copy_band`], `staging` being a buffer from [`band_buffer`] for `bands`.
    #[inline(always)]
    unsafe fn copy_staged_band<const N: usize>(
        &self,
        bands: &Bands,
        band: &Band,
        source: *const u8,
        out: *mut u8,
        staging: &mut [MaybeUninit<Line>],
    ) {
        let staging = staging.as_mut_ptr().cast::<MaybeUninit<[u8; N]>>();
        let (col_begin, row_start) = (band.col_begin, band.row_start);
        for sub_start in (row_start..band.row_end).step_by(READ_ROWS) {
            let sub_end = (sub_start + READ_ROWS).min(band.row_end);
            for col_start in (col_begin..band.col_end).step_by(bands.tile_cols) {
                let at = (col_start - col_begin) * bands.tile_rows + (sub_start - row_start);
                // SAFETY: the block's elements are elements the tensor addresses (function
                // contract); its transpose lands in columns `col_start - col_begin..` of the
                // band buffer, rows `sub_start - row_start..`, inside it: the buffer holds
                // `tile_rows` × `panel_cols` elements (function contract).
                unsafe {
                    band.block::<N>(bands, source, sub_start..sub_end, col_start)
                        .transpose_into::<N>(staging.add(at), bands.tile_rows)
                };
            }
        }
        for col in col_begin..band.col_end {
            let out_first = band.out_base + col * self.out_stride_t + row_start;
            // SAFETY: band buffer column `col - col_begin` holds the band's `height` elements,
            // written just above; the output column piece is a run of dim 0 in this plane,
            // inside `out`, written by this task alone.
            unsafe {
                write_run(
                    out.add(out_first * N),
                    staging
                        .add((col - col_begin) * bands.tile_rows)
                        .cast::<u8>(),
                    (band.row_end - row_start) * N,
                    bands.stream,
                )
            };
        }
    }

    /// A band tile by tile: each block of the band's rows and a tile's columns through a small
    /// local buffer, column-major, rows read along the source's fast dimension and columns
    /// written along the output's, each in pieces of whole cache lines. Keeping a tile in
    /// cache instead fails for power-of-two row strides, whose rows all fall into the same few
    /// cache sets.
    ///
    /// # Safety
    /// As [`Tiles::copy_band`].
    #[inline(always)]
    unsafe fn copy_tiled_band<const N: usize>(
        &self,
        bands: &Bands,
        band: &Band,
        source: *const u8,
        out: *mut u8,
    ) {
        // Uninitialised: only the entries written by `Block::transpose_into` are read.
        let mut tile = TileBuffer([MaybeUninit::uninit(); TILE_BYTES]);
        let tile = tile.0.as_mut_ptr().cast::<MaybeUninit<[u8; N]>>();
        for col_start in (band.col_begin..band.col_end).step_by(bands.tile_cols) {
            // Output element of the block's (0, 0); its column `j` starts `j * out_stride_t`
            // further.
            let out_first = band.out_base + col_start * self.out_stride_t + band.row_start;
            // SAFETY: the block's elements are elements the tensor addresses; its output
            // columns are runs of dim 0 in this plane, inside `out`, written by this task alone
            // (planes, panels and row bands partition the output).
            unsafe {
                self.write_block::<N>(
                    bands,
                    &band.block::<N>(bands, source, band.row_start..band.row_end, col_start),
                    tile,
                    out.add(out_first * N),
                )
            };
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
        #[cfg(target_arch = "x86_64")]
        if N == 16 && !bands.direct {
            // SAFETY: the block is readable, and its element (i, j) goes to output element
            // `j * out_stride_t + i` from `out_first`, writable (function contract).
            unsafe { block.transpose_lines(out_first, self.out_stride_t, bands.stream) };
            return;
        }
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
        let bands = self.bands::<N>(out.len(), out.as_ptr() as usize);
        let planes = out.len() / N / (bands.rows * bands.cols);
        // Addresses, not pointers, so that the closure may be shared with rayon's threads.
        let (source_address, out_address) = (source as usize, out.as_mut_ptr() as usize);
        let copy_task = |staging: &mut Option<Box<[MaybeUninit<Line>]>>, task: usize| {
            // SAFETY: the tensor's source and output (function contract); planes, panels and
            // row bands partition the output, one task per band; a staged band's buffer
            // comes from `band_buffer`, of the size it needs.
            unsafe {
                self.copy_band::<N>(
                    &bands,
                    task,
                    source_address as *const u8,
                    out_address as *mut u8,
                    staging.as_deref_mut(),
                )
            }
        };
        // One band buffer per piece of work a thread takes on, reused by its bands.
        let staging = || bands.staged.then(|| band_buffer::<N>(&bands));
        let tasks = planes * bands.panels * bands.per_plane;
        if out.len() < PARALLEL_THRESHOLD {
            let mut buffer = staging();
            (0..tasks).for_each(|task| copy_task(&mut buffer, task));
        } else {
            let task_bytes = bands.tile_rows * bands.panel_cols.min(bands.cols) * N;
            let min_tasks = (PARALLEL_THRESHOLD / task_bytes).max(1);
            (0..tasks)
                .into_par_iter()
                .with_min_len(min_tasks)
                .for_each_init(staging, copy_task);
        }
    }
}
