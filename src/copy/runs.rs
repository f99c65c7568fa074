//! Copies by runs along the output's first dim: one `memcpy` per run where the source's run is
//! contiguous, one element at a time where it is stepped, and one piece per thread for a
//! contiguous tensor.

use super::{PARALLEL_THRESHOLD, StridedCopy};
use crate::copy::BUFFER_ALIGN;
use crate::dims::DimVec;
use rayon::prelude::*;

/// Copies `out.len()` consecutive bytes from `source`, split across rayon's threads when large.
///
/// # Safety
/// `source` must be readable for `out.len()` bytes, none of them inside `out`.
pub(super) unsafe fn copy_contiguous(source: *const u8, out: &mut [u8]) {
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

/// The tensor seen as runs along its first (result-order) dimension.
pub(super) struct Runs<'a> {
    shape: &'a [i64],
    strides: &'a [i64],
    run_len: usize,
    run_stride: isize,
}

impl<'a> Runs<'a> {
    pub(super) fn new(shape: &'a [i64], strides: &'a [i64]) -> Self {
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
