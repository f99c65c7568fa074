//! What an exporter's `__dlpack__` hands out for a request, decided before anything is done:
//! a pure function of the source's device, element type and read-only flag and of the typed
//! request, with no Python and no driver, so that it can be tested and fuzzed on its own
//! (`fuzz/fuzz_targets/export_request.rs`). The Python bridge parses the protocol's arguments
//! into an [`ExportRequest`], carries the plan out (stream ordering, copies) and builds the
//! capsule it names.
//!
//! The rules, in the order they refuse:
//! 1. `dl_device` must be the source's device, except that CUDA, pinned (CUDAHost) and managed
//!    (CUDAManaged) memory may be asked for on the host, `(CPU, 0)`: a copy to host memory
//!    (refused with `copy=False`). Anything else is a `BufferError`, `(CPU, k)` for k ≠ 0
//!    included (a host copy is labelled `(CPU, 0)`). A request for the host takes `stream`
//!    `None` or -1 only, as a CPU tensor does (`ValueError`).
//! 2. A CUDA source is shared, its consumer's stream (`stream.cuda_handle()`, none for -1)
//!    ordered after the producer's; `copy=True` is refused (no device copies), and so is
//!    `copy=False` with a host `dl_device`, which needs one.
//! 3. Any other source: on the CPU, `stream` must be `None` or -1 (`ValueError`). Shared
//!    managed memory orders the consumer's stream as CUDA memory does; pinned host memory and
//!    other devices (ROCm) refuse any other stream, which this exporter cannot honour
//!    (`BufferError`). The memory is
//!    shared unless `copy=True`, which makes a host copy (column-major, writable, IS_COPIED)
//!    of host-readable memory and is refused for other devices (`BufferError`). The copy is
//!    plain host memory, so pinned or managed memory is copied with `dl_device` absent or the
//!    host, and refused when `dl_device` names its own device: an explicit `dl_device` is
//!    always what the exported tensor says.
//! 4. The capsule: legacy (`max_version` absent or major 0) only when the exported tensor is
//!    neither read-only nor of a padded sub-byte type ([`check_legacy`]); versioned tensors
//!    claim the consumer's maximum minor version capped at ours, refused when the element type
//!    needs a newer one ([`claimed_minor`]).
//!
//! Shared capsules never claim IS_COPIED (several capsules share the memory); copies always do,
//! and are writable whatever the source was.

use super::{check_legacy, claimed_minor};
use crate::device::{Device, DeviceKind};
use crate::dtype::ElementType;
use crate::error::{Error, Result};
use crate::stream::StreamRequest;

/// The `max_version` argument: `None` means the consumer only understands legacy capsules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionRequest {
    Legacy,
    Versioned { minor: u32 },
}

impl VersionRequest {
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

/// What the decision needs to know about the exporter's tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    pub device: Device,
    pub element: ElementType,
    pub read_only: bool,
}

/// The four arguments of `__dlpack__`, typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportRequest {
    pub stream: StreamRequest,
    pub version: VersionRequest,
    pub device: Option<Device>,
    pub copy: Option<bool>,
}

/// Where the exported tensor's memory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// The source's memory itself. For CUDA memory, `consumer_stream` is the `CUstream` to
    /// order after the producer's stream before handing it out (none: do not synchronize).
    Shared { consumer_stream: Option<usize> },
    /// A host copy of host-readable memory (the copy engine).
    HostCopy,
    /// A host copy of CUDA memory, made after the producer's stream.
    DeviceToHost,
}

impl Memory {
    /// Whether carrying the plan out calls the CUDA driver.
    pub fn needs_driver(self) -> bool {
        matches!(
            self,
            Memory::DeviceToHost
                | Memory::Shared {
                    consumer_stream: Some(_)
                }
        )
    }
}

/// The capsule handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capsule {
    /// "dltensor": a `DLManagedTensor`, which has no version and no flags.
    Legacy,
    /// "dltensor_versioned": a `DLManagedTensorVersioned` declaring version 1.`minor`.
    Versioned { minor: u32 },
}

/// The decision: where the memory comes from, what the exported tensor says about itself, and
/// in which capsule it travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportPlan {
    pub memory: Memory,
    /// The exported tensor's device (the host for copies).
    pub device: Device,
    /// READ_ONLY of the exported tensor (versioned capsules only).
    pub read_only: bool,
    /// IS_COPIED of the exported tensor (versioned capsules only).
    pub is_copied: bool,
    pub capsule: Capsule,
}

/// Decides what `__dlpack__` hands out for `request` (see the module docs for the rules).
pub fn plan_export(source: &Source, request: &ExportRequest) -> Result<ExportPlan> {
    check_device(source.device, request.device)?;
    check_host_stream(request)?;
    let memory = if source.device.kind == DeviceKind::Cuda {
        cuda_memory(source.device, request)?
    } else {
        other_memory(source.device, request)?
    };
    let (device, read_only, is_copied) = match memory {
        Memory::Shared { .. } => (source.device, source.read_only, false),
        Memory::HostCopy | Memory::DeviceToHost => (Device::CPU, false, true),
    };
    Ok(ExportPlan {
        memory,
        device,
        read_only,
        is_copied,
        capsule: capsule(source.element, read_only, request.version)?,
    })
}

/// Rule 1: a `dl_device` other than the source's is refused, but for the host when the driver
/// knows the memory (device, pinned, managed): that is a copy.
fn check_device(device: Device, wanted: Option<Device>) -> Result<()> {
    match wanted.filter(|&d| d != device && !(device.kind.is_cuda() && d == Device::CPU)) {
        Some(wanted) => Err(Error::ExportDevice { device, wanted }),
        None => Ok(()),
    }
}

/// A copy to the host (`dl_device=(CPU, 0)`) is host memory, which no stream orders: its
/// `stream` must be `None` (or -1), as for a CPU tensor, whatever the source's device.
fn check_host_stream(request: &ExportRequest) -> Result<()> {
    let quiet = matches!(
        request.stream,
        StreamRequest::Omitted | StreamRequest::NoSync
    );
    match request.device {
        Some(wanted) if wanted.kind == DeviceKind::Cpu && !quiet => Err(Error::StreamOnCpu {
            value: request.stream.to_value(),
        }),
        _ => Ok(()),
    }
}

/// Rule 2: CUDA memory is shared on the consumer's stream, or copied to the host when the host
/// is asked for; never copied on the device.
fn cuda_memory(device: Device, request: &ExportRequest) -> Result<Memory> {
    match request.device {
        Some(wanted) if wanted.kind == DeviceKind::Cpu => {
            if request.copy == Some(false) {
                return Err(Error::HostCopyForbidden { device });
            }
            Ok(Memory::DeviceToHost)
        }
        _ if request.copy == Some(true) => Err(Error::NoDeviceCopies),
        _ => Ok(Memory::Shared {
            consumer_stream: request.stream.cuda_handle(),
        }),
    }
}

/// Rule 3: host, pinned, managed and other memory.
fn other_memory(device: Device, request: &ExportRequest) -> Result<Memory> {
    let quiet = matches!(
        request.stream,
        StreamRequest::Omitted | StreamRequest::NoSync
    );
    if device.kind == DeviceKind::Cpu && !quiet {
        return Err(Error::StreamOnCpu {
            value: request.stream.to_value(),
        });
    }
    // Past the device check, a different `dl_device` is the host, for pinned or managed
    // memory.
    let to_host = request.device.is_some_and(|d| d != device);
    match request.copy {
        Some(false) if to_host => Err(Error::HostCopyForbidden { device }),
        _ if to_host => Ok(Memory::HostCopy),
        Some(true) if !device.kind.host_accessible() => Err(Error::UnsupportedDevice {
            device: device.to_dlpack(),
            hint: " or copy it on the device first",
        }),
        // A copy is host memory: a consumer that named this tensor's own (pinned or managed)
        // device must not receive it.
        Some(true) if request.device.is_some() && device.kind != DeviceKind::Cpu => {
            Err(Error::HostCopyNotOnDevice { device })
        }
        Some(true) => Ok(Memory::HostCopy),
        _ => Ok(Memory::Shared {
            consumer_stream: shared_stream(device, request.stream)?,
        }),
    }
}

/// Whether consumers of memory on `kind` are ordered after its producer's stream: CUDA memory,
/// and managed memory, which `__dlpack__` orders as CUDA memory is.
pub fn ordered_by_streams(kind: DeviceKind) -> bool {
    matches!(kind, DeviceKind::Cuda | DeviceKind::CudaManaged)
}

/// When an exporter of device memory makes it ready for its consumers (see
/// [`producer_ready`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerReady {
    /// An event recorded on the producer's stream at each export (`__dlpack__`, the exchange
    /// API's calls, a host copy): each consumer waits for what was enqueued up to its own call,
    /// as DLPack puts the synchronisation at `__dlpack__`.
    AtEachExport(usize),
    /// One event recorded when the exporter is made, that every consumer waits for: the
    /// producer's stream may be gone by the time a consumer comes.
    AtShare,
}

/// [`ProducerReady`] for an exporter over memory written on `stream` (`None`: none named),
/// which `stream_kept` says stays alive as long as the exporter's memory does (Julia roots the
/// task's stream with the array).
pub fn producer_ready(stream: Option<usize>, stream_kept: bool) -> ProducerReady {
    match stream {
        Some(stream) if stream_kept => ProducerReady::AtEachExport(stream),
        _ => ProducerReady::AtShare,
    }
}

/// Whether a host copy of memory on `kind` waits on the host for its producer's writes first
/// (the exporter's ready event): memory streams order is written by device work that may still
/// be running when `copy=True` or `dl_device=(CPU, 0)` asks for the copy; host memory is not.
pub fn host_copy_after_producer(kind: DeviceKind) -> bool {
    ordered_by_streams(kind)
}

/// The stream the C exchange API's exports make memory ready on: the legacy default stream,
/// which its `current_work_stream` reports, for memory streams order; none for the rest
/// ("no_sync": the consumer orders its own streams).
pub fn exchange_api_stream(kind: DeviceKind) -> StreamRequest {
    if ordered_by_streams(kind) {
        StreamRequest::LegacyDefault
    } else {
        StreamRequest::NoSync
    }
}

/// The stream the release of memory shared into a type through its DLPack C exchange API
/// (`share(A, torch.Tensor)`) is ordered after, for memory of `kind` and the consumer's
/// current work stream as its table reported it (`current`, a `CUstream` value; `None` for a
/// table without `current_work_stream`): the stream the consumer works on the memory on, which
/// is its current one by the API's contract. The legacy default stream for a table that
/// reports none and for NULL (0, the runtime API's name for it); none for memory that no
/// stream orders (host and pinned memory: released at once, with no driver call).
pub fn exchange_api_release_stream(kind: DeviceKind, current: Option<usize>) -> Option<usize> {
    if !ordered_by_streams(kind) {
        return None;
    }
    Some(match current {
        None | Some(0) => 1,
        Some(stream) => stream,
    })
}

/// The consumer's stream to order after the producer's for shared memory that is not plain
/// CUDA memory: managed memory is ordered as CUDA memory is; on the CPU the stream was checked
/// before; pinned host memory and other devices cannot honour a stream.
fn shared_stream(device: Device, stream: StreamRequest) -> Result<Option<usize>> {
    match device.kind {
        DeviceKind::CudaManaged => Ok(stream.cuda_handle()),
        DeviceKind::Cpu => Ok(None),
        _ if matches!(stream, StreamRequest::Omitted | StreamRequest::NoSync) => Ok(None),
        _ => Err(Error::StreamNotHonoured {
            value: stream.to_value(),
            device,
        }),
    }
}

/// Rule 4: the capsule the exported tensor travels in.
fn capsule(element: ElementType, read_only: bool, version: VersionRequest) -> Result<Capsule> {
    Ok(match version {
        VersionRequest::Legacy => {
            check_legacy(element, read_only)?;
            Capsule::Legacy
        }
        VersionRequest::Versioned { minor } => Capsule::Versioned {
            minor: claimed_minor(element, minor)?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fence plan of a share into a type (`share(A, torch.Tensor)`), per value of the
    /// consumer's current work stream: device memory is released after that stream (the
    /// legacy one where the table reports none or NULL), host and pinned memory at once.
    #[test]
    fn a_share_into_a_type_is_released_after_the_consumers_current_stream() {
        use DeviceKind::*;
        for kind in [Cuda, CudaManaged] {
            let plan = |current| exchange_api_release_stream(kind, current);
            assert_eq!(
                plan(None),
                Some(1),
                "no current_work_stream: the legacy stream"
            );
            assert_eq!(plan(Some(0)), Some(1), "NULL is the legacy stream");
            assert_eq!(plan(Some(1)), Some(1));
            assert_eq!(plan(Some(2)), Some(2), "the per-thread stream stays itself");
            assert_eq!(plan(Some(0x7f00)), Some(0x7f00));
        }
        for kind in [Cpu, CudaHost, Other(10)] {
            for current in [None, Some(0), Some(1), Some(0x7f00)] {
                assert_eq!(exchange_api_release_stream(kind, current), None, "{kind:?}");
            }
        }
    }

    #[test]
    fn the_exchange_api_orders_managed_memory_as_it_orders_cuda_memory() {
        for kind in [DeviceKind::Cuda, DeviceKind::CudaManaged] {
            assert!(ordered_by_streams(kind));
            assert_eq!(exchange_api_stream(kind), StreamRequest::LegacyDefault);
        }
        for kind in [DeviceKind::Cpu, DeviceKind::CudaHost] {
            assert!(!ordered_by_streams(kind));
            assert_eq!(exchange_api_stream(kind), StreamRequest::NoSync);
        }
    }

    #[test]
    fn a_kept_producer_stream_is_recorded_at_each_export() {
        assert_eq!(
            producer_ready(Some(0x7f00), true),
            ProducerReady::AtEachExport(0x7f00)
        );
        assert_eq!(
            producer_ready(Some(1), true),
            ProducerReady::AtEachExport(1)
        );
        assert_eq!(
            producer_ready(Some(0x7f00), false),
            ProducerReady::AtShare,
            "a stream nobody keeps alive is used once, at the share (C callers)"
        );
        assert_eq!(producer_ready(None, true), ProducerReady::AtShare);
    }

    #[test]
    fn a_host_copy_of_memory_device_work_writes_waits_for_that_work() {
        assert!(host_copy_after_producer(DeviceKind::CudaManaged));
        assert!(host_copy_after_producer(DeviceKind::Cuda));
        assert!(!host_copy_after_producer(DeviceKind::Cpu));
        assert!(
            !host_copy_after_producer(DeviceKind::CudaHost),
            "no ready event is recorded for pinned memory"
        );
    }
    use crate::error::ErrorKind;

    const CUDA: Device = Device {
        kind: DeviceKind::Cuda,
        id: 0,
    };

    fn request(version: VersionRequest) -> ExportRequest {
        ExportRequest {
            stream: StreamRequest::Omitted,
            version,
            device: None,
            copy: None,
        }
    }

    fn source(device: Device, element: ElementType, read_only: bool) -> Source {
        Source {
            device,
            element,
            read_only,
        }
    }

    #[test]
    fn a_read_only_host_tensor_is_shared_read_only_or_copied_writable() {
        let src = source(Device::CPU, ElementType::Float32, true);
        let legacy = request(VersionRequest::Legacy);
        let refused = plan_export(&src, &legacy).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::BufferRefusal, "{refused}");
        let copied = plan_export(
            &src,
            &ExportRequest {
                copy: Some(true),
                ..legacy
            },
        )
        .unwrap();
        assert_eq!(
            (copied.memory, copied.read_only, copied.is_copied),
            (Memory::HostCopy, false, true)
        );
        assert_eq!(copied.capsule, Capsule::Legacy);
        let versioned =
            plan_export(&src, &request(VersionRequest::Versioned { minor: 7 })).unwrap();
        assert_eq!(
            versioned,
            ExportPlan {
                memory: Memory::Shared {
                    consumer_stream: None
                },
                device: Device::CPU,
                read_only: true,
                is_copied: false,
                capsule: Capsule::Versioned { minor: 3 },
            }
        );
    }

    #[test]
    fn cuda_tensors_order_the_consumers_stream_or_copy_to_the_host() {
        let src = source(CUDA, ElementType::Float16, false);
        let mut req = request(VersionRequest::Versioned { minor: 3 });
        req.stream = StreamRequest::Handle(0x1000);
        let shared = plan_export(&src, &req).unwrap();
        assert_eq!(
            shared.memory,
            Memory::Shared {
                consumer_stream: Some(0x1000)
            }
        );
        req.device = Some(Device::CPU);
        for stream in [StreamRequest::Handle(0x1000), StreamRequest::LegacyDefault] {
            let refused = plan_export(&src, &ExportRequest { stream, ..req });
            assert!(
                matches!(refused, Err(Error::StreamOnCpu { .. })),
                "a host copy takes no stream: {refused:?}"
            );
        }
        req.device = None;
        req.stream = StreamRequest::NoSync;
        assert!(!plan_export(&src, &req).unwrap().memory.needs_driver());
        req.device = Some(Device::CPU);
        let host = plan_export(&src, &req).unwrap();
        assert_eq!(
            (host.memory, host.device, host.is_copied),
            (Memory::DeviceToHost, Device::CPU, true)
        );
        req.copy = Some(false);
        assert_eq!(
            plan_export(&src, &req).unwrap_err().kind(),
            ErrorKind::BufferRefusal
        );
        req.device = None;
        req.copy = Some(true);
        assert_eq!(
            plan_export(&src, &req).unwrap_err().kind(),
            ErrorKind::BufferRefusal
        );
    }

    #[test]
    fn a_cpu_tensor_refuses_streams_and_foreign_devices() {
        let src = source(Device::CPU, ElementType::UInt8, false);
        let mut req = request(VersionRequest::Legacy);
        req.stream = StreamRequest::LegacyDefault;
        assert_eq!(
            plan_export(&src, &req).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        req.stream = StreamRequest::NoSync;
        req.device = Some(CUDA);
        assert_eq!(
            plan_export(&src, &req).unwrap_err().kind(),
            ErrorKind::BufferRefusal
        );
    }

    #[test]
    fn copies_of_memory_the_host_cannot_read_are_refused_up_front() {
        let rocm = Device::from_dlpack(dlpark::ffi::DLDevice {
            device_type: dlpark::ffi::DLDeviceType(10),
            device_id: 0,
        });
        let src = source(rocm, ElementType::Float32, false);
        let mut req = request(VersionRequest::Versioned { minor: 3 });
        assert!(plan_export(&src, &req).is_ok());
        req.copy = Some(true);
        let refused = plan_export(&src, &req).unwrap_err();
        assert!(
            matches!(refused, Error::UnsupportedDevice { .. }),
            "{refused:?}"
        );
        assert_eq!(refused.kind(), ErrorKind::BufferRefusal);
    }

    /// Found by `fuzz/fuzz_targets/export_request.rs`: a copy of managed memory asked for on
    /// its own device (`dl_device=(CUDAManaged, 0), copy=True`) was planned as host memory,
    /// and the capsule said CPU.
    #[test]
    fn an_explicit_dl_device_is_what_the_tensor_says_or_a_refusal() {
        for kind in [DeviceKind::CudaManaged, DeviceKind::CudaHost] {
            let own = Device { kind, id: 0 };
            let src = source(own, ElementType::Float32, false);
            let mut req = request(VersionRequest::Versioned { minor: 3 });
            req.device = Some(own);
            req.copy = Some(true);
            let refused = plan_export(&src, &req).unwrap_err();
            assert_eq!(refused.kind(), ErrorKind::BufferRefusal, "{refused}");
            assert!(
                refused.to_string().contains("dl_device=(CPU, 0)"),
                "{refused}"
            );
            // The way out: the host, copied.
            req.device = Some(Device::CPU);
            for copy in [None, Some(true)] {
                req.copy = copy;
                let plan = plan_export(&src, &req).unwrap();
                assert_eq!((plan.memory, plan.device), (Memory::HostCopy, Device::CPU));
            }
            req.copy = Some(false);
            assert_eq!(
                plan_export(&src, &req).unwrap_err().kind(),
                ErrorKind::BufferRefusal
            );
            // No dl_device: a host copy, as before.
            req.device = None;
            req.copy = Some(true);
            assert_eq!(plan_export(&src, &req).unwrap().memory, Memory::HostCopy);
            // Shared: the device itself.
            req.copy = None;
            req.device = Some(own);
            let shared = plan_export(&src, &req).unwrap();
            assert_eq!(shared.device, own);
        }
    }

    #[test]
    fn the_host_is_cpu_0_and_a_copy_is_never_labelled_otherwise() {
        for kind in [
            DeviceKind::Cuda,
            DeviceKind::CudaManaged,
            DeviceKind::CudaHost,
        ] {
            let src = source(Device { kind, id: 0 }, ElementType::Float32, false);
            let mut req = request(VersionRequest::Versioned { minor: 3 });
            req.device = Some(Device {
                kind: DeviceKind::Cpu,
                id: 1,
            });
            let refused = plan_export(&src, &req).unwrap_err();
            assert_eq!(
                refused.kind(),
                ErrorKind::BufferRefusal,
                "{kind:?}: {refused}"
            );
            assert!(
                refused.to_string().contains("dl_device=(CPU, 0)"),
                "{refused}"
            );
        }
    }

    #[test]
    fn streams_are_ordered_for_managed_memory_and_refused_where_they_cannot_be() {
        let handle = StreamRequest::Handle(0x1000);
        let managed = Device {
            kind: DeviceKind::CudaManaged,
            id: 1,
        };
        let mut req = request(VersionRequest::Versioned { minor: 3 });
        req.stream = handle;
        let plan = plan_export(&source(managed, ElementType::Float32, false), &req).unwrap();
        assert_eq!(
            plan.memory,
            Memory::Shared {
                consumer_stream: Some(0x1000)
            }
        );
        req.stream = StreamRequest::Omitted;
        let plan = plan_export(&source(managed, ElementType::Float32, false), &req).unwrap();
        assert_eq!(
            plan.memory,
            Memory::Shared {
                consumer_stream: Some(1)
            },
            "no stream means the legacy default stream, as for CUDA memory"
        );
        for kind in [DeviceKind::CudaHost, DeviceKind::Other(10)] {
            let src = source(Device { kind, id: 0 }, ElementType::Float32, false);
            for stream in [handle, StreamRequest::LegacyDefault] {
                req.stream = stream;
                let refused = plan_export(&src, &req).unwrap_err();
                assert_eq!(
                    refused.kind(),
                    ErrorKind::BufferRefusal,
                    "{kind:?}: {refused}"
                );
                assert!(
                    refused.to_string().contains("stream=None or -1"),
                    "{refused}"
                );
            }
            for quiet in [StreamRequest::Omitted, StreamRequest::NoSync] {
                req.stream = quiet;
                let plan = plan_export(&src, &req).unwrap();
                assert_eq!(
                    plan.memory,
                    Memory::Shared {
                        consumer_stream: None
                    }
                );
            }
        }
    }

    #[test]
    fn capsules_claim_what_their_element_type_needs() {
        let fp4 = ElementType::RawBytes { code: 17, bits: 4 };
        let src = source(Device::CPU, fp4, false);
        assert_eq!(
            plan_export(&src, &request(VersionRequest::Legacy))
                .unwrap_err()
                .kind(),
            ErrorKind::BufferRefusal
        );
        assert_eq!(
            plan_export(&src, &request(VersionRequest::Versioned { minor: 0 }))
                .unwrap_err()
                .kind(),
            ErrorKind::BufferRefusal
        );
        assert_eq!(
            plan_export(&src, &request(VersionRequest::Versioned { minor: 1 }))
                .unwrap()
                .capsule,
            Capsule::Versioned { minor: 1 }
        );
    }
}
