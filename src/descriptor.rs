//! Validation at the border: a raw `DLTensor` (plus the managed tensor's version and flags)
//! becomes a [`TensorDescriptor`], checked once, before any pointer is trusted. Everything
//! downstream (planner, copy engine, bridges) takes the descriptor, never the raw parts.

use crate::device::{Device, DeviceKind};
pub use crate::dims::MAX_NDIM;
use crate::dims::{DimVec, IndexOrder};
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
///
/// The fields are private so that these invariants hold for every descriptor: one is made only
/// by [`TensorDescriptor::validate`] (a foreign tensor), [`TensorDescriptor::from_julia_layout`]
/// (an array to export), [`TensorDescriptor::compact`] (fresh memory), or derived from a valid
/// one by the methods that restate it elsewhere ([`TensorDescriptor::copied_at`],
/// [`TensorDescriptor::moved_to`]), which check again where the address changes. A descriptor
/// is large (two 32-slot lists), so the hot paths fill one where it lies instead:
/// [`TensorDescriptor::validate_into`] over an [`TensorDescriptor::empty`] one, and
/// [`TensorDescriptor::julia_layout_into`] likewise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorDescriptor {
    /// Address of the element at index (0, …, 0): `data + byte_offset`.
    first_element: usize,
    device: Device,
    element: ElementType,
    shape: DimVec<i64>,
    strides: DimVec<i64>,
    read_only: bool,
    is_copied: bool,
    /// `None` for a legacy (unversioned) tensor, and for one described here.
    version: Option<DLPackVersion>,
    /// The product of `shape`, counted once by the checks.
    elements: usize,
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
        let mut described = Self::empty();
        // SAFETY: forwarded from this function's contract.
        unsafe { described.validate_into(tensor, version, flags) }?;
        Ok(described)
    }

    /// An empty host tensor (shape `[0]`): what [`Self::validate_into`] overwrites.
    pub fn empty() -> Self {
        let mut shape = DimVec::new();
        shape.push(0);
        let mut strides = DimVec::new();
        strides.push(1);
        Self {
            first_element: 0,
            device: Device::CPU,
            element: ElementType::UInt8,
            shape,
            strides,
            read_only: false,
            is_copied: false,
            version: None,
            elements: 0,
        }
    }

    /// [`Self::validate`], written over `self` where it already lies (a descriptor is large:
    /// each move copies every slot of its lists). On error `self` is [`Self::empty`] again.
    ///
    /// # Safety
    /// As [`Self::validate`].
    pub unsafe fn validate_into(
        &mut self,
        tensor: &DLTensor,
        version: Option<DLPackVersion>,
        flags: DlpackFlags,
    ) -> Result<()> {
        // SAFETY: forwarded from this function's contract.
        match unsafe { self.overwrite(tensor, version, flags) } {
            // A fresh `Ok`, not the callee's result moved on: copying the large `Result`
            // reloads its bytes before the narrow stores that wrote them have landed.
            Ok(()) => Ok(()),
            Err(error) => {
                *self = Self::empty();
                Err(error)
            }
        }
    }

    /// The validation itself; leaves `self` half-written on error.
    ///
    /// # Safety
    /// As [`Self::validate`].
    unsafe fn overwrite(
        &mut self,
        tensor: &DLTensor,
        version: Option<DLPackVersion>,
        flags: DlpackFlags,
    ) -> Result<()> {
        let unknown = flags.bits() & !DlpackFlags::all().bits();
        if unknown != 0 {
            return Err(Error::UnknownFlags { bits: unknown });
        }
        let ndim = usize::try_from(tensor.ndim)
            .ok()
            .filter(|&n| n <= MAX_NDIM)
            .ok_or_else(|| Error::BadRank {
                ndim: tensor.ndim.into(),
                max: MAX_NDIM,
            })?;
        if ndim > 0 && tensor.shape.is_null() {
            return Err(Error::NullShape { ndim });
        }
        let element = ElementType::from_dlpack(
            tensor.dtype,
            flags.contains(DlpackFlags::IS_SUBBYTE_TYPE_PADDED),
        )?;
        // Filled in place: the lists are extended, never moved.
        let described = self;
        described.device = Device::from_dlpack(tensor.device);
        described.element = element;
        described.shape.clear();
        described.strides.clear();
        described.read_only = flags.contains(DlpackFlags::READ_ONLY);
        described.is_copied = flags.contains(DlpackFlags::IS_COPIED);
        described.version = version;
        if ndim > 0 {
            // SAFETY: the shape is non-null (checked above); the rest is this function's
            // contract.
            unsafe { described.read_dims(tensor, ndim, version) }?;
        }
        let first_element = usize::try_from(tensor.byte_offset)
            .ok()
            .and_then(|offset| (tensor.data as usize).checked_add(offset))
            .ok_or_else(|| extent_overflow(&described.shape, &described.strides))?;
        described.first_element = first_element;
        described.check(first_element, element, tensor.data.is_null())
    }

    /// Reads the shape and strides of `tensor` (`ndim ≥ 1` of them) into the empty lists;
    /// strides absent are row-major's, which DLPack 1.2 and later forbid.
    ///
    /// # Safety
    /// `tensor.shape` non-null, and as [`Self::validate`].
    unsafe fn read_dims(
        &mut self,
        tensor: &DLTensor,
        ndim: usize,
        version: Option<DLPackVersion>,
    ) -> Result<()> {
        // SAFETY: non-null and, by this function's contract, `ndim` readable values.
        let shape = unsafe { std::slice::from_raw_parts(tensor.shape, ndim) };
        self.shape.extend_from_slice(shape).expect("ndim checked");
        if tensor.strides.is_null() {
            if let Some(v) = version.filter(|v| v.major == 1 && v.minor >= 2) {
                return Err(Error::MissingStrides {
                    major: v.major,
                    minor: v.minor,
                    ndim,
                });
            }
            // A non-empty tensor whose strides do not fit has an element count that does
            // not either: `check` refuses it.
            self.strides = dense_strides(shape, true);
        } else {
            // SAFETY: non-null and, by this function's contract, `ndim` readable values.
            let strides = unsafe { std::slice::from_raw_parts(tensor.strides, ndim) };
            self.strides
                .extend_from_slice(strides)
                .expect("ndim checked");
        }
        Ok(())
    }

    /// Describes a Julia array for export: column-major dims and strides in elements, as
    /// `size` and `strides` return them. `IndexOrder::Producer` keeps Julia's index order, so
    /// `A[i, j]` is element `[i-1, j-1]` for the consumer; `Reversed` hands out the reversed
    /// dims (a column-major `Array` then looks row-major-compact to the consumer). The same
    /// checks as [`TensorDescriptor::validate`] apply.
    ///
    /// Boxed, and described where it lies: a descriptor is ~560 bytes (see also
    /// [`Self::julia_layout_into`]).
    pub fn from_julia_layout(
        first_element: usize,
        device: Device,
        element: ElementType,
        dims: &[usize],
        strides: &[isize],
        order: IndexOrder,
    ) -> Result<Box<Self>> {
        let mut described = Box::new(Self::empty());
        described.describe_julia_layout(first_element, device, element, dims, strides, order)?;
        Ok(described)
    }

    /// [`Self::from_julia_layout`] for dims and strides as Julia's `Int`s (a negative dim is
    /// refused, as [`Self::validate`] refuses one), written over `self` where it already lies
    /// (inside the allocation of the exporter that keeps it, say): both lists are copied as
    /// they come. On error `self` is [`Self::empty`] again.
    pub fn julia_layout_into(
        &mut self,
        first_element: usize,
        device: Device,
        element: ElementType,
        dims: &[i64],
        strides: &[i64],
        order: IndexOrder,
    ) -> Result<()> {
        let described = (|| {
            if dims.len() != strides.len() {
                return Err(Error::DimsStridesMismatch {
                    dims: dims.len(),
                    strides: strides.len(),
                });
            }
            self.shape.clear();
            self.strides.clear();
            let fits = self.shape.extend_from_slice(dims).is_some();
            if !fits || self.strides.extend_from_slice(strides).is_none() {
                return Err(Error::BadRank {
                    ndim: dims.len() as i64,
                    max: MAX_NDIM,
                });
            }
            self.describe_julia_fields(first_element, device, element, order)
        })();
        match described {
            // A fresh `Ok`, not the result moved on (see `validate_into`).
            Ok(()) => Ok(()),
            Err(error) => {
                *self = Self::empty();
                Err(error)
            }
        }
    }

    /// The rest of a Julia array's description once its dims and strides are in `self`'s
    /// lists (in Julia's order): `order` applied, the other fields set, the whole checked.
    fn describe_julia_fields(
        &mut self,
        first_element: usize,
        device: Device,
        element: ElementType,
        order: IndexOrder,
    ) -> Result<()> {
        if order == IndexOrder::Reversed {
            self.shape.reverse();
            self.strides.reverse();
        }
        self.first_element = first_element;
        self.device = device;
        self.element = element;
        self.read_only = false;
        self.is_copied = false;
        self.version = None;
        self.check(first_element, element, first_element == 0)
    }

    /// The description itself; leaves `self` half-written on error.
    fn describe_julia_layout(
        &mut self,
        first_element: usize,
        device: Device,
        element: ElementType,
        dims: &[usize],
        strides: &[isize],
        order: IndexOrder,
    ) -> Result<()> {
        if dims.len() != strides.len() {
            return Err(Error::DimsStridesMismatch {
                dims: dims.len(),
                strides: strides.len(),
            });
        }
        if dims.len() > MAX_NDIM {
            return Err(Error::BadRank {
                ndim: dims.len() as i64,
                max: MAX_NDIM,
            });
        }
        let too_big = || Error::ExportExtentOverflow {
            dims: dims.to_vec(),
            strides: strides.to_vec(),
        };
        self.shape.clear();
        self.strides.clear();
        for (&d, &s) in dims.iter().zip(strides) {
            self.shape.push(i64::try_from(d).map_err(|_| too_big())?);
            self.strides.push(i64::try_from(s).map_err(|_| too_big())?);
        }
        self.describe_julia_fields(first_element, device, element, order)
    }

    /// A compact tensor of `shape` at `first_element` (row-major when `row_major`, else
    /// column-major; packed sub-byte elements are always row-major bytes), writable, not
    /// marked as a copy.
    pub fn compact(
        first_element: usize,
        device: Device,
        element: ElementType,
        shape: &[i64],
        row_major: bool,
    ) -> Result<Self> {
        let shape = DimVec::from_slice(shape).ok_or(Error::BadRank {
            ndim: shape.len() as i64,
            max: MAX_NDIM,
        })?;
        let packed = matches!(element, ElementType::PackedBits { .. });
        Self {
            first_element,
            device,
            element,
            shape,
            strides: dense_strides(&shape, row_major || packed),
            read_only: false,
            is_copied: false,
            version: None,
            elements: 0,
        }
        .checked(first_element == 0)
    }

    /// The copy of this tensor that [`crate::copy::materialize`] made at `address` with
    /// [`IndexOrder::Producer`]: same shape, column-major strides (packed sub-byte elements:
    /// the row-major bytes the copy engine moves verbatim), ordinary host memory (whatever the
    /// source was), writable, and marked as a copy.
    pub fn copied_at(&self, address: usize) -> Self {
        let packed = matches!(self.element, ElementType::PackedBits { .. });
        // The dense size of a valid tensor fits in isize, and a fresh buffer holds it: the
        // compact layout at `address` satisfies every invariant.
        Self {
            first_element: address,
            device: Device::CPU,
            element: self.element,
            shape: self.shape,
            strides: dense_strides(&self.shape, packed),
            read_only: false,
            is_copied: true,
            version: None,
            elements: self.elements,
        }
    }

    /// The same layout with its first element at `first_element` on `device` (the bytes were
    /// moved there), writable and marked as a copy. Checked again: the address changed.
    pub fn moved_to(&self, first_element: usize, device: Device) -> Result<Self> {
        Self {
            first_element,
            device,
            read_only: false,
            is_copied: true,
            version: None,
            ..*self
        }
        .checked(first_element == 0)
    }

    /// The same tensor with the READ_ONLY property set as given.
    pub fn with_read_only(self, read_only: bool) -> Self {
        Self { read_only, ..self }
    }

    /// [`Self::with_read_only`] where the descriptor lies (it is large to move).
    pub fn set_read_only(&mut self, read_only: bool) {
        self.read_only = read_only;
    }

    /// The same tensor as declared under another DLPack version (what an export restates).
    pub(crate) fn with_version(self, version: Option<DLPackVersion>) -> Self {
        Self { version, ..self }
    }

    /// The same tensor with the IS_COPIED property set as given.
    pub fn with_is_copied(self, is_copied: bool) -> Self {
        Self { is_copied, ..self }
    }

    /// `self` once [`Self::check`]ed.
    fn checked(mut self, data_is_null: bool) -> Result<Self> {
        let (first_element, element) = (self.first_element, self.element);
        self.check(first_element, element, data_is_null)?;
        Ok(self)
    }

    /// Checks the invariants (see the type's docs) of parts read from elsewhere, and counts the
    /// elements; `data_is_null` says whether the base address was null (only an empty tensor
    /// may have one). `first_element` and `element` are the values just written to `self`,
    /// passed again rather than read back: the read would wait for those narrow stores.
    fn check(
        &mut self,
        first_element: usize,
        element: ElementType,
        data_is_null: bool,
    ) -> Result<()> {
        debug_assert_eq!((first_element, element), (self.first_element, self.element));
        let Self {
            ref shape,
            ref strides,
            ..
        } = *self;
        // A fold finds whether (it vectorises); the position is looked for only then.
        if shape.iter().fold(false, |negative, &d| negative | (d < 0)) {
            let axis = shape.iter().position(|&d| d < 0).expect("one is negative");
            return Err(Error::NegativeDimension {
                axis,
                value: shape[axis],
            });
        }
        let overflow = || extent_overflow(shape, strides);
        // The elements counted and the strides' reach summed. A zero anywhere makes the tensor
        // empty, however large its other dimensions (an empty tensor is valid whatever they
        // are): its count is 0 and its reach never asked.
        let Extents { elements, reach } = extents(shape, strides);
        let elements = elements.ok_or_else(overflow)?;
        // A copy must be possible to describe: the dense size fits an isize (zero strides can
        // make it far larger than the memory the tensor spans).
        dense_size(elements, element).ok_or_else(overflow)?;
        if let ElementType::PackedBits { code, bits } = element
            && elements > 0
            && !is_row_major_compact(shape, strides)
        {
            return Err(Error::PackedSubbyteLayout { code, bits });
        }
        if elements > 0 {
            if data_is_null {
                return Err(Error::NullData { elements });
            }
            let (low, high) = scaled_extent(reach, element, elements).ok_or_else(overflow)?;
            let in_address_space = (first_element as i128 + low as i128) >= 0
                && (first_element as i128 + high as i128) <= usize::MAX as i128;
            if !in_address_space {
                return Err(overflow());
            }
            // Alignment is not checked here: a misaligned tensor is valid DLPack (NumPy makes
            // them), and whether one can be viewed is the layout planner's question.
        }
        self.elements = elements;
        Ok(())
    }

    /// Address of the element at index (0, …, 0).
    pub fn first_element(&self) -> usize {
        self.first_element
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn element(&self) -> ElementType {
        self.element
    }

    /// Extents, DLPack order.
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    /// Strides in elements, DLPack order, always explicit.
    pub fn strides(&self) -> &[i64] {
        &self.strides
    }

    /// Whether the producer marked the memory read-only.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Whether the producer says the memory is a copy the consumer owns alone.
    pub fn is_copied(&self) -> bool {
        self.is_copied
    }

    /// The DLPack version the tensor came with; `None` for a legacy tensor or one described
    /// here.
    pub fn version(&self) -> Option<DLPackVersion> {
        self.version
    }

    /// A descriptor made without any check, for tests that need malformed ones.
    #[cfg(test)]
    pub(crate) fn unchecked_for_tests(
        first_element: usize,
        device: Device,
        element: ElementType,
        shape: &[i64],
        strides: &[i64],
    ) -> Self {
        Self {
            first_element,
            device,
            element,
            shape: DimVec::from_slice(shape).expect("test rank"),
            strides: DimVec::from_slice(strides).expect("test rank"),
            read_only: false,
            is_copied: false,
            version: None,
            elements: element_count(shape).expect("a test shape whose count fits"),
        }
    }

    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements (the product of the shape; 1 for a 0-d tensor).
    pub fn element_count(&self) -> usize {
        self.elements
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

/// Bytes a compact tensor of `shape` takes (elements of type `element`), checked as
/// validation checks a tensor: a negative dimension is refused, a 0 dimension makes it empty
/// however large the others, and a size past `isize::MAX` is refused. For allocators, which
/// need the size before there is an address to describe.
pub fn compact_byte_size(element: ElementType, shape: &[i64]) -> Result<usize> {
    if let Some(axis) = shape.iter().position(|&d| d < 0) {
        return Err(Error::NegativeDimension {
            axis,
            value: shape[axis],
        });
    }
    element_count(shape)
        .and_then(|elements| dense_size(elements, element))
        .ok_or_else(|| extent_overflow(shape, &dense_strides(shape, true)))
}

/// Whether `strides` are the compact row-major ones for `shape`, ignoring size-1 dimensions.
fn is_row_major_compact(shape: &[i64], strides: &[i64]) -> bool {
    dense_strides(shape, true)
        .iter()
        .zip(strides)
        .zip(shape)
        .all(|((c, s), &n)| n <= 1 || c == s)
}

/// The product of `shape`: 0 as soon as one dimension is 0, `None` past `isize::MAX` (a
/// consumer counts elements in a signed 64-bit integer; packed sub-byte elements would
/// otherwise fit more of them than that in `isize::MAX` bytes). Dimensions are non-negative
/// (checked before).
fn element_count(shape: &[i64]) -> Option<usize> {
    let (mut product, mut empty) = (Some(1usize), false);
    for &d in shape {
        empty |= d == 0;
        product = product.and_then(|p| p.checked_mul(d as usize));
    }
    if empty {
        Some(0)
    } else {
        product.filter(|&p| p <= isize::MAX as usize)
    }
}

/// Bytes `elements` take densely, if that fits in `isize`.
fn dense_size(elements: usize, element: ElementType) -> Option<usize> {
    let bytes = match element {
        // Eight packed elements take `bits` bytes: counted in whole groups of eight, so that
        // `elements × bits` is never formed (it overflows below the isize limit in bytes).
        ElementType::PackedBits { bits, .. } => (elements / 8)
            .checked_mul(bits as usize)?
            .checked_add((elements % 8 * bits as usize).div_ceil(8))?,
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
    scaled_extent(extents(shape, strides).reach, element, elements)
}

/// What the dims say, once they are known non-negative: the element count
/// ([`element_count`]'s), and the sums of the strides' negative and positive reach
/// `(n - 1)·s`, in elements, if no term and no sum overflows.
struct Extents {
    elements: Option<usize>,
    reach: Option<(i64, i64)>,
}

fn extents(shape: &[i64], strides: &[i64]) -> Extents {
    // Two loops, not one: each is a short dependency chain of its own (the count's products,
    // the reach's sums), and the reach's stops at the first overflow. In one loop the two
    // chains and the overflow flags cost 4 more instructions a dimension.
    Extents {
        elements: element_count(shape),
        reach: reach(shape, strides),
    }
}

/// [`Extents::reach`]: the sums of the negative and of the positive `(n - 1)·s`, if no term
/// and no sum overflows.
fn reach(shape: &[i64], strides: &[i64]) -> Option<(i64, i64)> {
    let (mut low, mut high) = (0i64, 0i64);
    for (&n, &s) in shape.iter().zip(strides) {
        let reach = (n - 1).checked_mul(s)?;
        if reach < 0 {
            low = low.checked_add(reach)?;
        } else {
            high = high.checked_add(reach)?;
        }
    }
    Some((low, high))
}

/// The byte extent of a non-empty tensor of `elements` whose strides reach as
/// [`Extents::reach`] says (see [`byte_extent`]). Packed sub-byte elements are always compact
/// row-major bytes: their extent is their dense size, whatever the reach.
fn scaled_extent(
    reach: Option<(i64, i64)>,
    element: ElementType,
    elements: usize,
) -> Option<(i64, i64)> {
    if let ElementType::PackedBits { .. } = element {
        let bytes = dense_size(elements, element)?;
        return Some((0, i64::try_from(bytes).ok()?));
    }
    let (low, high) = reach?;
    // Summed in elements, then scaled once: each end is a sum of same-sign terms, so it
    // overflows in bytes exactly when a term or the sum would.
    let size = element.size() as i64;
    let low = low.checked_mul(size)?;
    let high = high.checked_mul(size)?.checked_add(size)?;
    // Both ends fit in i64, so the difference fits in i128.
    (i128::from(high) - i128::from(low) <= isize::MAX as i128).then_some((low, high))
}

// Defined here rather than in `device`, which sits below `error` (its variants name devices),
// as this check returns an error.
impl Device {
    /// Refuses device type 0 (never valid) and device types DLPack does not define, naming the
    /// number: the border's check for callers that have not opted in to unknown device types.
    /// Known device types other than CPU and CUDA pass: they are valid DLPack, refused later
    /// (and with a different message) only where memory would be read.
    #[inline]
    pub fn check_known(self) -> Result<()> {
        match DeviceKind::is_known_device_type(self.to_dlpack().device_type.0) {
            true => Ok(()),
            false => Err(self.unknown()),
        }
    }

    #[cold]
    fn unknown(self) -> Error {
        let dl = self.to_dlpack();
        Error::UnknownDeviceType {
            device_type: dl.device_type.0,
            device_id: dl.device_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlpark::ffi::{DLDataType, DLDataTypeCode, DLDevice, DLDeviceType};

    #[test]
    fn device_type_zero_and_unassigned_types_are_refused_by_number() {
        for known in [1, 2, 3, 4, 7, 10, 13, 18] {
            let device = Device::from_dlpack(DLDevice {
                device_type: DLDeviceType(known),
                device_id: 0,
            });
            assert!(device.check_known().is_ok(), "{known}");
        }
        for unknown in [0, 5, 6, 19, 1000] {
            let device = Device::from_dlpack(DLDevice {
                device_type: DLDeviceType(unknown),
                device_id: 3,
            });
            let err = device.check_known().unwrap_err();
            assert!(
                matches!(err, Error::UnknownDeviceType { device_type, device_id: 3 } if device_type == unknown),
                "{err:?}"
            );
            assert_eq!(err.kind(), crate::error::ErrorKind::BufferRefusal);
        }
    }

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

    #[test]
    fn packed_subbyte_sizes_are_exact_up_to_the_isize_limit() {
        let fp4 = DLDataType::scalar(DLDataTypeCode::FLOAT4_E2M1FN, 4);
        let fp6 = DLDataType::scalar(DLDataTypeCode::FLOAT6_E2M3FN, 6);
        let size = |shape: &[i64], strides: &[i64], dtype| {
            check(
                &raw(shape, Some(strides), 64, dtype),
                Some((1, 3)),
                DlpackFlags::empty(),
            )
            .map(|d| d.dense_byte_size())
        };
        // elements × bits passes 2⁶⁴ here, though the bytes are well inside isize.
        assert_eq!(size(&[1 << 62], &[1], fp4).unwrap(), 1 << 61);
        assert_eq!(size(&[3 << 60], &[1], fp6).unwrap(), 9 << 58);
        assert_eq!(
            size(&[7], &[1], fp6).unwrap(),
            6,
            "42 bits round up to 6 bytes"
        );
        assert_eq!(size(&[(1 << 62) + 3], &[1], fp4).unwrap(), (1 << 61) + 2);
        assert!(
            matches!(
                size(&[1 << 62, 3], &[3, 1], fp6),
                Err(Error::ExtentOverflow { .. })
            ),
            "9·2⁶¹ bytes exceed isize::MAX"
        );
    }

    #[test]
    fn packed_subbyte_element_counts_past_isize_are_refused() {
        // Their bytes fit in isize (3·2⁶¹ and isize::MAX itself), their counts do not: a
        // consumer's int64 element count would overflow, negative for the second.
        let fp4 = DLDataType::scalar(DLDataTypeCode::FLOAT4_E2M1FN, 4);
        for (shape, strides) in [([3, 1 << 62], [1 << 62, 1]), ([i64::MAX, 2], [2, 1])] {
            let refused = check(
                &raw(&shape, Some(&strides), 64, fp4),
                Some((1, 3)),
                DlpackFlags::empty(),
            );
            assert!(
                matches!(refused, Err(Error::ExtentOverflow { .. })),
                "{shape:?}: {refused:?}"
            );
            let fp4 = ElementType::PackedBits { code: 17, bits: 4 };
            assert!(
                matches!(
                    compact_byte_size(fp4, &shape),
                    Err(Error::ExtentOverflow { .. })
                ),
                "{shape:?}"
            );
        }
        let largest = check(
            &raw(&[i64::MAX, 1], Some(&[1, 1]), 64, fp4),
            Some((1, 3)),
            DlpackFlags::empty(),
        )
        .unwrap();
        assert_eq!(largest.element_count(), isize::MAX as usize);
    }

    #[test]
    fn negative_dims_are_refused_and_named_whatever_precedes_them() {
        // Two negative dims, a zero before them (which would make the tensor empty), a zero
        // before one: the first negative one is named, by validation and by the allocators' size.
        for (shape, axis, value) in [
            (&[0, -1, -1][..], 1, -1),
            (&[0, -1][..], 1, -1),
            (&[-3, -1][..], 0, -3),
            (&[2, 0, -5][..], 2, -5),
        ] {
            let strides = vec![1; shape.len()];
            let refused = check(
                &raw(shape, Some(&strides), 64, F32),
                None,
                DlpackFlags::empty(),
            );
            assert!(
                matches!(refused, Err(Error::NegativeDimension { axis: a, value: v }) if (a, v) == (axis, value)),
                "{shape:?}: {refused:?}"
            );
            assert!(
                matches!(compact_byte_size(ElementType::Float32, shape), Err(Error::NegativeDimension { axis: a, value: v }) if (a, v) == (axis, value)),
                "{shape:?}"
            );
        }
    }

    #[test]
    fn julia_layouts_of_32_dims_are_described_and_of_33_refused() {
        let julia = |ndim: usize| {
            TensorDescriptor::from_julia_layout(
                64,
                Device::CPU,
                ElementType::Float32,
                &vec![2; ndim],
                &(0..ndim).map(|k| 1isize << k).collect::<Vec<_>>(),
                IndexOrder::Reversed,
            )
        };
        let widest = julia(MAX_NDIM).unwrap();
        assert_eq!((widest.ndim(), widest.element_count()), (32, 1 << 32));
        assert_eq!(widest.strides()[0], 1 << 31, "reversed");
        assert!(matches!(
            julia(MAX_NDIM + 1),
            Err(Error::BadRank { ndim: 33, max: 32 })
        ));
    }

    #[test]
    fn compact_layouts_in_either_order_and_the_properties_restated() {
        let f32 = ElementType::Float32;
        let rows = TensorDescriptor::compact(64, Device::CPU, f32, &[2, 3], true).unwrap();
        assert_eq!(rows.strides(), [3, 1]);
        assert!(rows.is_row_major_compact());
        let columns = TensorDescriptor::compact(64, Device::CPU, f32, &[2, 3], false).unwrap();
        assert!(!columns.is_row_major_compact());
        // Size-1 dims may carry any stride; others may not.
        let r = raw(&[2, 1, 3], Some(&[3, 99, 1]), 64, F32);
        assert!(
            check(&r, None, DlpackFlags::empty())
                .unwrap()
                .is_row_major_compact()
        );
        let r = raw(&[2, 3], Some(&[4, 1]), 64, F32);
        assert!(
            !check(&r, None, DlpackFlags::empty())
                .unwrap()
                .is_row_major_compact()
        );

        let v = |minor| DLPackVersion { major: 1, minor };
        let d = check(
            &raw(&[2, 3], Some(&[3, 1]), 64, F32),
            Some((1, 3)),
            DlpackFlags::empty(),
        )
        .unwrap();
        assert_eq!(d.version(), Some(v(3)));
        assert_eq!(d.with_version(Some(v(1))).version(), Some(v(1)));
        assert_eq!(d.with_version(None).version(), None);
        assert!(d.with_is_copied(true).is_copied());
        assert!(!d.with_is_copied(true).with_is_copied(false).is_copied());
        let moved = d.with_is_copied(false).moved_to(128, Device::CPU).unwrap();
        assert_eq!((moved.version(), moved.is_copied()), (None, true));
    }

    #[test]
    fn every_constructor_keeps_the_invariants() {
        let julia = |address: usize, dims: &[usize], strides: &[isize], element| {
            TensorDescriptor::from_julia_layout(
                address,
                Device::CPU,
                element,
                dims,
                strides,
                IndexOrder::Producer,
            )
        };
        let f32 = ElementType::Float32;
        assert!(matches!(
            julia(0, &[2], &[1], f32),
            Err(Error::NullData { elements: 2 })
        ));
        assert!(
            matches!(
                julia(4, &[3], &[-1], f32),
                Err(Error::ExtentOverflow { .. })
            ),
            "reaches below address 0"
        );
        assert!(matches!(
            julia(64, &[2, 3], &[1], f32),
            Err(Error::DimsStridesMismatch { .. })
        ));
        assert!(matches!(
            julia(64, &[usize::MAX], &[1], f32),
            Err(Error::ExportExtentOverflow { .. })
        ));
        let fp4 = ElementType::PackedBits { code: 17, bits: 4 };
        assert!(matches!(
            julia(64, &[3, 3], &[1, 3], fp4),
            Err(Error::PackedSubbyteLayout { .. })
        ));
        // An empty packed tensor indexes nothing: any strides describe it.
        let empty = julia(64, &[2, 0], &[3, 5], fp4).unwrap();
        assert!(!empty.is_row_major_compact() && empty.element_count() == 0);
        let reversed = TensorDescriptor::from_julia_layout(
            64,
            Device::CPU,
            f32,
            &[3, 3],
            &[3, 1],
            IndexOrder::Reversed,
        )
        .unwrap();
        assert_eq!(
            (reversed.shape(), reversed.strides()),
            (&[3, 3][..], &[1, 3][..])
        );

        assert!(matches!(
            TensorDescriptor::compact(64, Device::CPU, f32, &[2, -1], true),
            Err(Error::NegativeDimension { axis: 1, value: -1 })
        ));
        let compact = TensorDescriptor::compact(64, Device::CPU, f32, &[2, 3], false).unwrap();
        assert_eq!(compact.strides(), [1, 2]);
        assert!(matches!(
            compact.moved_to(0, Device::CPU),
            Err(Error::NullData { elements: 6 })
        ));
        let moved = compact
            .with_read_only(true)
            .moved_to(128, Device::CPU)
            .unwrap();
        assert_eq!(
            (moved.first_element(), moved.read_only(), moved.is_copied()),
            (128, false, true)
        );
        assert!(matches!(
            compact.moved_to(usize::MAX - 4, Device::CPU),
            Err(Error::ExtentOverflow { .. })
        ));
        // A device tensor's bytes moved to the host (cuda::to_host) are described there.
        let cuda = Device {
            kind: crate::device::DeviceKind::Cuda,
            id: 1,
        };
        let on_device = TensorDescriptor::compact(64, cuda, f32, &[2, 3], false).unwrap();
        assert_eq!(on_device.device(), cuda);
        assert_eq!(
            on_device.moved_to(128, Device::CPU).unwrap().device(),
            Device::CPU
        );
    }

    #[test]
    fn validating_in_place_leaves_an_empty_tensor_on_error() {
        let good = raw(&[2, 3], Some(&[3, 1]), 64, F32);
        let mut d = TensorDescriptor::empty();
        // SAFETY: shape and strides point into `good`, alive for the call.
        unsafe { d.validate_into(&good.tensor, None, DlpackFlags::empty()) }.unwrap();
        assert_eq!((d.shape(), d.element_count()), (&[2, 3][..], 6));
        let negative = raw(&[2, -1], Some(&[1, 1]), 64, F32);
        // SAFETY: as above.
        let refused = unsafe { d.validate_into(&negative.tensor, None, DlpackFlags::empty()) };
        assert!(matches!(refused, Err(Error::NegativeDimension { .. })));
        assert_eq!(d, TensorDescriptor::empty());
        assert_eq!(d.element_count(), 0, "empty: nothing addressable");
    }

    #[test]
    fn compact_sizes_are_counted_as_validation_counts() {
        let f32 = ElementType::Float32;
        assert_eq!(compact_byte_size(f32, &[2, 3]).unwrap(), 24);
        assert_eq!(compact_byte_size(f32, &[]).unwrap(), 4);
        assert_eq!(compact_byte_size(f32, &[i64::MAX, 0, 0]).unwrap(), 0);
        assert!(matches!(
            compact_byte_size(f32, &[i64::MAX, 2]),
            Err(Error::ExtentOverflow { .. })
        ));
        assert!(matches!(
            compact_byte_size(f32, &[2, -1]),
            Err(Error::NegativeDimension { axis: 1, value: -1 })
        ));
        let fp4 = ElementType::PackedBits { code: 17, bits: 4 };
        assert_eq!(compact_byte_size(fp4, &[3, 3]).unwrap(), 5);
    }

    proptest::proptest! {
        /// The checks' extents: the count, and the reach as wide arithmetic finds it (`None`
        /// where a term or an end leaves i64).
        #[test]
        fn extents_agree_with_the_count_and_the_reach_in_wide_arithmetic(
            dims in proptest::collection::vec(
                proptest::prop_oneof![0i64..4, 1i64..1 << 40, proptest::strategy::Just(i64::MAX)],
                0..6,
            ),
            strides in proptest::collection::vec(
                proptest::prop_oneof![
                    -3i64..4,
                    proptest::prelude::any::<i64>(),
                    proptest::strategy::Just(i64::MIN),
                    proptest::strategy::Just(i64::MAX),
                ],
                6,
            ),
        ) {
            let strides = &strides[..dims.len()];
            // In i128, where nothing overflows: each end is a sum of same-sign terms, so it fits
            // in i64 exactly when every partial sum does.
            let reach = || -> Option<(i64, i64)> {
                let (mut low, mut high) = (0i128, 0i128);
                for (&n, &s) in dims.iter().zip(strides) {
                    let reach = i128::from(n - 1) * i128::from(s);
                    i64::try_from(reach).ok()?;
                    if reach < 0 { low += reach } else { high += reach }
                }
                Some((i64::try_from(low).ok()?, i64::try_from(high).ok()?))
            };
            let found = extents(&dims, strides);
            proptest::prop_assert_eq!(found.elements, element_count(&dims));
            proptest::prop_assert_eq!(found.reach, reach());
        }
    }
}
