//! The stores and register kernels the tiled copies are built from.

/// Copies `len` bytes from `source` to `destination`, bypassing the caches if `stream`.
///
/// # Safety
/// As `copy_nonoverlapping`; after streaming, [`store_fence`] before the bytes are read.
pub(super) unsafe fn write_run(destination: *mut u8, source: *const u8, len: usize, stream: bool) {
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
pub(super) fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    sse2::store_fence();
}

/// SSE2 kernels. SSE2 is part of the x86_64 baseline (every x86_64 target enables it), so they
/// need no runtime feature check; AVX2 ones would need one and gain nothing while the copy is
/// bound by memory (BENCHMARKS.md, "Measured choices").
#[cfg(target_arch = "x86_64")]
pub(super) mod sse2 {
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

    /// Moves one 16-byte element, with a non-temporal store if `stream`.
    ///
    /// # Safety
    /// 16 bytes readable at `source` and writable at `destination`, 16-byte aligned if `stream`.
    #[inline]
    #[target_feature(enable = "sse2")]
    pub unsafe fn move_element(destination: *mut u8, source: *const u8, stream: bool) {
        // SAFETY: forwarded from this function's contract.
        unsafe {
            let value = _mm_loadu_si128(source.cast());
            if stream {
                _mm_stream_si128(destination.cast(), value);
            } else {
                _mm_storeu_si128(destination.cast(), value);
            }
        }
    }

    pub fn store_fence() {
        // SAFETY: a fence has no memory-safety preconditions, and SSE2 is enabled on every
        // x86_64 target.
        unsafe { _mm_sfence() }
    }
}
