//! Export: every way this library hands a managed tensor out. Here, a managed tensor over
//! memory owned elsewhere; [`described`], one whose owner keeps the descriptor; [`forward`], an
//! imported tensor handed on; [`plan`], what a consumer's request gets; [`given_back`], an
//! export's owner given back after its consumers' streams.
//!
//! A managed tensor over memory owned elsewhere restates a [`TensorDescriptor`] (a
//! foreign tensor's, a copy's, or a Julia array's from [`TensorDescriptor::from_julia_layout`]):
//! the descriptor's invariants make the result valid DLPack, so nothing is validated again.
//!
//! The memory's owner (a Julia root, a copy buffer, another managed tensor) is moved into the
//! managed tensor's `manager_ctx` and dropped when the consumer calls the deleter. Shape and
//! strides are copied into the same allocation (dlpark's dynamic metadata), so they live exactly
//! as long as the tensor. Strides are always explicit (DLPack ≥ 1.2 requires it).
//!
//! Versions: a versioned tensor claims the newest minor version the consumer accepts (its
//! `max_version`, capped at ours), which must be at least the minor version that introduced
//! every feature the tensor uses ([`required_minor`]: DLPack 1.1 added the fp8,
//! fp6 and fp4 dtype codes and the IS_SUBBYTE_TYPE_PADDED flag; READ_ONLY, IS_COPIED and the
//! bool code are 1.0; `kDLBcomplex` came after 1.3 while the header still said 1.3, the newest
//! minor version a consumer can ask for, so it needs 1.3). A consumer that accepts less is
//! refused ([`Error::VersionTooOld`]),
//! rather than handed codes it was promised not to see. A legacy tensor cannot carry flags:
//! READ_ONLY and IS_SUBBYTE_TYPE_PADDED change what the memory means, so a tensor with either is
//! refused ([`Error::LegacyCannotCarry`]); IS_COPIED is only a hint that the consumer owns the
//! memory alone, and is dropped.
//!
//! What an exporter hands out for a consumer's `__dlpack__` arguments is decided before any
//! of this, in [`plan`].

pub mod described;
pub mod forward;
pub mod given_back;
pub mod plan;

use crate::descriptor::TensorDescriptor;
use crate::dtype::ElementType;
use crate::error::{Error, Result};
use dlpark::allocation::Initialized;
use dlpark::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLPackVersion};
use dlpark::metadata::Dynamic;
use dlpark::{DlpackFlags, Managed, ManagedTensorBase};

/// The lowest DLPack 1.x minor version that can describe elements of type `element`, and the
/// feature that needs it (see the module docs).
pub fn required_minor(element: ElementType) -> (u32, &'static str) {
    match element {
        ElementType::RawBytes { bits, .. } if bits < 8 => (
            1,
            "a padded sub-byte dtype (fp6/fp4, IS_SUBBYTE_TYPE_PADDED)",
        ),
        ElementType::RawBytes { .. } => (1, "an fp8 dtype code"),
        ElementType::PackedBits { .. } => (1, "a packed fp6/fp4 dtype code"),
        ElementType::ComplexBF16 => (3, "the bfloat16 complex dtype code (kDLBcomplex)"),
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

/// The flags a header restating `descriptor` carries.
pub(crate) fn flags(descriptor: &TensorDescriptor) -> DlpackFlags {
    let mut flags = DlpackFlags::empty();
    flags.set(DlpackFlags::READ_ONLY, descriptor.read_only());
    flags.set(DlpackFlags::IS_COPIED, descriptor.is_copied());
    flags.set(
        DlpackFlags::IS_SUBBYTE_TYPE_PADDED,
        is_padded(descriptor.element()),
    );
    flags
}

fn initialize<M: ManagedTensorBase, O: Send + 'static>(
    descriptor: &TensorDescriptor,
    owner: O,
) -> Result<Initialized<M, dlpark::allocation::dynamic::Metadata>> {
    let mut initialized = Dynamic::new(descriptor.shape(), descriptor.strides())
        .initialize_as::<M>(Box::new(owner))
        .map_err(|e| Error::ExportMetadata {
            reason: e.to_string(),
        })?;
    initialized
        .set_data(descriptor.first_element() as *mut std::ffi::c_void)
        .set_device(descriptor.device().to_dlpack())
        .set_dtype(descriptor.element().to_dlpack())
        .set_byte_offset(0);
    Ok(initialized)
}

/// Builds a versioned managed tensor that restates `descriptor`. `minor_version` is the newest
/// 1.x minor version the consumer accepts; the tensor declares it, capped at what this library
/// implements, and is refused if the tensor needs a newer one (see the module docs). `owner` is
/// dropped when the consumer calls the deleter, or here on an error. Nothing is validated
/// again: a descriptor holds its invariants from construction.
pub fn export_versioned<O: Send + 'static>(
    descriptor: &TensorDescriptor,
    owner: O,
    minor_version: u32,
) -> Result<Managed<DLManagedTensorVersioned>> {
    // On error `owner` is dropped here, before returning, as on every error path.
    let claimed = claimed_minor(descriptor.element(), minor_version)?;
    let mut initialized = initialize::<DLManagedTensorVersioned, O>(descriptor, owner)?;
    let version = DLPackVersion {
        major: DLPackVersion::CURRENT.major,
        minor: claimed,
    };
    initialized
        .set_version(version)
        .map_err(|e| Error::ExportMetadata {
            reason: e.to_string(),
        })?;
    // SAFETY: the flags restate the descriptor: READ_ONLY and IS_COPIED as its maker said
    // (the owner of the memory knows them); the sub-byte flag matches the element layout.
    unsafe { initialized.set_flags_unchecked(flags(descriptor)) };
    // SAFETY: data lives as long as `owner`, which the tensor owns; shape and strides live in
    // the tensor's own allocation and restate a descriptor, whose invariants make it valid.
    Ok(unsafe { initialized.finish() })
}

/// Builds a legacy managed tensor (for consumers that do not ask for a versioned one). A
/// tensor with flags that change what the memory means (READ_ONLY, IS_SUBBYTE_TYPE_PADDED) is
/// refused: the legacy ABI has no flags (see the module docs).
pub fn export_legacy<O: Send + 'static>(
    descriptor: &TensorDescriptor,
    owner: O,
) -> Result<Managed<DLManagedTensor>> {
    // On error `owner` is dropped here, before returning, as on every error path.
    check_legacy(descriptor.element(), descriptor.read_only())?;
    let initialized = initialize::<DLManagedTensor, O>(descriptor, owner)?;
    // SAFETY: as in `export_versioned`.
    Ok(unsafe { initialized.finish() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::layout::IndexOrder;
    use crate::test_support::CountingOwner;

    #[test]
    fn julia_layout_keeps_or_reverses_index_order() {
        let producer = TensorDescriptor::from_julia_layout(
            64,
            Device::CPU,
            ElementType::Float64,
            &[2, 3],
            &[1, 2],
            IndexOrder::Producer,
        )
        .unwrap();
        assert_eq!(
            (producer.shape(), producer.strides()),
            (&[2, 3][..], &[1, 2][..])
        );
        let reversed = TensorDescriptor::from_julia_layout(
            64,
            Device::CPU,
            ElementType::Float64,
            &[2, 3],
            &[1, 2],
            IndexOrder::Reversed,
        )
        .unwrap();
        assert_eq!(
            (reversed.shape(), reversed.strides()),
            (&[3, 2][..], &[2, 1][..])
        );
    }

    #[test]
    fn owner_is_dropped_once_by_the_deleter_and_metadata_is_explicit() {
        let data = [0f32; 6];
        let spec = TensorDescriptor::from_julia_layout(
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
    fn manager_ctx_is_never_null_even_for_an_owner_of_no_size() {
        let data = [0u8; 4];
        let spec = byte_spec(ElementType::UInt8, &data);
        let (counting, _) = CountingOwner::new();
        let contexts = [
            export_versioned(&spec, (), 3).unwrap().into_raw(),
            export_versioned(&spec, counting, 3).unwrap().into_raw(),
        ]
        .map(|raw| {
            // SAFETY: a tensor just made, released here by its own deleter, once.
            unsafe {
                let context = (*raw).manager_ctx;
                ((*raw).deleter.unwrap())(raw);
                context
            }
        });
        let legacy = export_legacy(&spec, ()).unwrap();
        // SAFETY: the header of a live tensor we own.
        let legacy_context = unsafe { (*legacy.as_ptr()).manager_ctx };
        assert!(
            contexts
                .iter()
                .chain([&legacy_context])
                .all(|c| !c.is_null()),
            "{contexts:?} {legacy_context:?}"
        );
    }

    #[test]
    fn flags_travel_and_legacy_refuses_read_only() {
        let data = [0u8; 4];
        let spec = TensorDescriptor::from_julia_layout(
            data.as_ptr() as usize,
            Device::CPU,
            ElementType::UInt8,
            &[4],
            &[1],
            IndexOrder::Producer,
        )
        .unwrap()
        .with_read_only(true);
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
        let managed_memory = Device {
            kind: crate::device::DeviceKind::CudaManaged,
            id: 0,
        };
        let source = TensorDescriptor::unchecked_for_tests(
            4096,
            managed_memory,
            ElementType::Float32,
            &[2, 3, 4],
            &[12, 4, 1],
        )
        .with_read_only(true);
        let spec = source.copied_at(4096);
        assert_eq!(spec.strides(), [1, 2, 6]);
        assert_eq!(
            (spec.device(), spec.read_only(), spec.is_copied()),
            (Device::CPU, false, true)
        );
    }

    #[test]
    fn copies_of_packed_and_of_huge_empty_tensors_describe_what_was_written() {
        let fp4 = ElementType::PackedBits { code: 17, bits: 4 };
        let packed = crate::test_support::host_descriptor(4096, &[3, 5], &[5, 1], fp4);
        let spec = packed.copied_at(4096);
        assert_eq!(
            spec.strides(),
            [5, 1],
            "packed bytes are copied row-major, verbatim"
        );
        let (owner, _) = CountingOwner::new();
        assert!(
            export_versioned(&spec, owner, 3).is_ok(),
            "the copy exports"
        );
        let empty = crate::test_support::host_descriptor(
            4096,
            &[0, 1 << 62, 4, 4],
            &[0, 16, 4, 1],
            ElementType::Float32,
        );
        let spec = empty.copied_at(4096);
        assert_eq!(
            spec.strides(),
            [1, 1, 1 << 62, 0],
            "4·2^62 does not fit: 0 for an empty tensor"
        );
    }

    #[test]
    fn an_array_at_a_null_address_is_refused_before_anything_is_exported() {
        let refused = TensorDescriptor::from_julia_layout(
            0,
            Device::CPU,
            ElementType::Float32,
            &[2],
            &[1],
            IndexOrder::Producer,
        );
        assert!(matches!(refused, Err(Error::NullData { elements: 2 })));
        let empty = TensorDescriptor::from_julia_layout(
            0,
            Device::CPU,
            ElementType::Float32,
            &[0],
            &[1],
            IndexOrder::Producer,
        );
        assert!(empty.is_ok(), "an empty array addresses nothing");
    }

    #[test]
    fn a_misaligned_spec_exports_as_it_is() {
        let data = [0u8; 24];
        let misaligned = (data.as_ptr() as usize).next_multiple_of(8) + 1;
        let spec = TensorDescriptor::from_julia_layout(
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

    fn byte_spec(element: ElementType, data: &[u8]) -> Box<TensorDescriptor> {
        TensorDescriptor::from_julia_layout(
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
        let bcomplex = byte_spec(ElementType::ComplexBF16, &data);
        for (spec, needed) in [
            (&plain, 0),
            (&bools, 0),
            (&fp8, 1),
            (&padded, 1),
            (&packed, 1),
            (&bcomplex, 3),
        ] {
            assert_eq!(required_minor(spec.element()).0, needed, "{spec:?}");
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
                                needed_minor,
                                allowed_minor,
                                ..
                            } if needed_minor == needed && allowed_minor == allowed
                        ),
                        "{err:?}"
                    );
                    let asked = format!("max_version=(1, {needed})");
                    assert!(err.to_string().contains(&asked), "{err}");
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
