//! The DLPack protocol's arguments as typed requests. Sentinels (stream 0, -1, 1, 2; copy
//! None/True/False) are decoded here, at the border, and never travel as bare integers.

use crate::error::{BridgeError, BridgeResult};
use pyo3::prelude::*;
use rsdlpack::Device;

pub use rsdlpack::export::plan::{ExportRequest, VersionRequest};
pub use rsdlpack::stream::StreamRequest;

// Each reader answers `None` (the argument omitted or passed as None: what consumers mostly
// send) inline, and reads any other value out of line: returned through memory, a large
// `BridgeResult` makes the caller wait for the callee's stores on every call.

/// Reads the `stream` argument (`None` or an int).
#[inline]
pub fn stream_from_python(value: Option<&Bound<'_, PyAny>>) -> BridgeResult<StreamRequest> {
    match value.filter(|v| !v.is_none()) {
        None => Ok(StreamRequest::Omitted),
        Some(v) => stream_value(v),
    }
}

#[inline(never)]
fn stream_value(value: &Bound<'_, PyAny>) -> BridgeResult<StreamRequest> {
    let stream = value
        .extract::<i64>()
        .map_err(|_| bad_value("stream", "None or an int", value))?;
    Ok(StreamRequest::from_value(stream)?)
}

/// Reads the `max_version` argument: `None` means the consumer only understands legacy
/// capsules.
pub fn version_from_python(value: Option<&Bound<'_, PyAny>>) -> BridgeResult<VersionRequest> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(VersionRequest::Legacy);
    };
    let (major, minor): (u32, u32) = value
        .extract()
        .map_err(|_| bad_value("max_version", "a (major, minor) tuple", value))?;
    Ok(VersionRequest::from_pair(major, minor))
}

/// Reads a `(device_type, device_id)` tuple.
#[inline]
pub fn device_from_python(value: Option<&Bound<'_, PyAny>>) -> BridgeResult<Option<Device>> {
    match value.filter(|v| !v.is_none()) {
        None => Ok(None),
        Some(v) => device_value(v).map(Some),
    }
}

#[inline(never)]
fn device_value(value: &Bound<'_, PyAny>) -> BridgeResult<Device> {
    let (device_type, device_id): (u32, i32) = value
        .extract()
        .map_err(|_| bad_value("dl_device", "a (device_type, device_id) tuple", value))?;
    Ok(Device::from_dlpack(rsdlpack::dlpark::ffi::DLDevice {
        device_type: rsdlpack::dlpark::ffi::DLDeviceType(device_type),
        device_id,
    }))
}

/// Reads a producer's `__dlpack_device__()` answer: a `(device_type, device_id)` tuple, where
/// a host device may name no id (PaddlePaddle 3.3 answers `(kDLCPU, None)`): the host has one.
pub fn answered_device_from_python(value: &Bound<'_, PyAny>) -> Option<Device> {
    let (device_type, device_id): (u32, Option<i32>) = value.extract().ok()?;
    let device_type = rsdlpack::dlpark::ffi::DLDeviceType(device_type);
    let device_id = match device_id {
        Some(id) => id,
        None if device_type == rsdlpack::dlpark::ffi::DLDeviceType::CPU => 0,
        None => return None,
    };
    Some(Device::from_dlpack(rsdlpack::dlpark::ffi::DLDevice {
        device_type,
        device_id,
    }))
}

/// Reads the tri-state `copy` argument.
#[inline]
pub fn copy_from_python(value: Option<&Bound<'_, PyAny>>) -> BridgeResult<Option<bool>> {
    match value.filter(|v| !v.is_none()) {
        None => Ok(None),
        Some(v) => copy_value(v).map(Some),
    }
}

#[inline(never)]
fn copy_value(value: &Bound<'_, PyAny>) -> BridgeResult<bool> {
    value
        .extract::<bool>()
        .map_err(|_| bad_value("copy", "None, True or False", value))
}

fn bad_value(name: &'static str, expected: &'static str, got: &Bound<'_, PyAny>) -> BridgeError {
    BridgeError::BadValue {
        name,
        expected,
        got: got.to_string(),
    }
}
