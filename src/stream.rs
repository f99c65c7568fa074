//! DLPack's `stream` values, decoded once into a type (the Python specification's table).
//! Pure data: what to do with them on a GPU lives in [`crate::cuda`].

use crate::error::{Error, Result};

/// The `stream` argument of `__dlpack__`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamRequest {
    /// `None`: the consumer said nothing (CUDA: the legacy default stream).
    Omitted,
    /// `-1`: do not synchronize.
    NoSync,
    /// `1`: the legacy default stream.
    LegacyDefault,
    /// `2`: the per-thread default stream.
    PerThreadDefault,
    /// `> 2`: a stream handle (`CUstream`).
    Handle(usize),
}

impl StreamRequest {
    /// Decodes the integer form. 0 is refused as the specification demands (it is ambiguous).
    pub fn from_value(value: i64) -> Result<Self> {
        match value {
            -1 => Ok(Self::NoSync),
            1 => Ok(Self::LegacyDefault),
            2 => Ok(Self::PerThreadDefault),
            v if v > 2 => usize::try_from(v)
                .map(Self::Handle)
                .map_err(|_| Error::InvalidStream { value: v }),
            0 => Err(Error::StreamZero),
            v => Err(Error::InvalidStream { value: v }),
        }
    }

    /// The integer to pass as `stream=`, or `None` to pass nothing.
    pub fn to_value(self) -> Option<i64> {
        match self {
            Self::Omitted => None,
            Self::NoSync => Some(-1),
            Self::LegacyDefault => Some(1),
            Self::PerThreadDefault => Some(2),
            Self::Handle(h) => Some(h as i64),
        }
    }

    /// The `CUstream` to order work on, or `None` for "do not synchronize". The driver API
    /// accepts 1 (`CU_STREAM_LEGACY`) and 2 (`CU_STREAM_PER_THREAD`) as handles.
    pub fn cuda_handle(self) -> Option<usize> {
        match self {
            Self::NoSync => None,
            Self::Omitted | Self::LegacyDefault => Some(1),
            Self::PerThreadDefault => Some(2),
            Self::Handle(h) => Some(h),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_values_follow_the_specification() {
        assert_eq!(
            StreamRequest::from_value(-1).unwrap(),
            StreamRequest::NoSync
        );
        assert_eq!(
            StreamRequest::from_value(1).unwrap(),
            StreamRequest::LegacyDefault
        );
        assert_eq!(
            StreamRequest::from_value(2).unwrap(),
            StreamRequest::PerThreadDefault
        );
        assert_eq!(
            StreamRequest::from_value(0x7f00).unwrap(),
            StreamRequest::Handle(0x7f00)
        );
        let zero = StreamRequest::from_value(0).unwrap_err().to_string();
        assert!(zero.contains("stream=0 is disallowed"), "{zero}");
        assert!(matches!(
            StreamRequest::from_value(0),
            Err(Error::StreamZero)
        ));
        assert!(matches!(
            StreamRequest::from_value(-5),
            Err(Error::InvalidStream { value: -5 })
        ));
        for value in [-1, 1, 2, 0x7f00] {
            assert_eq!(
                StreamRequest::from_value(value).unwrap().to_value(),
                Some(value)
            );
        }
        assert_eq!(StreamRequest::Omitted.to_value(), None);
    }

    #[test]
    fn cuda_handles_map_none_to_legacy_and_minus_one_to_nothing() {
        assert_eq!(StreamRequest::Omitted.cuda_handle(), Some(1));
        assert_eq!(StreamRequest::LegacyDefault.cuda_handle(), Some(1));
        assert_eq!(StreamRequest::PerThreadDefault.cuda_handle(), Some(2));
        assert_eq!(StreamRequest::Handle(0xabc0).cuda_handle(), Some(0xabc0));
        assert_eq!(StreamRequest::NoSync.cuda_handle(), None);
    }
}
