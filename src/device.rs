//! Devices a tensor can live on, and which of them this library can hand to Julia.

use crate::error::{Error, Result};
use dlpark::ffi::{DLDevice, DLDeviceType};

/// Device types DLPack defines (dlpack.h 1.3: 1–4 and 7–18). 0 never was one; 5 and 6 were
/// retired before 1.0 and are not assigned.
const KNOWN_DEVICE_TYPES: [std::ops::RangeInclusive<u32>; 2] = [1..=4, 7..=18];

/// The device kinds RsDLPack distinguishes; every other DLPack device type is `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    Cpu,
    Cuda,
    /// Page-locked host memory from `cudaMallocHost`: ordinary host memory to the CPU.
    CudaHost,
    /// Unified memory from `cudaMallocManaged`: addressable from host and device.
    CudaManaged,
    Other(u32),
}

impl DeviceKind {
    pub fn of(device_type: DLDeviceType) -> Self {
        match device_type {
            DLDeviceType::CPU => Self::Cpu,
            DLDeviceType::CUDA => Self::Cuda,
            DLDeviceType::CUDAHOST => Self::CudaHost,
            DLDeviceType::CUDAMANAGED => Self::CudaManaged,
            other => Self::Other(other.0),
        }
    }

    pub(crate) fn name_of(device_type: DLDeviceType) -> &'static str {
        match Self::of(device_type) {
            Self::Cpu => "CPU",
            Self::Cuda => "CUDA",
            Self::CudaHost => "CUDAHost",
            Self::CudaManaged => "CUDAManaged",
            Self::Other(_) => "(not CPU or CUDA)",
        }
    }

    /// Whether `device_type` is a device type DLPack defines (see [`Device::check_known`]).
    pub fn is_known_device_type(device_type: u32) -> bool {
        KNOWN_DEVICE_TYPES.iter().any(|r| r.contains(&device_type))
    }

    /// Whether the host may read the memory directly, so that it can become a Julia `Array`.
    pub fn host_accessible(self) -> bool {
        matches!(self, Self::Cpu | Self::CudaHost | Self::CudaManaged)
    }

    /// Whether the memory belongs to the CUDA driver (pointer attributes can be checked).
    pub fn is_cuda(self) -> bool {
        matches!(self, Self::Cuda | Self::CudaHost | Self::CudaManaged)
    }
}

/// A validated device: its kind and ordinal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Device {
    pub kind: DeviceKind,
    pub id: i32,
}

impl Device {
    pub const CPU: Device = Device {
        kind: DeviceKind::Cpu,
        id: 0,
    };

    pub fn from_dlpack(device: DLDevice) -> Self {
        Self {
            kind: DeviceKind::of(device.device_type),
            id: device.device_id,
        }
    }

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

    pub fn to_dlpack(self) -> DLDevice {
        let device_type = match self.kind {
            DeviceKind::Cpu => DLDeviceType::CPU,
            DeviceKind::Cuda => DLDeviceType::CUDA,
            DeviceKind::CudaHost => DLDeviceType::CUDAHOST,
            DeviceKind::CudaManaged => DLDeviceType::CUDAMANAGED,
            DeviceKind::Other(code) => DLDeviceType(code),
        };
        DLDevice {
            device_type,
            device_id: self.id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_round_trips_and_classifies() {
        for (kind, host) in [
            (DeviceKind::Cpu, true),
            (DeviceKind::Cuda, false),
            (DeviceKind::CudaHost, true),
            (DeviceKind::CudaManaged, true),
            (DeviceKind::Other(8), false),
        ] {
            let device = Device { kind, id: 1 };
            assert_eq!(Device::from_dlpack(device.to_dlpack()), device);
            assert_eq!(kind.host_accessible(), host);
        }
    }

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
}
