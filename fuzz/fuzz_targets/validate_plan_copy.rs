//! validate → plan → copy → export, on structure-aware DLPack metadata.
//!
//! The input is a raw `DLTensor` (rank, shape, strides or none, dtype, flags, version, data
//! address, byte offset, device) with values biased toward the 64-bit extremes. Whatever it is:
//!
//! - `TensorDescriptor::validate` returns (no panic, no overflow) and its error prints; a plain
//!   compact packed fp4/fp6 tensor within the size limits is accepted;
//! - for a valid tensor, `plan` returns for both index orders and every copy policy, and
//!   the policies agree with each other;
//! - every view addresses exactly the DLPack elements (checked arithmetically, memory is never
//!   touched: per dimension for every tensor, element by element up to 4096 elements), stays
//!   inside its parent, whose start is the tensor's lowest byte and whose size fits in isize;
//!   `parent_overhang` returns the bytes past the tensor's end;
//! - when the byte span is at most 1 MiB, the tensor is rebuilt over a real, patterned buffer
//!   and `materialize` (both orders) is compared with a naive strided read (copies above
//!   64 KiB or 4096 elements for one distinct input in 16, see `sampled`);
//! - `export_versioned(d, (), 3)` succeeds and validates back to the same
//!   descriptor fields.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rsdlpack::copy::{BUFFER_ALIGN, materialize};
use rsdlpack::dlpark::DlpackFlags;
use rsdlpack::dlpark::ffi::{
    DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLPackVersion, DLTensor,
};
use rsdlpack::export::export_versioned;
use rsdlpack::{
    CopyPolicy, ElementType, Error, IndexOrder, LayoutPlan, TensorDescriptor, ViewPlan,
};
use rsdlpack_fuzz::dlpack_flags;
use std::alloc::Layout;

/// Largest byte span the copy check backs with real memory.
const COPY_SPAN_LIMIT: i64 = 1 << 20;
/// Largest dense copy the copy check makes (broadcasts: span small, copy large). Above the
/// copy engine's 1 MiB threshold, so that its parallel path runs too (8- and 16-byte elements).
const COPY_DENSE_LIMIT: usize = 4 << 20;
/// Most elements the copy check compares one by one (keeps slow inputs rare and short).
const COPY_ELEMENT_LIMIT: usize = 1 << 17;
/// Largest tensor whose view is checked element by element.
const ENUMERATE_LIMIT: usize = 4096;
/// Copies up to this many dense bytes and elements are checked for every input; larger ones
/// (up to the limits above) for one input in `LARGE_COPY_SAMPLE`, chosen by a hash of the
/// input, so that they keep being exercised (the copy engine's parallel path) without making
/// every run pay for megabyte copies under the sanitizer (see `sampled`).
const SMALL_COPY_BYTES: usize = 64 << 10;
const SMALL_COPY_ELEMENTS: usize = 4096;
const LARGE_COPY_SAMPLE: u64 = 16;

/// A 64-bit value, biased toward the extremes.
#[derive(Arbitrary, Debug, Clone, Copy, Hash)]
enum Wide {
    Zero,
    One,
    Two,
    MinusOne,
    Small(i8),
    Min,
    Max,
    Pow62,
    NegPow62,
    NearMax(u8),
    NearMin(u8),
    /// ±2^k, or ±(2^k ± 1).
    Pow {
        shift: u8,
        negative: bool,
        nudge: i8,
    },
    Raw(i64),
}

impl Wide {
    fn value(self) -> i64 {
        match self {
            Wide::Zero => 0,
            Wide::One => 1,
            Wide::Two => 2,
            Wide::MinusOne => -1,
            Wide::Small(v) => i64::from(v),
            Wide::Min => i64::MIN,
            Wide::Max => i64::MAX,
            Wide::Pow62 => 1 << 62,
            Wide::NegPow62 => -(1 << 62),
            Wide::NearMax(k) => i64::MAX - i64::from(k),
            Wide::NearMin(k) => i64::MIN + i64::from(k),
            Wide::Pow {
                shift,
                negative,
                nudge,
            } => {
                let p = 1i64.wrapping_shl(u32::from(shift % 64));
                let v = p.wrapping_add(i64::from(nudge.signum()));
                if negative { v.wrapping_neg() } else { v }
            }
            Wide::Raw(v) => v,
        }
    }
}

/// A dimension: mostly small (so that tensors are real), sometimes anything.
#[derive(Arbitrary, Debug, Clone, Copy, Hash)]
enum Dim {
    One,
    Two,
    Three,
    Small(u8),
    Medium(u16),
    Zero,
    Any(Wide),
}

impl Dim {
    fn value(self) -> i64 {
        match self {
            Dim::One => 1,
            Dim::Two => 2,
            Dim::Three => 3,
            Dim::Small(v) => i64::from(v % 9),
            Dim::Medium(v) => i64::from(v),
            Dim::Zero => 0,
            Dim::Any(w) => w.value(),
        }
    }
}

/// A stride: mostly small, either sign, sometimes anything.
#[derive(Arbitrary, Debug, Clone, Copy, Hash)]
enum Stride {
    Small(i8),
    Tiny(u8),
    Medium(i16),
    Any(Wide),
}

impl Stride {
    fn value(self) -> i64 {
        match self {
            Stride::Small(v) => i64::from(v),
            Stride::Tiny(v) => i64::from(v % 7) - 3,
            Stride::Medium(v) => i64::from(v),
            Stride::Any(w) => w.value(),
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy, Hash)]
enum Rank {
    /// 0..=6.
    Usual(u8),
    /// 7..=33: up to one past `MAX_NDIM`.
    Large(u8),
    Negative(i8),
}

impl Rank {
    fn ndim(self) -> i32 {
        match self {
            Rank::Usual(v) => i32::from(v % 7),
            Rank::Large(v) => 7 + i32::from(v % 27),
            Rank::Negative(v) => -1 - i32::from(v.unsigned_abs()),
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy, Hash)]
enum Dtype {
    F32,
    F64,
    U8,
    I16,
    C128,
    Bool,
    BF16,
    /// fp8 e4m3fn (10) or e4m3fnuz (11).
    Fp8(bool),
    Fp4,
    Fp6,
    Other {
        code: u8,
        bits: u8,
        lanes: u16,
    },
}

impl Dtype {
    fn to_dlpack(self) -> DLDataType {
        let scalar = |code: DLDataTypeCode, bits| DLDataType::scalar(code, bits);
        match self {
            Dtype::F32 => scalar(DLDataTypeCode::FLOAT, 32),
            Dtype::F64 => scalar(DLDataTypeCode::FLOAT, 64),
            Dtype::U8 => scalar(DLDataTypeCode::UINT, 8),
            Dtype::I16 => scalar(DLDataTypeCode::INT, 16),
            Dtype::C128 => scalar(DLDataTypeCode::COMPLEX, 128),
            Dtype::Bool => scalar(DLDataTypeCode::BOOL, 8),
            Dtype::BF16 => scalar(DLDataTypeCode::BFLOAT, 16),
            Dtype::Fp8(fnuz) => scalar(DLDataTypeCode(if fnuz { 11 } else { 10 }), 8),
            Dtype::Fp4 => scalar(DLDataTypeCode::FLOAT4_E2M1FN, 4),
            Dtype::Fp6 => scalar(DLDataTypeCode::FLOAT6_E2M3FN, 6),
            Dtype::Other { code, bits, lanes } => {
                DLDataType::new(DLDataTypeCode(code), bits, lanes)
            }
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy, Hash)]
enum Address {
    Null,
    /// A page-aligned fake address.
    Page(u16),
    /// Any small address (alignment not guaranteed).
    Low(u32),
    /// Near the top of the address space.
    High(u16),
    Raw(u64),
}

impl Address {
    fn value(self) -> usize {
        match self {
            Address::Null => 0,
            Address::Page(p) => (usize::from(p) + 1) << 12,
            Address::Low(v) => v as usize,
            Address::High(k) => usize::MAX - usize::from(k),
            Address::Raw(v) => v as usize,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy, Hash)]
enum Offset {
    Zero,
    Small(u16),
    Raw(u64),
}

impl Offset {
    fn value(self) -> u64 {
        match self {
            Offset::Zero => 0,
            Offset::Small(v) => u64::from(v),
            Offset::Raw(v) => v,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy, Hash)]
enum Dev {
    Cpu,
    CpuAgain,
    Cuda,
    CudaHost,
    CudaManaged,
    Other(u8),
}

impl Dev {
    fn to_dlpack(self) -> DLDevice {
        let device_type = match self {
            Dev::Cpu | Dev::CpuAgain => DLDeviceType::CPU,
            Dev::Cuda => DLDeviceType::CUDA,
            Dev::CudaHost => DLDeviceType::CUDAHOST,
            Dev::CudaManaged => DLDeviceType::CUDAMANAGED,
            Dev::Other(v) => DLDeviceType(u32::from(v)),
        };
        DLDevice {
            device_type,
            device_id: 0,
        }
    }
}

#[derive(Arbitrary, Debug, Hash)]
struct Input {
    rank: Rank,
    dims: [Dim; 6],
    strides: [Stride; 6],
    null_strides: bool,
    dtype: Dtype,
    /// READ_ONLY = 1, IS_COPIED = 2, IS_SUBBYTE_TYPE_PADDED = 4 (low three bits).
    flags: u8,
    /// An unknown flag bit (3..=63), sometimes.
    unknown_flag: Option<u8>,
    /// `None`: legacy; else (1, minor % 4).
    minor: Option<u8>,
    data: Address,
    byte_offset: Offset,
    device: Dev,
}

fuzz_target!(|input: Input| check(&input));

/// The tensor's metadata arrays, kept alive while a `DLTensor` points into them.
struct Raw {
    shape: Vec<i64>,
    strides: Vec<i64>,
    ndim: i32,
    null_strides: bool,
}

impl Raw {
    fn tensor(&mut self, input: &Input, data: usize, byte_offset: u64) -> DLTensor {
        DLTensor {
            data: data as *mut _,
            device: input.device.to_dlpack(),
            ndim: self.ndim,
            dtype: input.dtype.to_dlpack(),
            shape: self.shape.as_mut_ptr(),
            strides: if self.null_strides {
                std::ptr::null_mut()
            } else {
                self.strides.as_mut_ptr()
            },
            byte_offset,
        }
    }
}

fn check(input: &Input) {
    let ndim = input.rank.ndim();
    let len = ndim.clamp(0, 33) as usize;
    let mut raw = Raw {
        // Beyond the sixth dimension: length 1, strides cycling through the given ones.
        shape: (0..len)
            .map(|k| input.dims.get(k).map_or(1, |d| d.value()))
            .collect(),
        strides: (0..len).map(|k| input.strides[k % 6].value()).collect(),
        ndim,
        null_strides: input.null_strides,
    };
    let flags = dlpack_flags(input.flags, input.unknown_flag);
    let version = input.minor.map(|m| DLPackVersion {
        major: 1,
        minor: u32::from(m % 4),
    });
    let data = input.data.value();
    let byte_offset = input.byte_offset.value();
    let tensor = raw.tensor(input, data, byte_offset);
    // SAFETY: shape and strides point to `len` values, `len == ndim` whenever ndim is in range.
    let d = match unsafe { TensorDescriptor::validate(&tensor, version, flags) } {
        Ok(d) => d,
        Err(e) => {
            let _ = e.to_string();
            assert!(
                !packed_within_limits(input, &raw, data as u128 + u128::from(byte_offset)),
                "a valid packed sub-byte tensor was refused: {e}"
            );
            return;
        }
    };

    // The descriptor restates the input.
    assert_eq!(d.ndim(), len);
    assert!(len <= rsdlpack::MAX_NDIM);
    assert_eq!(&d.shape()[..], &raw.shape[..]);
    if !raw.null_strides {
        assert_eq!(&d.strides()[..], &raw.strides[..]);
    }
    assert_eq!(
        d.first_element() as u64,
        (data as u64).wrapping_add(byte_offset)
    );
    let count = d.element_count();
    let dense = d.dense_byte_size();
    let (low, high) = d.byte_span();
    assert!(dense <= isize::MAX as usize);
    // As documented: an element count beyond isize::MAX is refused, even where packed
    // sub-byte elements would fit in fewer bytes (a consumer's int64 count would overflow).
    assert!(count <= isize::MAX as usize, "{count} elements accepted");
    if count == 0 {
        assert_eq!((low, high), (0, 0));
    } else {
        assert!(low <= 0 && high > 0, "span {low}..{high}");
        assert!(i128::from(high) - i128::from(low) <= isize::MAX as i128);
        assert!(d.first_element() as i128 + i128::from(low) >= 0);
        assert!(d.first_element() as i128 + i128::from(high) <= usize::MAX as i128);
        // Misaligned data is valid; the planner must not view it (checked in check_plans).
        assert_eq!(
            d.is_aligned(),
            d.first_element() % d.element().alignment() == 0
        );
    }

    check_export(&d);
    for order in [IndexOrder::Producer, IndexOrder::Reversed] {
        check_plans(&d, order);
    }
    if count > 0 {
        check_copy(input, &mut raw, version, flags, &d);
    }
}

/// Whether the input is a plain packed fp4/fp6 host tensor (compact row-major strides, no
/// flags, non-null data) whose element count and exact byte size, counted in 128 bits, are
/// within `isize::MAX` and the address space: validation must accept it, however large
/// `elements × bits` is.
fn packed_within_limits(input: &Input, raw: &Raw, first_element: u128) -> bool {
    let bits = match input.dtype {
        Dtype::Fp4 => 4u128,
        Dtype::Fp6 => 6,
        _ => return false,
    };
    let plain = matches!(input.device, Dev::Cpu | Dev::CpuAgain)
        && matches!(input.rank, Rank::Usual(_))
        && input.flags & 7 == 0
        && input.unknown_flag.is_none()
        && !raw.null_strides
        && input.data.value() != 0
        && raw.shape.iter().all(|&n| n > 0);
    if !plain {
        return false;
    }
    let mut expected = 1i128;
    for k in (0..raw.shape.len()).rev() {
        if raw.shape[k] > 1 && i128::from(raw.strides[k]) != expected {
            return false;
        }
        expected = expected.saturating_mul(i128::from(raw.shape[k]));
    }
    let elements = raw
        .shape
        .iter()
        .try_fold(1u128, |p, &n| p.checked_mul(n as u128));
    let Some(bytes) = elements
        .and_then(|e| e.checked_mul(bits))
        .map(|b| b.div_ceil(8))
    else {
        return false;
    };
    elements.is_some_and(|e| e <= isize::MAX as u128)
        && bytes <= isize::MAX as u128
        && first_element + bytes <= usize::MAX as u128
}

fn ordered(d: &TensorDescriptor, order: IndexOrder) -> (Vec<i64>, Vec<i64>) {
    let (mut shape, mut strides) = (d.shape().to_vec(), d.strides().to_vec());
    if order == IndexOrder::Reversed {
        shape.reverse();
        strides.reverse();
    }
    (shape, strides)
}

fn check_export(d: &TensorDescriptor) {
    let managed = export_versioned(d, (), 3)
        .unwrap_or_else(|e| panic!("export of a validated tensor failed: {e}; {d:?}"));
    // SAFETY: a tensor we just built; its metadata lives in its own allocation.
    let back = unsafe {
        TensorDescriptor::validate(managed.tensor(), Some(managed.version()), managed.flags())
    }
    .unwrap_or_else(|e| panic!("exported tensor does not validate: {e}; {d:?}"));
    assert_eq!(back.shape(), d.shape(), "{d:?}");
    assert_eq!(back.strides(), d.strides(), "{d:?}");
    assert_eq!(back.element(), d.element(), "{d:?}");
    assert_eq!(back.first_element(), d.first_element(), "{d:?}");
    assert_eq!(back.device(), d.device(), "{d:?}");
    assert_eq!(
        (back.read_only(), back.is_copied()),
        (d.read_only(), d.is_copied()),
        "{d:?}"
    );
}

fn check_plans(d: &TensorDescriptor, order: IndexOrder) {
    let never = rsdlpack::layout::plan(d, order, CopyPolicy::Never);
    let if_needed = rsdlpack::layout::plan(d, order, CopyPolicy::IfNeeded);
    let always = rsdlpack::layout::plan(d, order, CopyPolicy::Always);
    let (shape, strides) = ordered(d, order);
    let dims: Vec<usize> = shape.iter().map(|&n| n as usize).collect();

    if let ElementType::PackedBits { .. } = d.element() {
        let bytes = d.dense_byte_size();
        if bytes == 0 {
            // No bytes: an empty array whatever the policy (nothing to share or copy).
            for plan in [&never, &if_needed, &always] {
                assert!(
                    matches!(plan, Ok(LayoutPlan::Empty { dims }) if dims[..] == [0]),
                    "{plan:?}"
                );
            }
            return;
        }
        assert!(
            matches!(&always, Ok(LayoutPlan::Copy { dims, .. }) if dims[..] == [bytes]),
            "{always:?}"
        );
        for plan in [&never, &if_needed] {
            let Ok(LayoutPlan::View(view)) = plan else {
                panic!("packed tensor without a byte view: {plan:?}")
            };
            assert_eq!(view.parent_dims[..], [bytes]);
            assert_eq!(view.parent_byte_offset, 0);
            assert!(view.is_whole_parent() && view.is_identity_permutation());
            assert_eq!(view.parent_overhang(d), 0);
        }
        return;
    }

    if d.element_count() == 0 {
        for plan in [&never, &if_needed, &always] {
            assert!(
                matches!(plan, Ok(LayoutPlan::Empty { dims: e }) if e[..] == dims[..]),
                "empty tensor planned as {plan:?}"
            );
        }
        return;
    }

    assert!(
        matches!(&always, Ok(LayoutPlan::Copy { dims: c, .. }) if c[..] == dims[..]),
        "{always:?}"
    );
    match (&never, &if_needed) {
        (Ok(LayoutPlan::View(a)), Ok(LayoutPlan::View(b))) => {
            assert!(d.is_aligned(), "a view of misaligned data: {d:?}");
            assert_eq!(a, b);
            check_view(d, a, &shape, &strides);
        }
        (Err(Error::Misaligned { .. }), Ok(LayoutPlan::Copy { dims: c, reason })) => {
            assert!(!d.is_aligned());
            assert_eq!(*reason, rsdlpack::layout::CopyReason::Misaligned);
            assert_eq!(c[..], dims[..]);
        }
        (Err(Error::CopyRequired { .. }), Ok(LayoutPlan::Copy { dims: c, .. })) => {
            assert!(d.is_aligned());
            assert_eq!(c[..], dims[..]);
        }
        other => panic!("policies disagree: {other:?}"),
    }
}

/// The view addresses exactly DLPack's elements, within its parent (`shape`/`strides` in
/// result order).
fn check_view(d: &TensorDescriptor, view: &ViewPlan, shape: &[i64], strides: &[i64]) {
    let n = shape.len();
    let size = d.element().size() as i128;
    assert_eq!(view.parent_dims.len(), view.ranges.len(), "{view:?}");
    assert_eq!(view.permutation.len(), n, "{view:?}");
    let mut seen = vec![false; view.parent_dims.len()];
    for &p in view.permutation.iter() {
        assert!(p < seen.len() && !seen[p], "not a permutation: {view:?}");
        seen[p] = true;
    }
    assert!(seen.iter().all(|&s| s), "not a permutation: {view:?}");
    let result_dims: Vec<usize> = view.result_dims().to_vec();
    let dims: Vec<usize> = shape.iter().map(|&s| s as usize).collect();
    assert_eq!(result_dims, dims, "{view:?}");

    // The parent fits in isize (bytes), and its strides (elements) in i128.
    let mut parent_strides = vec![0i128; view.parent_dims.len()];
    let mut parent_elements: u128 = 1;
    for (p, &dim) in view.parent_dims.iter().enumerate() {
        parent_strides[p] = parent_elements as i128;
        parent_elements = parent_elements
            .checked_mul(dim as u128)
            .filter(|&e| e <= isize::MAX as u128)
            .unwrap_or_else(|| panic!("parent larger than isize::MAX elements: {view:?}"));
    }
    let parent_bytes = parent_elements * size as u128;
    assert!(
        parent_bytes <= isize::MAX as u128,
        "parent of {parent_bytes} bytes: {view:?}"
    );
    let (low, high) = d.byte_span();
    assert_eq!(
        view.parent_byte_offset as i64, low,
        "parent does not start at the lowest byte: {view:?}, shape {shape:?}, strides {strides:?}"
    );

    // Per dimension: ranges inside the parent, and the address is linear with DLPack's.
    let mut constant = view.parent_byte_offset as i128;
    for k in 0..n {
        let p = view.permutation[k];
        let r = view.ranges[p];
        assert_eq!(r.len as i64, shape[k], "{view:?}");
        assert!(r.start >= 1, "{view:?}");
        let first = r.start as i128 - 1;
        let last = first + (r.len as i128 - 1) * r.step as i128;
        let parent_dim = view.parent_dims[p] as i128;
        assert!(
            (0..parent_dim).contains(&first) && (0..parent_dim).contains(&last),
            "dim {k} leaves parent dim {p}: {view:?}, shape {shape:?}, strides {strides:?}"
        );
        constant += first * parent_strides[p] * size;
        if shape[k] >= 2 {
            assert_eq!(
                r.step as i128 * parent_strides[p],
                strides[k] as i128,
                "dim {k} steps wrongly: {view:?}, shape {shape:?}, strides {strides:?}"
            );
        }
    }
    assert_eq!(
        constant, 0,
        "index 0 is not the first element: {view:?}, shape {shape:?}, strides {strides:?}"
    );

    // Element by element, as `assert_view_addresses` does, for small tensors: both addresses
    // advance together, first index fastest (dims of extent 1 never move).
    let count = d.element_count();
    if count <= ENUMERATE_LIMIT {
        let moving: Vec<usize> = (0..n).filter(|&k| shape[k] > 1).collect();
        let mut index = vec![0i128; n];
        let mut parent_index: Vec<i128> = (0..n)
            .map(|k| view.ranges[view.permutation[k]].start as i128 - 1)
            .collect();
        let mut dlpack = 0i128;
        let mut julia = view.parent_byte_offset as i128
            + (0..n)
                .map(|k| parent_index[k] * parent_strides[view.permutation[k]] * size)
                .sum::<i128>();
        for flat in 0..count {
            assert_eq!(julia, dlpack, "element {flat}: {view:?}");
            for &k in &moving {
                let p = view.permutation[k];
                let step = view.ranges[p].step as i128;
                if index[k] + 1 < shape[k] as i128 {
                    index[k] += 1;
                    parent_index[k] += step;
                    assert!((0..view.parent_dims[p] as i128).contains(&parent_index[k]));
                    dlpack += strides[k] as i128 * size;
                    julia += step * parent_strides[p] * size;
                    break;
                }
                // Wrap this index to 0 and carry into the next.
                let back = index[k];
                index[k] = 0;
                parent_index[k] -= back * step;
                dlpack -= back * strides[k] as i128 * size;
                julia -= back * step * parent_strides[p] * size;
            }
        }
    }

    let overhang = view.parent_overhang(d);
    let parent_end = view.parent_byte_offset as i128 + parent_bytes as i128;
    assert!(
        parent_end >= i128::from(high),
        "parent ends before the tensor: {view:?}"
    );
    assert_eq!(overhang as i128, parent_end - i128::from(high), "{view:?}");
}

/// Whether this input's large copies are checked: one input in `LARGE_COPY_SAMPLE`, chosen by a
/// hash of the decoded input (the same input always answers the same), each distinct input
/// once per process: libFuzzer often mutates only bytes the decoding ignores, which would
/// otherwise repeat the same megabyte copy. `RSDLPACK_FUZZ_ALL_COPIES=1` checks every input
/// (for `tmin` or replays of a crash in a large copy).
fn sampled(input: &Input) -> bool {
    use std::hash::{Hash, Hasher};
    static ALL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ALL.get_or_init(|| std::env::var_os("RSDLPACK_FUZZ_ALL_COPIES").is_some_and(|v| v == "1")) {
        return true;
    }
    let mut hasher = std::hash::DefaultHasher::new();
    input.hash(&mut hasher);
    let hash = hasher.finish();
    if hash % LARGE_COPY_SAMPLE != 0 {
        return false;
    }
    static SEEN: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap();
    if seen.contains(&hash) {
        return false;
    }
    if seen.len() >= 4096 {
        seen.clear();
    }
    seen.push(hash);
    true
}

/// A 64-byte-aligned heap buffer, freed on drop.
struct Backing {
    ptr: *mut u8,
    len: usize,
}

impl Backing {
    fn new(len: usize) -> Self {
        let layout = Layout::from_size_align(len, BUFFER_ALIGN).unwrap();
        // SAFETY: `len > 0` (a non-empty tensor spans at least one byte).
        let ptr = unsafe { std::alloc::alloc(layout) };
        assert!(!ptr.is_null());
        // A pattern in which every 8-byte word differs from its neighbours, written a word
        // at a time (the tail byte by byte).
        let words = len / 8;
        for w in 0..words {
            let mixed = (w as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            // SAFETY: inside the allocation (`w * 8 + 8 <= len`); unaligned writes are allowed.
            unsafe {
                ptr.add(w * 8)
                    .cast::<u64>()
                    .write_unaligned(mixed ^ (mixed >> 29))
            };
        }
        for j in words * 8..len {
            // SAFETY: inside the allocation.
            unsafe { ptr.add(j).write((j as u8).wrapping_mul(151) ^ 0x3c) };
        }
        Self { ptr, len }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: allocated and written in `new`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len, BUFFER_ALIGN).unwrap();
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

fn check_copy(
    input: &Input,
    raw: &mut Raw,
    version: Option<DLPackVersion>,
    flags: DlpackFlags,
    d: &TensorDescriptor,
) {
    let (low, high) = d.byte_span();
    let span = high - low;
    if span > COPY_SPAN_LIMIT
        || d.dense_byte_size() > COPY_DENSE_LIMIT
        || d.element_count() > COPY_ELEMENT_LIMIT
    {
        return;
    }
    let large = span as usize > SMALL_COPY_BYTES
        || d.dense_byte_size() > SMALL_COPY_BYTES
        || d.element_count() > SMALL_COPY_ELEMENTS;
    if large && !sampled(input) {
        return;
    }
    if !d.device().kind.host_accessible() {
        // Refused before any read (the address is fake).
        // SAFETY: never dereferenced: the device is not host memory.
        let result = unsafe { materialize(d, IndexOrder::Producer) };
        assert!(
            matches!(result, Err(Error::UnsupportedDevice { .. })),
            "device memory copied on the host"
        );
        return;
    }
    let backing = Backing::new(span as usize);
    let base = backing.ptr as usize;
    // The first element sits `-low` bytes into the buffer, so the lowest touched byte is its
    // start. Keep the input's byte offset when it fits below that address.
    let first = base + (-low) as usize;
    let requested = input.byte_offset.value();
    let (data, byte_offset) = match usize::try_from(requested) {
        Ok(bo) if bo < first => (first - bo, requested),
        _ => (base, (-low) as u64),
    };
    let tensor = raw.tensor(input, data, byte_offset);
    // SAFETY: as in `check`: shape and strides point to `ndim` values.
    let Ok(real) = (unsafe { TensorDescriptor::validate(&tensor, version, flags) }) else {
        return;
    };
    assert_eq!(real.first_element(), first);
    assert_eq!(
        (
            real.element(),
            real.shape(),
            real.strides(),
            real.byte_span()
        ),
        (d.element(), d.shape(), d.strides(), d.byte_span())
    );
    let source = backing.bytes();
    let size = real.element().size();
    for order in [IndexOrder::Producer, IndexOrder::Reversed] {
        // SAFETY: every byte the tensor addresses lies in `backing`, which nobody writes now.
        let out = unsafe { materialize(&real, order) }
            .unwrap_or_else(|e| panic!("copy failed: {e}; {real:?}"));
        assert_eq!(out.len(), real.dense_byte_size());
        assert_eq!(out.as_ptr() as usize % BUFFER_ALIGN, 0);
        let out = out.as_slice();
        if let ElementType::PackedBits { .. } = real.element() {
            assert_eq!(out, &source[..out.len()], "packed copy differs");
            continue;
        }
        let (shape, strides) = ordered(&real, order);
        // The source offset of each element in column-major order of `shape`, walked as an
        // odometer (first index fastest; dims of extent 1 never move).
        let moving: Vec<usize> = (0..shape.len()).filter(|&k| shape[k] > 1).collect();
        let mut index = vec![0i64; shape.len()];
        let mut offset = -i128::from(low);
        for (flat, element) in out.chunks_exact(size).enumerate() {
            assert!(
                offset >= 0 && offset + size as i128 <= span as i128,
                "element {flat} outside the span"
            );
            let at = offset as usize;
            assert_eq!(
                element,
                &source[at..at + size],
                "element {flat} ({order:?}) differs: shape {shape:?}, strides {strides:?}"
            );
            for &k in &moving {
                let step = i128::from(strides[k]) * size as i128;
                if index[k] + 1 < shape[k] {
                    index[k] += 1;
                    offset += step;
                    break;
                }
                offset -= i128::from(index[k]) * step;
                index[k] = 0;
            }
        }
    }
}
