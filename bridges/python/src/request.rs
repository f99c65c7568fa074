//! The DLPack protocol's arguments as typed requests. Sentinels (stream 0, -1, 1, 2; copy
//! None/True/False) are decoded here, at the border, and never travel as bare integers.

use crate::error::{BridgeError, BridgeResult};
use pyo3::prelude::*;
use rsdlpack::Device;

pub use rsdlpack::stream::StreamRequest;

/// Reads the `stream` argument (`None` or an int).
pub fn stream_from_python(value: Option<&Bound<'_, PyAny>>) -> BridgeResult<StreamRequest> {
    match value {
        None => Ok(StreamRequest::Omitted),
        Some(v) if v.is_none() => Ok(StreamRequest::Omitted),
        Some(v) => {
            let value = v.extract::<i64>().map_err(|_| {
                BridgeError::Argument(format!("stream must be None or an int, got {v}"))
            })?;
            Ok(StreamRequest::from_value(value)?)
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
        Ok(Self::from_pair(major, minor))
    }

    /// The request for `max_version=(major, minor)`: major 0 only understands legacy capsules;
    /// a newer major than 1 accepts every 1.x.
    pub fn from_pair(major: u32, minor: u32) -> Self {
        match major {
            0 => Self::Legacy,
            1 => Self::Versioned { minor },
            _ => Self::Versioned { minor: u32::MAX },
        }
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
