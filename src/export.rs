//! Export: a managed tensor over memory owned elsewhere.
//!
//! The memory's owner (a Julia root, a copy buffer, another managed tensor) is moved into the
//! managed tensor's `manager_ctx` and dropped when the consumer calls the deleter. Shape and
//! strides are copied into the same allocation (dlpark's dynamic metadata), so they live exactly
//! as long as the tensor. Strides are always explicit (DLPack ≥ 1.2 requires it).
//!
//! Versions: a versioned tensor claims the newest minor version the consumer accepts (its
//! `max_version`, capped at ours), which must be at least the minor version that introduced
//! every feature the tensor uses ([`ExportSpec::required_minor`]: DLPack 1.1 added the fp8,
//! fp6 and fp4 dtype codes and the IS_SUBBYTE_TYPE_PADDED flag; READ_ONLY, IS_COPIED and the
//! bool code are 1.0). A consumer that accepts less is refused ([`Error::VersionTooOld`]),
//! rather than handed codes it was promised not to see. A legacy tensor cannot carry flags:
//! READ_ONLY and IS_SUBBYTE_TYPE_PADDED change what the memory means, so a spec with either is
//! refused ([`Error::LegacyCannotCarry`]); IS_COPIED is only a hint that the consumer owns the
//! memory alone, and is dropped.

use crate::descriptor::TensorDescriptor;
use crate::device::Device;
use crate::dims::{DimVec, MAX_NDIM};
use crate::dtype::ElementType;
use crate::error::{Error, Result};
use crate::layout::IndexOrder;
use dlpark::allocation::Initialized;
use dlpark::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLPackVersion};
use dlpark::metadata::Dynamic;
use dlpark::{DlpackFlags, Managed, ManagedTensorBase};

/// What an export describes, in DLPack order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSpec {
    /// Address of the element at index (0, …, 0).
    pub first_element: usize,
    pub device: Device,
    pub element: ElementType,
    pub shape: DimVec<i64>,
    /// In elements, DLPack order.
    pub strides: DimVec<i64>,
    pub read_only: bool,
    pub is_copied: bool,
}

impl ExportSpec {
    /// Describes a Julia array (column-major dims, strides in elements, as `size` and `strides`
    /// return them). `IndexOrder::Producer` keeps Julia's index order, so `A[i, j]` is element
    /// `[i-1, j-1]` for the consumer; `Reversed` hands out the reversed dims (a column-major
    /// `Array` then looks row-major-compact to the consumer).
    pub fn from_julia_layout(
        first_element: usize,
        device: Device,
        element: ElementType,
        dims: &[usize],
        strides: &[isize],
        order: IndexOrder,
    ) -> Result<Self> {
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
        let mut shape = DimVec::new();
        let mut dl_strides = DimVec::new();
        for (&d, &s) in dims.iter().zip(strides) {
            shape.push(i64::try_from(d).map_err(|_| too_big())?);
            dl_strides.push(i64::try_from(s).map_err(|_| too_big())?);
        }
        if order == IndexOrder::Reversed {
            shape.reverse();
            dl_strides.reverse();
        }
        Ok(Self {
            first_element,
            device,
            element,
            shape,
            strides: dl_strides,
            read_only: false,
            is_copied: false,
        })
    }

    /// The spec of an already validated tensor (to re-export it under a new owner).
    pub fn of(descriptor: &TensorDescriptor) -> Self {
        Self {
            first_element: descriptor.first_element,
            device: descriptor.device,
            element: descriptor.element,
            shape: descriptor.shape,
            strides: descriptor.strides,
            read_only: descriptor.read_only,
            is_copied: descriptor.is_copied,
        }
    }

    /// The spec of a copy of `descriptor` that [`crate::copy::materialize`] made at `address`
    /// with [`IndexOrder::Producer`]: same shape, column-major strides (packed sub-byte
    /// elements: the row-major bytes the copy engine moves verbatim), ordinary host memory
    /// (whatever the source was), writable, and IS_COPIED.
    pub fn of_copy(descriptor: &TensorDescriptor, address: usize) -> Self {
        let packed = matches!(descriptor.element, ElementType::PackedBits { .. });
        let strides = crate::descriptor::dense_strides(&descriptor.shape, packed);
        Self {
            first_element: address,
            device: Device::CPU,
            element: descriptor.element,
            shape: descriptor.shape,
            strides,
            read_only: false,
            is_copied: true,
        }
    }

    /// The lowest DLPack 1.x minor version that can describe this spec, and the feature that
    /// needs it (see the module docs).
    pub fn required_minor(&self) -> (u32, &'static str) {
        required_minor(self.element)
    }

    fn flags(&self) -> DlpackFlags {
        let mut flags = DlpackFlags::empty();
        flags.set(DlpackFlags::READ_ONLY, self.read_only);
        flags.set(DlpackFlags::IS_COPIED, self.is_copied);
        flags.set(DlpackFlags::IS_SUBBYTE_TYPE_PADDED, is_padded(self.element));
        flags
    }

    fn initialize<M: ManagedTensorBase, O: Send + 'static>(
        &self,
        owner: O,
    ) -> Result<Initialized<M, dlpark::allocation::dynamic::Metadata>> {
        let mut initialized = Dynamic::new(&self.shape[..], &self.strides[..])
            .initialize_as::<M>(Box::new(owner))
            .map_err(|e| Error::ExportMetadata {
                reason: e.to_string(),
            })?;
        initialized
            .set_data(self.first_element as *mut std::ffi::c_void)
            .set_device(self.device.to_dlpack())
            .set_dtype(self.element.to_dlpack())
            .set_byte_offset(0);
        Ok(initialized)
    }
}

/// The lowest DLPack 1.x minor version that can describe elements of type `element`, and the
/// feature that needs it (see the module docs).
fn required_minor(element: ElementType) -> (u32, &'static str) {
    match element {
        ElementType::RawBytes { bits, .. } if bits < 8 => (
            1,
            "a padded sub-byte dtype (fp6/fp4, IS_SUBBYTE_TYPE_PADDED)",
        ),
        ElementType::RawBytes { .. } => (1, "an fp8 dtype code"),
        ElementType::PackedBits { .. } => (1, "a packed fp6/fp4 dtype code"),
        _ => (0, "DLPack 1.0"),
    }
}

/// Whether `element` is a sub-byte type stored one element per byte (IS_SUBBYTE_TYPE_PADDED).
fn is_padded(element: ElementType) -> bool {
    matches!(element, ElementType::RawBytes { bits, .. } if bits < 8)
}

/// The minor version a versioned export of `element` declares for a consumer that accepts at
/// most 1.`max_minor`: that maximum, capped at ours; refused ([`Error::VersionTooOld`]) when
/// the element needs a newer one. The rule [`export_versioned`] applies, for callers that
/// decide before they build (see the module docs).
pub fn claimed_minor(element: ElementType, max_minor: u32) -> Result<u32> {
    let allowed_minor = max_minor.min(DLPackVersion::CURRENT.minor);
    let (needed_minor, feature) = required_minor(element);
    if needed_minor > allowed_minor {
        return Err(Error::VersionTooOld {
            feature,
            needed_minor,
            allowed_minor,
        });
    }
    Ok(allowed_minor)
}

/// Refuses ([`Error::LegacyCannotCarry`]) a legacy export of what the legacy ABI, which has no
/// flags, cannot say: READ_ONLY memory and padded sub-byte elements (IS_COPIED is only a hint
/// and is dropped). The rule [`export_legacy`] applies, for callers that decide before they
/// build (see the module docs).
pub fn check_legacy(element: ElementType, read_only: bool) -> Result<()> {
    let refusal = if read_only {
        Some(("READ_ONLY", "read-only"))
    } else if is_padded(element) {
        Some((
            "IS_SUBBYTE_TYPE_PADDED",
            "of a sub-byte dtype stored one element per byte (padded)",
        ))
    } else {
        None
    };
    match refusal {
        Some((flag, property)) => Err(Error::LegacyCannotCarry { flag, property }),
        None => Ok(()),
    }
}

/// Builds a versioned managed tensor. `minor_version` is the newest 1.x minor version the
/// consumer accepts; the tensor declares it, capped at what this library implements, and is
/// refused if the spec needs a newer one (see the module docs). `owner` is dropped when the
/// consumer calls the deleter, or here if the spec does not validate.
pub fn export_versioned<O: Send + 'static>(
    spec: &ExportSpec,
    owner: O,
    minor_version: u32,
) -> Result<Managed<DLManagedTensorVersioned>> {
    let managed = build_versioned(spec, owner, minor_version)?;
    // SAFETY: the tensor was just built by us and its metadata lives in its own allocation.
    unsafe {
        TensorDescriptor::validate(managed.tensor(), Some(managed.version()), managed.flags())
    }?;
    Ok(managed)
}

/// A validated tensor under a new owner (the same memory, shape, strides and flags), declared
/// as the current DLPack version. Not validated again: the descriptor already was, and the
/// tensor restates it.
pub fn reexport_versioned<O: Send + 'static>(
    descriptor: &TensorDescriptor,
    owner: O,
) -> Result<Managed<DLManagedTensorVersioned>> {
    // SAFETY: a spec of a validated descriptor, unchanged.
    unsafe {
        export_versioned_prevalidated(
            &ExportSpec::of(descriptor),
            owner,
            DLPackVersion::CURRENT.minor,
        )
    }
}

/// As [`export_versioned`], without validating the spec again.
///
/// # Safety
/// `spec` must be [`ExportSpec::of`] or [`ExportSpec::of_copy`] of a validated descriptor, with
/// at most its READ_ONLY or IS_COPIED flag changed: consumers read memory by what it says.
pub unsafe fn export_versioned_prevalidated<O: Send + 'static>(
    spec: &ExportSpec,
    owner: O,
    minor_version: u32,
) -> Result<Managed<DLManagedTensorVersioned>> {
    build_versioned(spec, owner, minor_version)
}

fn build_versioned<O: Send + 'static>(
    spec: &ExportSpec,
    owner: O,
    minor_version: u32,
) -> Result<Managed<DLManagedTensorVersioned>> {
    // On error `owner` is dropped here, before returning, as on every error path.
    let claimed = claimed_minor(spec.element, minor_version)?;
    let mut initialized = spec.initialize::<DLManagedTensorVersioned, O>(owner)?;
    let version = DLPackVersion {
        major: DLPackVersion::CURRENT.major,
        minor: claimed,
    };
    initialized
        .set_version(version)
        .map_err(|e| Error::ExportMetadata {
            reason: e.to_string(),
        })?;
    // SAFETY: the flags restate the spec: READ_ONLY and IS_COPIED come from the caller, who
    // owns the memory and knows them; the sub-byte flag matches the element layout.
    unsafe { initialized.set_flags_unchecked(spec.flags()) };
    // SAFETY: data lives as long as `owner`, which the tensor owns; shape and strides live in
    // the tensor's own allocation. Callers validate it, or built it from a validated tensor.
    Ok(unsafe { initialized.finish() })
}

/// Builds a legacy managed tensor (for consumers that do not ask for a versioned one). A spec
/// with flags that change what the memory means (READ_ONLY, IS_SUBBYTE_TYPE_PADDED) is
/// refused: the legacy ABI has no flags (see the module docs).
pub fn export_legacy<O: Send + 'static>(
    spec: &ExportSpec,
    owner: O,
) -> Result<Managed<DLManagedTensor>> {
    // On error `owner` is dropped here, before returning, as on every error path.
    check_legacy(spec.element, spec.read_only)?;
    let initialized = spec.initialize::<DLManagedTensor, O>(owner)?;
    // SAFETY: as in `export_versioned`.
    let managed = unsafe { initialized.finish() };
    // SAFETY: as in `export_versioned`.
    unsafe { TensorDescriptor::validate(managed.tensor(), None, managed.flags()) }?;
    Ok(managed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::CountingOwner;

    #[test]
    fn julia_layout_keeps_or_reverses_index_order() {
        let producer = ExportSpec::from_julia_layout(
            64,
            Device::CPU,
            ElementType::Float64,
            &[2, 3],
            &[1, 2],
            IndexOrder::Producer,
        )
        .unwrap();
        assert_eq!(
            (&producer.shape[..], &producer.strides[..]),
            (&[2, 3][..], &[1, 2][..])
        );
        let reversed = ExportSpec::from_julia_layout(
            64,
            Device::CPU,
            ElementType::Float64,
            &[2, 3],
            &[1, 2],
            IndexOrder::Reversed,
        )
        .unwrap();
        assert_eq!(
            (&reversed.shape[..], &reversed.strides[..]),
            (&[3, 2][..], &[2, 1][..])
        );
    }

    #[test]
    fn owner_is_dropped_once_by_the_deleter_and_metadata_is_explicit() {
        let data = [0f32; 6];
        let spec = ExportSpec::from_julia_layout(
            data.as_ptr() as usize,
            Device::CPU,
            ElementType::Float32,
            &[2, 3],
            &[1, 2],
            IndexOrder::Producer,
        )
        .unwrap();
        let (owner, count) = CountingOwner::new();
        let managed = export_versioned(&spec, owner, 1).unwrap();
        assert_eq!(managed.version(), DLPackVersion { major: 1, minor: 1 });
        // SAFETY: metadata of a live tensor we own.
        let strides = unsafe { std::slice::from_raw_parts(managed.tensor().strides, 2) };
        assert_eq!(strides, &[1, 2]);
        assert_eq!(CountingOwner::releases(&count), 0);
        drop(managed);
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    #[test]
    fn flags_travel_and_legacy_refuses_read_only() {
        let data = [0u8; 4];
        let mut spec = ExportSpec::from_julia_layout(
            data.as_ptr() as usize,
            Device::CPU,
            ElementType::UInt8,
            &[4],
            &[1],
            IndexOrder::Producer,
        )
        .unwrap();
        spec.read_only = true;
        let (owner, count) = CountingOwner::new();
        let refused = export_legacy(&spec, owner).err();
        assert!(
            matches!(
                refused,
                Some(Error::LegacyCannotCarry {
                    flag: "READ_ONLY",
                    ..
                })
            ),
            "{refused:?}"
        );
        let message = refused.unwrap().to_string();
        assert!(
            message.contains("read-only") && message.contains("max_version=(1, x)"),
            "{message}"
        );
        assert_eq!(
            CountingOwner::releases(&count),
            1,
            "owner released on the error path"
        );
        let (owner, _) = CountingOwner::new();
        let managed = export_versioned(&spec, owner, 99).unwrap();
        assert_eq!(managed.flags(), DlpackFlags::READ_ONLY);
        assert_eq!(managed.version(), DLPackVersion::CURRENT);
    }

    #[test]
    fn a_copy_is_column_major_host_memory_marked_copied() {
        let mut source = crate::test_support::host_descriptor(
            4096,
            &[2, 3, 4],
            &[12, 4, 1],
            ElementType::Float32,
        );
        source.device = Device {
            kind: crate::device::DeviceKind::CudaManaged,
            id: 0,
        };
        source.read_only = true;
        let spec = ExportSpec::of_copy(&source, 4096);
        assert_eq!(spec.strides, vec![1, 2, 6]);
        assert_eq!(
            (spec.device, spec.read_only, spec.is_copied),
            (Device::CPU, false, true)
        );
    }

    #[test]
    fn copies_of_packed_and_of_huge_empty_tensors_describe_what_was_written() {
        let fp4 = ElementType::PackedBits { code: 17, bits: 4 };
        let packed = crate::test_support::host_descriptor(4096, &[3, 5], &[5, 1], fp4);
        let spec = ExportSpec::of_copy(&packed, 4096);
        assert_eq!(
            spec.strides,
            [5, 1],
            "packed bytes are copied row-major, verbatim"
        );
        let (owner, _) = CountingOwner::new();
        assert!(
            export_versioned(&spec, owner, 3).is_ok(),
            "the spec validates"
        );
        let empty = crate::test_support::host_descriptor(
            4096,
            &[0, 1 << 62, 4, 4],
            &[0, 16, 4, 1],
            ElementType::Float32,
        );
        let spec = ExportSpec::of_copy(&empty, 4096);
        assert_eq!(
            spec.strides,
            [1, 1, 1 << 62, 0],
            "4·2^62 does not fit: 0 for an empty tensor"
        );
    }

    #[test]
    fn invalid_specs_release_the_owner() {
        let spec = ExportSpec::from_julia_layout(
            0,
            Device::CPU,
            ElementType::Float32,
            &[2],
            &[1],
            IndexOrder::Producer,
        )
        .unwrap();
        let (owner, count) = CountingOwner::new();
        assert!(matches!(
            export_versioned(&spec, owner, 3),
            Err(Error::NullData { elements: 2 })
        ));
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    #[test]
    fn a_misaligned_spec_exports_as_it_is() {
        let data = [0u8; 24];
        let misaligned = (data.as_ptr() as usize).next_multiple_of(8) + 1;
        let spec = ExportSpec::from_julia_layout(
            misaligned,
            Device::CPU,
            ElementType::Float64,
            &[1],
            &[1],
            IndexOrder::Producer,
        )
        .unwrap();
        let (owner, _) = CountingOwner::new();
        let managed = export_versioned(&spec, owner, 3)
            .expect("misaligned data is valid DLPack; the consumer sees the address");
        // SAFETY: metadata of a live tensor we own.
        let data_pointer = unsafe { managed.tensor() }.data as usize;
        assert_eq!(data_pointer, misaligned);
    }

    fn byte_spec(element: ElementType, data: &[u8]) -> ExportSpec {
        ExportSpec::from_julia_layout(
            data.as_ptr() as usize,
            Device::CPU,
            element,
            &[data.len()],
            &[1],
            IndexOrder::Producer,
        )
        .unwrap()
    }

    #[test]
    fn legacy_exports_refuse_padded_subbyte_dtypes() {
        let data = [0u8; 4];
        let padded = byte_spec(ElementType::RawBytes { code: 17, bits: 4 }, &data);
        let (owner, count) = CountingOwner::new();
        let refused = export_legacy(&padded, owner).err();
        assert!(
            matches!(
                refused,
                Some(Error::LegacyCannotCarry {
                    flag: "IS_SUBBYTE_TYPE_PADDED",
                    ..
                })
            ),
            "{refused:?}"
        );
        let refused = refused.unwrap();
        assert_eq!(refused.kind(), crate::ErrorKind::BufferRefusal);
        assert!(
            refused.to_string().contains("max_version=(1, x)"),
            "{refused}"
        );
        assert_eq!(CountingOwner::releases(&count), 1);
        // fp8 is one byte per element: nothing the legacy struct cannot say.
        let fp8 = byte_spec(ElementType::RawBytes { code: 10, bits: 8 }, &data);
        let (owner, _) = CountingOwner::new();
        assert!(export_legacy(&fp8, owner).is_ok());
    }

    #[test]
    fn versioned_exports_claim_what_they_use_and_no_more_than_allowed() {
        let data = [0u8; 4];
        let plain = byte_spec(ElementType::UInt8, &data);
        let bools = byte_spec(ElementType::Bool, &data);
        let fp8 = byte_spec(ElementType::RawBytes { code: 10, bits: 8 }, &data);
        let padded = byte_spec(ElementType::RawBytes { code: 17, bits: 4 }, &data);
        let packed = byte_spec(ElementType::PackedBits { code: 17, bits: 4 }, &data[..2]);
        for (spec, needed) in [
            (&plain, 0),
            (&bools, 0),
            (&fp8, 1),
            (&padded, 1),
            (&packed, 1),
        ] {
            assert_eq!(spec.required_minor().0, needed, "{spec:?}");
            for allowed in 0..=4u32 {
                let (owner, count) = CountingOwner::new();
                let result = export_versioned(spec, owner, allowed);
                if allowed >= needed {
                    let managed = result.unwrap();
                    let claimed = managed.version();
                    assert_eq!(claimed.major, 1);
                    assert_eq!(
                        claimed.minor,
                        allowed.min(DLPackVersion::CURRENT.minor),
                        "claims the consumer's maximum, capped at ours"
                    );
                    assert!(claimed.minor >= needed);
                } else {
                    let err = result.err().unwrap();
                    assert!(
                        matches!(
                            err,
                            Error::VersionTooOld {
                                needed_minor: 1,
                                allowed_minor: 0,
                                ..
                            }
                        ),
                        "{err:?}"
                    );
                    assert!(err.to_string().contains("max_version=(1, 1)"), "{err}");
                    assert_eq!(CountingOwner::releases(&count), 1, "owner released");
                }
            }
        }
        let padded_flags = export_versioned(&padded, CountingOwner::new().0, 1)
            .unwrap()
            .flags();
        assert_eq!(padded_flags, DlpackFlags::IS_SUBBYTE_TYPE_PADDED);
    }
}
