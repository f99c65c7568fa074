//! Devices a tensor can live on, and which of them this library can hand to Julia.
//!
//! Below `error`, whose variants name devices: the check that refuses unknown device types
//! with an error, [`Device::check_known`], is defined with the border's other checks, in
//! [`crate::descriptor`].

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
}
