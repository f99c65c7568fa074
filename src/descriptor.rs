//! Validation at the border: a raw `DLTensor` (plus the managed tensor's version and flags)
//! becomes a [`TensorDescriptor`], checked once, before any pointer is trusted. Everything
//! downstream (planner, copy engine, bridges) takes the descriptor, never the raw parts.

use crate::device::Device;
use crate::dims::DimVec;
pub use crate::dims::MAX_NDIM;
use crate::dtype::ElementType;
use crate::error::{Error, Result};
use dlpark::DlpackFlags;
use dlpark::ffi::{DLPackVersion, DLTensor};

/// A validated tensor description. Shape and strides are copies in DLPack order (row-major
/// meaning: the last index is the one that varies fastest in a compact tensor); strides are in
/// elements and always explicit.
///
/// Validation establishes the ranges every later computation relies on: the element count and
/// the dense byte size fit in `isize`, and for a non-empty tensor so does the byte span (from
/// the lowest to one past the highest byte it touches), which lies inside the address space.
/// An empty tensor addresses nothing, so its strides are taken as they come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorDescriptor {
    /// Address of the element at index (0, …, 0): `data + byte_offset`.
    pub first_element: usize,
    pub device: Device,
    pub element: ElementType,
    pub shape: DimVec<i64>,
    pub strides: DimVec<i64>,
    pub read_only: bool,
    pub is_copied: bool,
    /// `None` for a legacy (unversioned) tensor.
    pub version: Option<DLPackVersion>,
}

impl TensorDescriptor {
    /// Validates a raw tensor.
    ///
    /// # Safety
    /// `tensor.shape` must point to `tensor.ndim` readable `i64`s when `ndim > 0`, and
    /// `tensor.strides`, when non-null, likewise; both must stay unchanged during the call.
    /// The data pointer is never dereferenced.
    pub unsafe fn validate(
        tensor: &DLTensor,
        version: Option<DLPackVersion>,
        flags: DlpackFlags,
    ) -> Result<Self> {
        let unknown = flags.bits() & !DlpackFlags::all().bits();
        if unknown != 0 {
            return Err(Error::UnknownFlags { bits: unknown });
        }
        let ndim = usize::try_from(tensor.ndim)
            .ok()
            .filter(|&n| n <= MAX_NDIM)
            .ok_or(Error::BadRank {
                ndim: tensor.ndim.into(),
                max: MAX_NDIM,
            })?;
        let shape = if ndim == 0 {
            DimVec::new()
        } else if tensor.shape.is_null() {
            return Err(Error::NullShape { ndim });
        } else {
            // SAFETY: non-null and, by this function's contract, `ndim` readable values.
            let raw = unsafe { std::slice::from_raw_parts(tensor.shape, ndim) };
            DimVec::from_slice(raw).expect("ndim checked against MAX_NDIM")
        };
        if let Some(axis) = shape.iter().position(|&d| d < 0) {
            return Err(Error::NegativeDimension {
                axis,
                value: shape[axis],
            });
        }
        let element = ElementType::from_dlpack(
            tensor.dtype,
            flags.contains(DlpackFlags::IS_SUBBYTE_TYPE_PADDED),
        )?;
        // Counted before anything multiplies extents: a zero anywhere makes the tensor empty,
        // however large its other dimensions (an empty tensor is valid whatever they are).
        let elements = element_count(&shape);
        let strides = if ndim == 0 {
            DimVec::new()
        } else if tensor.strides.is_null() {
            if let Some(v) = version.filter(|v| v.major == 1 && v.minor >= 2) {
                return Err(Error::MissingStrides {
                    major: v.major,
                    minor: v.minor,
                    ndim,
                });
            }
            // A non-empty tensor whose strides do not fit has an element count that does
            // not either: it is refused just below.
            dense_strides(&shape, true)
        } else {
            // SAFETY: non-null and, by this function's contract, `ndim` readable values.
            let raw = unsafe { std::slice::from_raw_parts(tensor.strides, ndim) };
            DimVec::from_slice(raw).expect("ndim checked against MAX_NDIM")
        };
        let overflow = || extent_overflow(&shape, &strides);
        let elements = elements.ok_or_else(overflow)?;
        // A copy must be possible to describe: the dense size fits an isize (zero strides can
        // make it far larger than the memory the tensor spans).
        dense_size(elements, element).ok_or_else(overflow)?;
        if let ElementType::PackedBits { code, bits } = element
            && elements > 0
            && !is_row_major_compact(&shape, &strides)
        {
            return Err(Error::PackedSubbyteLayout { code, bits });
        }

        let first_element = usize::try_from(tensor.byte_offset)
            .ok()
            .and_then(|offset| (tensor.data as usize).checked_add(offset))
            .ok_or_else(overflow)?;
        if elements > 0 {
            if tensor.data.is_null() {
                return Err(Error::NullData { elements });
            }
            let (low, high) =
                byte_extent(&shape, &strides, element, elements).ok_or_else(overflow)?;
            let in_address_space = (first_element as i128 + low as i128) >= 0
                && (first_element as i128 + high as i128) <= usize::MAX as i128;
            if !in_address_space {
                return Err(overflow());
            }
            // Alignment is not checked here: a misaligned tensor is valid DLPack (NumPy makes
            // them), and whether one can be viewed is the layout planner's question.
        }

        Ok(Self {
            first_element,
            device: Device::from_dlpack(tensor.device),
            element,
            shape,
            strides,
            read_only: flags.contains(DlpackFlags::READ_ONLY),
            is_copied: flags.contains(DlpackFlags::IS_COPIED),
            version,
        })
    }

    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements (the product of the shape; 1 for a 0-d tensor).
    pub fn element_count(&self) -> usize {
        element_count(&self.shape).expect("validated shape")
    }

    /// Whether the tensor is compact row-major (size-1 dimensions may carry any stride).
    pub fn is_row_major_compact(&self) -> bool {
        is_row_major_compact(&self.shape, &self.strides)
    }

    /// Lowest and highest (exclusive) byte offsets from the first element that the tensor
    /// touches; `(0, 0)` when it is empty.
    pub fn byte_span(&self) -> (i64, i64) {
        let elements = self.element_count();
        if elements == 0 {
            return (0, 0);
        }
        byte_extent(&self.shape, &self.strides, self.element, elements).expect("validated extent")
    }

    /// Whether the first element is aligned as the element type needs (every element then is:
    /// strides count whole elements). An empty tensor addresses nothing and counts as aligned.
    pub fn is_aligned(&self) -> bool {
        self.element_count() == 0 || self.first_element.is_multiple_of(self.element.alignment())
    }

    /// Bytes the elements occupy when packed densely (packed sub-byte types: rounded up).
    pub fn dense_byte_size(&self) -> usize {
        dense_size(self.element_count(), self.element).expect("validated dense size")
    }
}

fn extent_overflow(shape: &[i64], strides: &[i64]) -> Error {
    Error::ExtentOverflow {
        shape: shape.to_vec(),
        strides: strides.to_vec(),
    }
}

/// Compact strides for `shape` (≤ [`MAX_NDIM`] dims), row-major (`row_major`) or
/// column-major; a size-0 or size-1 dimension counts as 1. Validation bounds the dense size of
/// a non-empty tensor, so only an empty tensor's strides can overflow; it addresses nothing,
/// and 0 stands in for a stride that does not fit in `i64`.
pub fn dense_strides(shape: &[i64], row_major: bool) -> DimVec<i64> {
    let ndim = shape.len();
    let mut strides = DimVec::filled(0i64, ndim).expect("at most MAX_NDIM dims");
    let mut running = Some(1i64);
    for i in 0..ndim {
        let k = if row_major { ndim - 1 - i } else { i };
        strides[k] = running.unwrap_or(0);
        running = running.and_then(|r| r.checked_mul(shape[k].max(1)));
    }
    strides
}

/// Whether `strides` are the compact row-major ones for `shape`, ignoring size-1 dimensions.
fn is_row_major_compact(shape: &[i64], strides: &[i64]) -> bool {
    dense_strides(shape, true)
        .iter()
        .zip(strides)
        .zip(shape)
        .all(|((c, s), &n)| n <= 1 || c == s)
}

/// The product of `shape`: 0 as soon as one dimension is 0, `None` on overflow. Dimensions
/// are non-negative (checked before).
fn element_count(shape: &[i64]) -> Option<usize> {
    if shape.contains(&0) {
        return Some(0);
    }
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
}

/// Bytes `elements` take densely, if that fits in `isize`.
fn dense_size(elements: usize, element: ElementType) -> Option<usize> {
    let bytes = match element {
        ElementType::PackedBits { bits, .. } => elements.checked_mul(bits as usize)?.div_ceil(8),
        element => elements.checked_mul(element.size())?,
    };
    (bytes <= isize::MAX as usize).then_some(bytes)
}

/// Lowest and highest byte offsets (relative to the first element) that the tensor touches,
/// the highest one exclusive, if the span between them fits in `isize`. Only for non-empty
/// tensors.
fn byte_extent(
    shape: &[i64],
    strides: &[i64],
    element: ElementType,
    elements: usize,
) -> Option<(i64, i64)> {
    if let ElementType::PackedBits { .. } = element {
        let bytes = dense_size(elements, element)?;
        return Some((0, i64::try_from(bytes).ok()?));
    }
    let size = element.size() as i64;
    let (mut low, mut high) = (0i64, 0i64);
    for (&n, &s) in shape.iter().zip(strides) {
        let reach = (n - 1).checked_mul(s)?.checked_mul(size)?;
        if reach < 0 {
            low = low.checked_add(reach)?;
        } else {
            high = high.checked_add(reach)?;
        }
    }
    let high = high.checked_add(size)?;
    // Both ends fit in i64, so the difference fits in i128.
    (i128::from(high) - i128::from(low) <= isize::MAX as i128).then_some((low, high))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlpark::ffi::{DLDataType, DLDataTypeCode, DLDevice};

    struct Raw {
        shape: Vec<i64>,
        strides: Option<Vec<i64>>,
        tensor: DLTensor,
    }

    fn raw(shape: &[i64], strides: Option<&[i64]>, data: usize, dtype: DLDataType) -> Raw {
        let mut raw = Raw {
            shape: shape.to_vec(),
            strides: strides.map(<[i64]>::to_vec),
            tensor: DLTensor {
                data: data as *mut _,
                device: DLDevice::CPU,
                ndim: shape.len() as i32,
                dtype,
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
        };
        raw.tensor.shape = raw.shape.as_mut_ptr();
        if let Some(s) = raw.strides.as_mut() {
            raw.tensor.strides = s.as_mut_ptr();
        }
        raw
    }

    fn check(
        raw: &Raw,
        version: Option<(u32, u32)>,
        flags: DlpackFlags,
    ) -> Result<TensorDescriptor> {
        let version = version.map(|(major, minor)| DLPackVersion { major, minor });
        // SAFETY: shape and strides point into `raw`, which outlives the call.
        unsafe { TensorDescriptor::validate(&raw.tensor, version, flags) }
    }

    const F32: DLDataType = DLDataType::F32;

    #[test]
    fn null_strides_mean_row_major_before_1_2_and_are_refused_after() {
        let r = raw(&[2, 3, 4], None, 64, F32);
        let legacy = check(&r, None, DlpackFlags::empty()).unwrap();
        assert_eq!(legacy.strides, vec![12, 4, 1]);
        assert!(legacy.is_row_major_compact());
        assert_eq!(
            check(&r, Some((1, 1)), DlpackFlags::empty())
                .unwrap()
                .strides,
            vec![12, 4, 1]
        );
        let err = check(&r, Some((1, 2)), DlpackFlags::empty()).unwrap_err();
        assert!(
            matches!(
                err,
                Error::MissingStrides {
                    minor: 2,
                    ndim: 3,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn rank_shape_and_data_pointer_rules() {
        let mut r = raw(&[2], Some(&[1]), 64, F32);
        r.tensor.ndim = 33;
        assert!(matches!(
            check(&r, None, DlpackFlags::empty()),
            Err(Error::BadRank { ndim: 33, .. })
        ));
        r.tensor.ndim = -1;
        assert!(matches!(
            check(&r, None, DlpackFlags::empty()),
            Err(Error::BadRank { ndim: -1, .. })
        ));
        r.tensor.ndim = 1;
        r.tensor.shape = std::ptr::null_mut();
        assert!(matches!(
            check(&r, None, DlpackFlags::empty()),
            Err(Error::NullShape { ndim: 1 })
        ));

        let negative = raw(&[2, -1], Some(&[1, 1]), 64, F32);
        assert!(matches!(
            check(&negative, None, DlpackFlags::empty()),
            Err(Error::NegativeDimension { axis: 1, value: -1 })
        ));

        let null_data = raw(&[2], Some(&[1]), 0, F32);
        assert!(matches!(
            check(&null_data, None, DlpackFlags::empty()),
            Err(Error::NullData { elements: 2 })
        ));
        let empty_null = raw(&[0, 5], Some(&[5, 1]), 0, F32);
        assert_eq!(
            check(&empty_null, None, DlpackFlags::empty())
                .unwrap()
                .element_count(),
            0
        );
        let scalar = raw(&[], None, 64, F32);
        assert_eq!(
            check(&scalar, Some((1, 3)), DlpackFlags::empty())
                .unwrap()
                .element_count(),
            1
        );
    }

    #[test]
    fn byte_offset_is_applied_and_misalignment_is_valid_but_recorded() {
        let mut r = raw(&[4], Some(&[1]), 4096, F32);
        r.tensor.byte_offset = 8;
        let aligned = check(&r, None, DlpackFlags::empty()).unwrap();
        assert_eq!(aligned.first_element, 4104);
        assert!(aligned.is_aligned());
        r.tensor.byte_offset = 2;
        let misaligned = check(&r, None, DlpackFlags::empty())
            .expect("a misaligned tensor is valid DLPack: the planner decides what to do");
        assert_eq!(misaligned.first_element, 4098);
        assert!(!misaligned.is_aligned());
        let complex = check(
            &raw(&[2], Some(&[1]), 4100, DLDataType::C64),
            None,
            DlpackFlags::empty(),
        )
        .unwrap();
        assert!(
            complex.is_aligned(),
            "ComplexF32 needs 4-byte alignment only"
        );
        let empty = check(
            &raw(&[0], Some(&[1]), 4097, F32),
            None,
            DlpackFlags::empty(),
        )
        .unwrap();
        assert!(empty.is_aligned(), "an empty tensor addresses nothing");
    }

    #[test]
    fn extents_that_overflow_or_leave_the_address_space_are_refused() {
        let huge = raw(&[i64::MAX, 4], Some(&[4, 1]), 64, F32);
        assert!(matches!(
            check(&huge, None, DlpackFlags::empty()),
            Err(Error::ExtentOverflow { .. })
        ));
        let below_zero = raw(&[3], Some(&[-1]), 4, F32);
        assert!(matches!(
            check(&below_zero, None, DlpackFlags::empty()),
            Err(Error::ExtentOverflow { .. })
        ));
        let mut offset = raw(&[1], Some(&[1]), 64, F32);
        offset.tensor.byte_offset = u64::MAX;
        assert!(matches!(
            check(&offset, None, DlpackFlags::empty()),
            Err(Error::ExtentOverflow { .. })
        ));
        let negative_ok = raw(&[3], Some(&[-1]), 64, F32);
        assert!(check(&negative_ok, None, DlpackFlags::empty()).is_ok());
    }

    #[test]
    fn broadcasts_too_large_to_copy_are_refused() {
        let huge = raw(&[1 << 59, 2], Some(&[0, 1]), 64, DLDataType::C128);
        assert!(matches!(
            check(&huge, None, DlpackFlags::empty()),
            Err(Error::ExtentOverflow { .. })
        ));
    }

    #[test]
    fn byte_span_covers_negative_and_positive_strides() {
        let r = raw(&[3, 2], Some(&[-2, 1]), 4096, F32);
        let d = check(&r, None, DlpackFlags::empty()).unwrap();
        assert_eq!(d.byte_span(), (-16, 8));
        let empty = raw(&[0], Some(&[1]), 0, F32);
        assert_eq!(
            check(&empty, None, DlpackFlags::empty())
                .unwrap()
                .byte_span(),
            (0, 0)
        );
    }

    #[test]
    fn flags_are_read_and_unknown_bits_refused() {
        let r = raw(&[2], Some(&[1]), 64, F32);
        let d = check(
            &r,
            Some((1, 0)),
            DlpackFlags::READ_ONLY | DlpackFlags::IS_COPIED,
        )
        .unwrap();
        assert!(d.read_only && d.is_copied);
        let unknown = DlpackFlags::from_bits_retain(1 << 9);
        assert!(matches!(
            check(&r, Some((1, 3)), unknown),
            Err(Error::UnknownFlags { bits: 512 })
        ));
    }

    #[test]
    fn packed_subbyte_types_need_a_compact_layout() {
        let fp4 = DLDataType::scalar(DLDataTypeCode::FLOAT4_E2M1FN, 4);
        let compact = raw(&[3, 3], Some(&[3, 1]), 64, fp4);
        let d = check(&compact, Some((1, 3)), DlpackFlags::empty()).unwrap();
        assert_eq!(d.dense_byte_size(), 5);
        let strided = raw(&[3, 3], Some(&[1, 3]), 64, fp4);
        assert!(matches!(
            check(&strided, Some((1, 3)), DlpackFlags::empty()),
            Err(Error::PackedSubbyteLayout { code: 17, bits: 4 })
        ));
    }
}
