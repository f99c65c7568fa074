use super::tiles::{PANEL_COLUMNS, READ_ROWS, STREAM_THRESHOLD};
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
fn naive_bytes(source: &[u8], base: isize, shape: &[i64], strides: &[i64], size: usize) -> Vec<u8> {
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

/// Streamed outputs whose columns are whole cache lines long, 0, 16 or 48 bytes off a line
/// (NumPy's and torch's buffers are 16 bytes off): the first band is cut short so that the
/// others write whole lines. Every element size, 16-byte elements through their own kernel.
#[test]
fn streamed_transposes_into_outputs_off_a_cache_line_match_the_definition() {
    let cols = 1403i64;
    for element in [
        ElementType::UInt8,
        ElementType::BFloat16,
        ElementType::Float32,
        ElementType::Float64,
        ElementType::ComplexF64,
    ] {
        let rows = 6016 / element.size() as i64;
        let len = (rows * cols) as usize * element.size();
        assert!(len >= STREAM_THRESHOLD && (rows as usize * element.size()).is_multiple_of(64));
        let mut buffer = AlignedBuffer::zeroed(len + 64);
        for offset in [0, 16, 48] {
            let out = &mut buffer.as_mut_slice()[offset..][..len];
            check_view(element, &[rows, cols], &[cols, 1], out);
        }
    }
}

/// The bands of a streamed transpose: panels of `PANEL_COLUMNS` columns, and where every
/// output column starts at the same offset in a cache line, a short first band after which
/// every band starts on a line; together the bands cover each column once.
#[test]
fn streamed_bands_start_on_cache_lines_and_cover_every_row_once() {
    let (rows, cols) = (1504i64, 2500i64);
    let (shape, strides) = ([rows, cols], [cols, 1]);
    let tiles = Tiles::new(&shape, &strides).unwrap();
    let len = (rows * cols) as usize * 4;
    for offset in [0usize, 16, 48, 4] {
        let address = (1 << 20) + offset;
        let bands = tiles.bands::<4>(len, address);
        assert!(bands.stream);
        assert_eq!((bands.panel_cols, bands.panels), (PANEL_COLUMNS, 3));
        let mut next = 0;
        for band in 0..bands.per_plane {
            let (start, end) = bands.rows_of(band);
            assert_eq!(start, next, "offset {offset}: band {band} follows the last");
            assert!(end > start && end - start <= bands.tile_rows);
            if band > 0 {
                assert_eq!(
                    (address + start * 4) % 64,
                    0,
                    "offset {offset}: band {band}"
                );
            }
            next = end;
        }
        assert_eq!(next, rows as usize, "offset {offset}");
    }
    // Columns that are not whole lines long start at different offsets: bands as they come.
    let odd = [1501i64, cols];
    let tiles = Tiles::new(&odd, &strides).unwrap();
    let bands = tiles.bands::<4>(1501 * cols as usize * 4, (1 << 20) + 16);
    assert_eq!(bands.rows_of(0), (0, bands.tile_rows));
}

/// Streamed transposes of 1-, 2-, 4- and 8-byte elements read their bands in sub-bands of
/// `READ_ROWS` rows through a band buffer; 16-byte elements and outputs below the streaming
/// size do not. Staged copies of several planes, reversed and stepped views, and a first band
/// cut short (output 16 bytes off a line) match the definition.
#[test]
fn streamed_bands_are_staged_in_sub_bands_and_match_the_definition() {
    let (shape, strides) = ([2048i64, 2048], [2048i64, 1]);
    let tiles = Tiles::new(&shape, &strides).unwrap();
    let staged = |len: usize, size: usize| {
        let bands = match size {
            1 => tiles.bands::<1>(len, 1 << 20),
            2 => tiles.bands::<2>(len, 1 << 20),
            4 => tiles.bands::<4>(len, 1 << 20),
            8 => tiles.bands::<8>(len, 1 << 20),
            _ => tiles.bands::<16>(len, 1 << 20),
        };
        assert!(!bands.staged || bands.tile_rows > READ_ROWS);
        (bands.stream, bands.staged)
    };
    for size in [1, 2, 4, 8] {
        assert_eq!(
            staged(STREAM_THRESHOLD, size),
            (true, true),
            "{size}-byte elements"
        );
        assert_eq!(staged(STREAM_THRESHOLD - 1, size), (false, false));
    }
    assert_eq!(staged(STREAM_THRESHOLD, 16), (true, false));
    // Three (dim 0, dim 2) planes of 1100 × 701 (not whole tiles, nor whole sub-bands).
    let (a, b, c) = (1100i64, 3i64, 701i64);
    for element in [ElementType::Float32, ElementType::Float64] {
        let len = (a * b * c) as usize * element.size();
        assert!(len >= STREAM_THRESHOLD);
        let mut buffer = AlignedBuffer::zeroed(len + 64);
        let out = &mut buffer.as_mut_slice()[16..][..len];
        check_view(element, &[a, b, c], &[b * c, c, 1], out);
        check_view(element, &[a, b, c], &[-b * c, c, -1], out);
    }
    // Bytes: reversed rows, and every other element of every other row.
    let (rows, cols) = (6016i64, 1403i64);
    let len = (rows * cols) as usize;
    assert!(len >= STREAM_THRESHOLD);
    let mut buffer = AlignedBuffer::zeroed(len + 64);
    for offset in [16, 5] {
        let out = &mut buffer.as_mut_slice()[offset..][..len];
        check_view(ElementType::UInt8, &[rows, cols], &[-cols, 1], out);
        check_view(ElementType::UInt8, &[rows, cols], &[4 * cols, 2], out);
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
