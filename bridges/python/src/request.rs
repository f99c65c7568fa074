//! The DLPack protocol's arguments as typed requests. Sentinels (stream 0, -1, 1, 2; copy
//! None/True/False) are decoded here, at the border, and never travel as bare integers.

use crate::error::{BridgeError, BridgeResult};
use pyo3::prelude::*;
use rsdlpack::Device;

/// The `stream` argument of `__dlpack__`, per the Python specification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamRequest {
    /// `None`: the consumer said nothing (CUDA: the legacy default stream).
    Omitted,
    /// `-1`: do not synchronize.
    NoSync,
    /// `1`: the legacy default stream.
    LegacyDefault,
    /// `2`: the per-thread default stream.
    PerThreadDefault,
    /// `> 2`: a stream handle.
    Handle(usize),
}

impl StreamRequest {
    /// Decodes the integer form. 0 is refused as the specification demands (it is ambiguous).
    pub fn from_value(value: i64) -> BridgeResult<Self> {
        match value {
            -1 => Ok(Self::NoSync),
            1 => Ok(Self::LegacyDefault),
            2 => Ok(Self::PerThreadDefault),
            v if v > 2 => usize::try_from(v)
                .map(Self::Handle)
                .map_err(|_| BridgeError::Argument(format!("stream {v} does not fit a pointer"))),
            0 => Err(BridgeError::Argument(
                "stream=0 is disallowed by the DLPack specification (ambiguous); use 1 for the \
                 legacy default stream or 2 for the per-thread default stream"
                    .into(),
            )),
            v => Err(BridgeError::Argument(format!(
                "stream={v} is not a valid DLPack stream (None, -1, 1, 2 or a handle > 2)"
            ))),
        }
    }

    pub fn from_python(value: Option<&Bound<'_, PyAny>>) -> BridgeResult<Self> {
        match value {
            None => Ok(Self::Omitted),
            Some(v) if v.is_none() => Ok(Self::Omitted),
            Some(v) => Self::from_value(v.extract::<i64>().map_err(|_| {
                BridgeError::Argument(format!("stream must be None or an int, got {v}"))
            })?),
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
}

/// The `max_version` argument: `None` means the consumer only understands legacy capsules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionRequest {
    Legacy,
    Versioned { minor: u32 },
}

impl VersionRequest {
    pub fn from_python(value: Option<&Bound<'_, PyAny>>) -> BridgeResult<Self> {
        let Some(value) = value.filter(|v| !v.is_none()) else {
            return Ok(Self::Legacy);
        };
        let (major, minor): (u32, u32) = value.extract().map_err(|_| {
            BridgeError::Argument(format!(
                "max_version must be a (major, minor) tuple, got {value}"
            ))
        })?;
        Ok(if major >= 1 {
            Self::Versioned {
                minor: if major > 1 { u32::MAX } else { minor },
            }
        } else {
            Self::Legacy
        })
    }
}

/// Reads a `(device_type, device_id)` tuple.
pub fn device_from_python(value: Option<&Bound<'_, PyAny>>) -> BridgeResult<Option<Device>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let (device_type, device_id): (u32, i32) = value.extract().map_err(|_| {
        BridgeError::Argument(format!(
            "dl_device must be a (device_type, device_id) tuple, got {value}"
        ))
    })?;
    Ok(Some(Device::from_dlpack(rsdlpack::dlpark::ffi::DLDevice {
        device_type: rsdlpack::dlpark::ffi::DLDeviceType(device_type),
        device_id,
    })))
}

/// Reads the tri-state `copy` argument.
pub fn copy_from_python(value: Option<&Bound<'_, PyAny>>) -> BridgeResult<Option<bool>> {
    match value.filter(|v| !v.is_none()) {
        None => Ok(None),
        Some(v) => v.extract::<bool>().map(Some).map_err(|_| {
            BridgeError::Argument(format!("copy must be None, True or False, got {v}"))
        }),
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
        assert!(StreamRequest::from_value(-5).is_err());
        for value in [-1, 1, 2, 0x7f00] {
            assert_eq!(
                StreamRequest::from_value(value).unwrap().to_value(),
                Some(value)
            );
        }
        assert_eq!(StreamRequest::Omitted.to_value(), None);
    }
}
