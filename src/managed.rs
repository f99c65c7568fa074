//! A producer's managed tensor, owned: [`ManagedTensor`], in either DLPack ABI, whose drop
//! calls the producer's deleter (dlpark's [`Managed`] in each case).
//!
//! Below [`crate::release`] (a pending release holds one until its consumer's work is done)
//! and [`crate::imported`] (which holds one with the descriptor validated when ownership was
//! taken, and re-exports it).

use crate::descriptor::TensorDescriptor;
use crate::error::{Error, Result};
use dlpark::Managed;
use dlpark::dlpack::FromRawError;
use dlpark::ffi::{DLManagedTensor, DLManagedTensorVersioned};

/// A managed tensor in either DLPack ABI. Dropping it calls the producer's deleter.
pub enum ManagedTensor {
    Legacy(Managed<DLManagedTensor>),
    Versioned(Managed<DLManagedTensorVersioned>),
}

impl ManagedTensor {
    /// Takes ownership of a versioned managed tensor. A tensor of another major version is
    /// released (its deleter sits where every major version keeps it) and refused.
    ///
    /// # Safety
    /// `ptr` must be null or point to a `DLManagedTensorVersioned` the caller owns and gives up;
    /// its deleter, if any, must be callable once from any thread.
    pub unsafe fn from_versioned_raw(ptr: *mut DLManagedTensorVersioned) -> Result<Self> {
        // SAFETY: forwarded from this function's contract.
        match unsafe { Managed::from_raw(ptr) } {
            Ok(managed) => Ok(Self::Versioned(managed)),
            Err(FromRawError::Null) => Err(Error::NullTensor),
            Err(FromRawError::Version { source }) => Err(Error::UnsupportedVersion {
                found: source.actual,
                supported: source.expected,
            }),
            Err(_) => Err(Error::NullTensor),
        }
    }

    /// Takes ownership of a legacy managed tensor.
    ///
    /// # Safety
    /// As [`Self::from_versioned_raw`], for a `DLManagedTensor`.
    pub unsafe fn from_legacy_raw(ptr: *mut DLManagedTensor) -> Result<Self> {
        // SAFETY: forwarded from this function's contract; legacy tensors carry no version.
        match unsafe { Managed::from_raw(ptr) } {
            Ok(managed) => Ok(Self::Legacy(managed)),
            Err(_) => Err(Error::NullTensor),
        }
    }

    /// Validates the metadata into `descriptor` (where it already lies: see
    /// [`TensorDescriptor::validate_into`]). The tensor stays owned by `self` whatever the
    /// outcome.
    #[inline]
    pub fn describe_into(&self, descriptor: &mut TensorDescriptor) -> Result<()> {
        match self {
            // SAFETY: a `Managed` owns its tensor, whose metadata the producer keeps readable and
            // unchanged until the deleter runs, which cannot happen while `self` is borrowed.
            Self::Legacy(m) => unsafe { descriptor.validate_into(m.tensor(), None, m.flags()) },
            // SAFETY: as above.
            Self::Versioned(m) => unsafe {
                descriptor.validate_into(m.tensor(), Some(m.version()), m.flags())
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{CountingOwner, counted_versioned};

    #[test]
    fn deleter_runs_once_when_the_major_version_is_foreign() {
        let (raw, count) = counted_versioned(&[2], &[1]);
        // SAFETY: `raw` is a live tensor we own; only its version field changes.
        unsafe { (*raw).version.major = 2 };
        // SAFETY: handed over.
        let result = unsafe { ManagedTensor::from_versioned_raw(raw) };
        assert!(matches!(
            result,
            Err(Error::UnsupportedVersion {
                found: 2,
                supported: 1
            })
        ));
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    #[test]
    fn null_is_refused() {
        // SAFETY: null is explicitly allowed by the contract.
        let result = unsafe { ManagedTensor::from_versioned_raw(std::ptr::null_mut()) };
        assert!(matches!(result, Err(Error::NullTensor)));
    }
}
