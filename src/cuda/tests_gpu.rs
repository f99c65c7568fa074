//! The CUDA paths against a real driver and device 0: pointer checks on memory the driver
//! allocated, stream ordering between two created streams, stream descriptions, device →
//! host copies, and releases that wait for their consumer's streams (also when the stream is
//! destroyed right after the release, as CUDA.jl destroys a finished task's stream).
//!
//! Every test here is `#[ignore = "needs a CUDA driver"]`: CI (no driver) lists them as
//! ignored, and the GPU run (`scripts/gpu_check.sh` stages this test binary, `test/gpu/run.sh`
//! runs it with `--ignored`) executes them. Each starts with [`device`], which fails rather
//! than returns when the driver is missing, so a run of `--ignored` without a GPU fails
//! loudly instead of passing.
//!
//! Memory and streams come from cudarc's safe layer (`CudaContext` retains the same primary
//! context our functions push), so that what the tests hand to our code is owned and freed by
//! something other than the code under test.

use super::order::order_streams;
use super::pointer::{check_pointer, pointer_info};
use super::stream_info::describe_stream;
use super::to_host::copy_to_host;
use super::{DeviceContext, driver, driver_available};
use crate::descriptor::TensorDescriptor;
use crate::device::{Device, DeviceKind};
use crate::dtype::ElementType;
use crate::error::Error;
use cudarc::driver::{CudaContext, CudaStream, DevicePtr, result, sys};
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Graph captures, several contexts, and the primary-context question (issue 38).
mod capture;

const DEVICE_MEMORY: u32 = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32;
const HOST_MEMORY: u32 = sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32;

/// Device 0's primary context, current on this thread. Fails (never returns early) without a
/// driver: cudarc's safe layer panics on a missing library, so the driver is checked first.
fn device() -> Arc<CudaContext> {
    driver().expect("needs a CUDA driver (libcuda) and a device");
    CudaContext::new(0).expect("CUDA device 0")
}

/// A Float32 descriptor of `shape`/`strides` (elements) at `address` on `device`.
fn on(device: Device, address: u64, shape: &[i64], strides: &[i64]) -> TensorDescriptor {
    crate::test_support::descriptor_on(
        device,
        address as usize,
        shape,
        strides,
        ElementType::Float32,
    )
}

const CUDA0: Device = Device {
    kind: DeviceKind::Cuda,
    id: 0,
};

/// `bytes` of device memory from `cuMemAlloc` (not the stream-ordered allocator, so that it
/// belongs to a context), freed on drop.
struct DeviceAllocation(sys::CUdeviceptr);

impl DeviceAllocation {
    fn new(context: &Arc<CudaContext>, bytes: usize) -> Self {
        context.bind_to_thread().unwrap();
        // SAFETY: a context is current; the memory is only handed to pointer queries.
        Self(unsafe { result::malloc_sync(bytes) }.expect("cuMemAlloc"))
    }
}

impl Drop for DeviceAllocation {
    fn drop(&mut self) {
        // SAFETY: allocated by `malloc_sync` in `new`, freed once; errors are ignored in Drop.
        let _ = unsafe { result::free_sync(self.0) };
    }
}

#[test]
#[ignore = "needs a CUDA driver"]
fn with_a_driver_the_entry_points_initialise() {
    let _context = device();
    assert!(driver_available());
    drop(DeviceContext::enter(0).expect("device 0's primary context"));
    let missing = DeviceContext::enter(1 << 20);
    assert!(
        matches!(
            missing,
            Err(Error::Cuda {
                call: "cuDeviceGet",
                ..
            })
        ),
        "no device has ordinal 2^20"
    );
}

#[test]
#[ignore = "needs a CUDA driver"]
fn pointer_checks_accept_real_device_memory_and_catch_false_claims() {
    let context = device();
    let memory = DeviceAllocation::new(&context, 64 * 4);

    let info = pointer_info(memory.0 as usize, 0).unwrap();
    assert_eq!(info.memory_type, DEVICE_MEMORY, "{info:?}");
    assert_eq!(info.device_ordinal, 0, "{info:?}");
    assert!(!info.managed, "{info:?}");
    assert_eq!(
        info.context,
        context.cu_ctx() as usize,
        "the primary context"
    );

    // Any address inside the allocation is known, not only its start.
    let inside = on(CUDA0, memory.0 + 16 * 4, &[4, 4], &[1, 4]);
    assert_eq!(check_pointer(&inside).unwrap(), info);

    // The same memory claimed as something else is refused, naming what was claimed.
    let as_pinned = on(
        Device {
            kind: DeviceKind::CudaHost,
            id: 0,
        },
        memory.0,
        &[64],
        &[1],
    );
    let err = check_pointer(&as_pinned).unwrap_err().to_string();
    assert!(err.contains("page-locked host memory"), "{err}");
    let as_managed = on(
        Device {
            kind: DeviceKind::CudaManaged,
            id: 0,
        },
        memory.0,
        &[64],
        &[1],
    );
    let err = check_pointer(&as_managed).unwrap_err().to_string();
    assert!(err.contains("managed"), "{err}");

    // Host memory the driver never saw, claimed to be on the device.
    let host = [0f32; 16];
    let err = check_pointer(&on(CUDA0, host.as_ptr() as u64, &[16], &[1])).unwrap_err();
    assert!(matches!(err, Error::CudaPointerUnknown { .. }), "{err}");

    // A device ordinal that does not exist.
    let elsewhere = on(
        Device {
            kind: DeviceKind::Cuda,
            id: 1 << 20,
        },
        memory.0,
        &[64],
        &[1],
    );
    assert!(matches!(
        check_pointer(&elsewhere),
        Err(Error::CudaPointerUnknown { .. })
    ));
}

#[test]
#[ignore = "needs a CUDA driver"]
fn pointer_checks_on_stream_ordered_pinned_and_managed_memory() {
    let context = device();
    let stream = context.default_stream();

    // cudarc allocates from the stream-ordered pool where the device supports it (as torch
    // and CuPy do): device memory of device 0, with or without a context.
    let slice = stream.alloc_zeros::<f32>(32).unwrap();
    let (address, _read) = slice.device_ptr(&stream);
    let info = check_pointer(&on(CUDA0, address, &[32], &[1])).unwrap();
    assert_eq!((info.memory_type, info.device_ordinal), (DEVICE_MEMORY, 0));

    // Page-locked host memory is what kDLCUDAHost claims.
    // SAFETY: the memory is only handed to pointer queries, never read uninitialised.
    let pinned = unsafe { context.alloc_pinned::<f32>(32) }.unwrap();
    let host_address = pinned.as_ptr().unwrap() as u64;
    let pinned_device = Device {
        kind: DeviceKind::CudaHost,
        id: 0,
    };
    let info = check_pointer(&on(pinned_device, host_address, &[32], &[1])).unwrap();
    assert_eq!(info.memory_type, HOST_MEMORY, "{info:?}");
    let err = check_pointer(&on(CUDA0, host_address, &[32], &[1])).unwrap_err();
    assert!(err.to_string().contains("device memory"), "{err}");

    // Managed memory is what kDLCUDAManaged claims.
    // SAFETY: as above.
    let unified = unsafe { context.alloc_unified::<f32>(32, true) }.unwrap();
    let (managed_address, _read) = unified.device_ptr(&stream);
    let managed_device = Device {
        kind: DeviceKind::CudaManaged,
        id: 0,
    };
    let info = check_pointer(&on(managed_device, managed_address, &[32], &[1])).unwrap();
    assert!(info.managed, "{info:?}");
}

/// Holds a stream (as a host function enqueued on it) until `open` is set, or 10 s pass.
struct Gate {
    open: AtomicBool,
    timed_out: AtomicBool,
}

unsafe extern "C" fn hold_until_open(gate: *mut c_void) {
    // SAFETY: `gate` is the `Gate` the test passed, which outlives the stream's work (the test
    // synchronises the stream before dropping it). No CUDA call is made here.
    let gate = unsafe { &*gate.cast::<Gate>() };
    let start = Instant::now();
    while !gate.open.load(Ordering::SeqCst) {
        if start.elapsed() > Duration::from_secs(10) {
            gate.timed_out.store(true, Ordering::SeqCst);
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Enqueues a closed gate on `stream`: the stream is busy until the gate is opened.
fn close(stream: &CudaStream, gate: &Gate) {
    // SAFETY: the stream is live; `gate` outlives the enqueued call (see `hold_until_open`).
    unsafe {
        result::stream::launch_host_function(
            stream.cu_stream(),
            hold_until_open,
            std::ptr::from_ref(gate).cast_mut().cast(),
        )
    }
    .expect("cuLaunchHostFunc");
}

/// Whether everything enqueued on `stream` so far completes within 200 ms.
fn completes_soon(context: &Arc<CudaContext>, stream: &CudaStream) -> bool {
    let marker = context.new_event(None).unwrap();
    marker.record(stream).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    marker.try_is_complete().unwrap()
}

#[test]
#[ignore = "needs a CUDA driver"]
fn order_streams_makes_the_consumer_wait_for_the_producer_and_not_the_host() {
    let context = device();
    let producer = context.new_stream().unwrap();
    let consumer = context.new_stream().unwrap();
    let gate = Gate {
        open: AtomicBool::new(false),
        timed_out: AtomicBool::new(false),
    };
    close(&producer, &gate);

    // Control: unordered, the consumer does not wait for the busy producer.
    assert!(
        completes_soon(&context, &consumer),
        "streams are independent"
    );

    let started = Instant::now();
    // SAFETY: both are live streams of device 0.
    let ordered = unsafe {
        order_streams(
            0,
            producer.cu_stream() as usize,
            consumer.cu_stream() as usize,
        )
    };
    let host = started.elapsed();
    let waits = !completes_soon(&context, &consumer);
    gate.open.store(true, Ordering::SeqCst);
    consumer.synchronize().unwrap();
    producer.synchronize().unwrap();

    ordered.unwrap();
    assert!(
        !gate.timed_out.load(Ordering::SeqCst),
        "order_streams blocked the host until the producer's gate timed out"
    );
    assert!(host < Duration::from_secs(1), "the host waited {host:?}");
    assert!(waits, "the consumer ran on while the producer was busy");
    assert!(
        completes_soon(&context, &consumer),
        "and ran once it was done"
    );

    // Equal streams need nothing; the default-stream aliases are accepted as producers.
    let stream = consumer.cu_stream() as usize;
    // SAFETY: a live stream of device 0, and the legacy / per-thread default aliases.
    unsafe {
        order_streams(0, stream, stream).unwrap();
        order_streams(0, 1, stream).unwrap();
        order_streams(0, 2, stream).unwrap();
    }
    consumer.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA driver"]
fn describe_stream_reports_a_created_streams_context_device_flags_and_priority() {
    let context = device();
    let (_least, greatest) = result::stream::get_priority_range().unwrap();
    let stream = context.new_stream_with_priority(greatest).unwrap();
    // SAFETY: a live stream.
    let d = unsafe { describe_stream(stream.cu_stream() as usize) }.unwrap();
    assert_eq!(d.context, context.cu_ctx() as usize, "{d:?}");
    assert_eq!(d.device, 0, "{d:?}");
    let non_blocking = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
    assert_eq!(
        d.flags & non_blocking,
        non_blocking,
        "cudarc streams are non-blocking"
    );
    assert_eq!(d.priority, greatest, "{d:?}");

    let plain = context.new_stream().unwrap();
    // SAFETY: a live stream.
    let p = unsafe { describe_stream(plain.cu_stream() as usize) }.unwrap();
    assert_eq!(
        (p.context, p.device, p.priority),
        (d.context, 0, 0),
        "{p:?}"
    );

    // The aliases stay refused with a driver present.
    for alias in [0, 1, 2] {
        // SAFETY: refused before any driver call.
        let err = unsafe { describe_stream(alias) }.unwrap_err().to_string();
        assert!(err.contains("default-stream alias"), "{err}");
    }
}

#[test]
#[ignore = "needs a CUDA driver"]
fn copy_to_host_brings_compact_and_strided_device_tensors_back() {
    let context = device();
    let stream = context.new_stream().unwrap();
    let values: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let slice = stream.clone_htod(&values).unwrap();
    let (address, _read) = slice.device_ptr(&stream);
    let handle = stream.cu_stream() as usize;

    // SAFETY: a live stream of device 0.
    let ready = unsafe { super::order::ReadyEvent::record(0, handle) }.unwrap();
    let read_back = |d: &TensorDescriptor| {
        // SAFETY: `d` addresses `slice`, which lives on device 0.
        let copy = unsafe { copy_to_host(d, Some(&ready)) }.unwrap();
        assert_eq!(copy.descriptor.device(), Device::CPU);
        assert!(copy.descriptor.is_copied() && copy.descriptor.is_row_major_compact());
        let bytes = copy.buffer.as_slice();
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
            .collect::<Vec<_>>()
    };

    // Row-major 3×4: the bytes as they are.
    assert_eq!(read_back(&on(CUDA0, address, &[3, 4], &[4, 1])), values);
    // Its transpose (4×3): compacted on the host.
    assert_eq!(
        read_back(&on(CUDA0, address, &[4, 3], &[1, 4])),
        vec![0., 4., 8., 1., 5., 9., 2., 6., 10., 3., 7., 11.]
    );
    // Every other element, backwards from the last: a negative stride below the start.
    assert_eq!(
        read_back(&on(CUDA0, address + 11 * 4, &[6], &[-2])),
        vec![11., 9., 7., 5., 3., 1.]
    );
}

/// A tensor over `memory` (64 Float32 on device 0) whose owner counts releases, remembering
/// `consumer` as its consumer's stream.
fn imported_on_device(
    memory: &DeviceAllocation,
    consumer: crate::stream::StreamRequest,
) -> (crate::ImportedTensor, Arc<std::sync::atomic::AtomicUsize>) {
    let spec = on(CUDA0, memory.0, &[64], &[1]);
    let (owner, count) = crate::test_support::CountingOwner::new();
    let managed = crate::export::export_versioned(&spec, owner, 3).unwrap();
    let mut tensor = crate::ImportedTensor::new(crate::ManagedTensor::Versioned(managed)).unwrap();
    // SAFETY: the streams the tests name are live streams of device 0 (or default streams)
    // that outlive the tensor's release.
    unsafe { tensor.set_consumer_stream(consumer) };
    (tensor, count)
}

/// Opens `gate` after `delay`, from another thread.
fn open_later(gate: &Arc<Gate>, delay: Duration) -> std::thread::JoinHandle<()> {
    let gate = Arc::clone(gate);
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        gate.open.store(true, Ordering::SeqCst);
    })
}

/// How long a gated kernel is held closed by [`wait_past_the_gate`]; a wait that returns much
/// sooner did not wait for it.
const GATE_HELD: Duration = Duration::from_millis(300);
const WAITED_AT_LEAST: Duration = Duration::from_millis(250);

/// Runs `wait` while `gate` stays closed for [`GATE_HELD`], then opens it: what `wait` returned
/// and how long it took; asserts that the kernel saw the gate open rather than timing out.
fn wait_past_the_gate<T>(gate: &Arc<Gate>, wait: impl FnOnce() -> T) -> (T, Duration) {
    let opener = open_later(gate, GATE_HELD);
    let started = Instant::now();
    let outcome = wait();
    let waited = started.elapsed();
    opener.join().unwrap();
    assert!(!gate.timed_out.load(Ordering::SeqCst));
    (outcome, waited)
}

fn closed_gate() -> Arc<Gate> {
    Arc::new(Gate {
        open: AtomicBool::new(false),
        timed_out: AtomicBool::new(false),
    })
}

#[test]
#[ignore = "needs a CUDA driver"]
fn a_release_waits_on_the_host_for_the_consumers_stream_then_runs_the_deleter() {
    use crate::test_support::CountingOwner;
    let context = device();
    let consumer = context.new_stream().unwrap();
    let memory = DeviceAllocation::new(&context, 64 * 4);
    let (tensor, count) = imported_on_device(
        &memory,
        crate::stream::StreamRequest::Handle(consumer.cu_stream() as usize),
    );
    let gate = closed_gate();
    close(&consumer, &gate);

    let mut release = tensor.into_release();
    assert!(release.is_ordered());
    assert!(!release.is_ready(), "the consumer's stream is still busy");
    assert_eq!(CountingOwner::releases(&count), 0);
    let (outcome, waited) = wait_past_the_gate(&gate, || release.complete());
    outcome.unwrap();
    assert_eq!(CountingOwner::releases(&count), 1);
    consumer.synchronize().unwrap();
    assert!(
        waited >= WAITED_AT_LEAST,
        "the deleter ran after {waited:?}, before the consumer's work was done"
    );
}

#[test]
#[ignore = "needs a CUDA driver"]
fn a_release_after_the_callers_stream_waits_for_it_too_and_a_queue_can_ask_without_waiting() {
    use crate::test_support::CountingOwner;
    let context = device();
    let consumer = context.new_stream().unwrap();
    let caller = context.new_stream().unwrap();
    let memory = DeviceAllocation::new(&context, 64 * 4);
    let (tensor, count) = imported_on_device(
        &memory,
        crate::stream::StreamRequest::Handle(consumer.cu_stream() as usize),
    );
    let gate = closed_gate();
    close(&caller, &gate);

    // SAFETY: a live stream of device 0.
    let mut release = unsafe { tensor.into_release_after(caller.cu_stream() as usize) };
    // Asking never waits: the host returns while the caller's stream is busy.
    let started = Instant::now();
    assert!(!release.is_ready(), "the caller's stream is still busy");
    assert!(started.elapsed() < Duration::from_millis(100));
    gate.open.store(true, Ordering::SeqCst);
    caller.synchronize().unwrap();
    assert!(release.is_ready());
    assert_eq!(CountingOwner::releases(&count), 0);
    release.complete().unwrap();
    assert_eq!(CountingOwner::releases(&count), 1);
    assert!(!gate.timed_out.load(Ordering::SeqCst));
}

#[test]
#[ignore = "needs a CUDA driver"]
fn a_per_thread_default_consumer_is_ordered_from_another_thread() {
    use crate::test_support::CountingOwner;
    let context = device();
    let memory = DeviceAllocation::new(&context, 64 * 4);
    let gate = closed_gate();
    // The consumer's work: a gate on the importing thread's per-thread default stream. That
    // thread stays alive (so does its per-thread stream) until the release is done.
    let (enqueued, on_the_stream) = std::sync::mpsc::channel();
    let (released, done) = std::sync::mpsc::channel::<()>();
    let importer = {
        let (context, gate) = (Arc::clone(&context), Arc::clone(&gate));
        std::thread::spawn(move || {
            context.bind_to_thread().unwrap();
            // SAFETY: the per-thread default stream of this thread; `gate` outlives the work
            // (the test waits for the release, which waits for the gate).
            unsafe {
                result::stream::launch_host_function(
                    2 as sys::CUstream,
                    hold_until_open,
                    Arc::as_ptr(&gate).cast_mut().cast(),
                )
            }
            .expect("cuLaunchHostFunc on the per-thread default stream");
            enqueued.send(()).unwrap();
            done.recv().unwrap();
        })
    };
    on_the_stream.recv().unwrap();
    let (tensor, count) =
        imported_on_device(&memory, crate::stream::StreamRequest::PerThreadDefault);
    assert_eq!(tensor.consumer_stream(), Some(2));
    // Released on this thread, whose own per-thread stream is idle.
    let mut release = tensor.into_release();
    assert!(
        !release.is_ready(),
        "recorded on the legacy default stream, the fence waits for the other thread's work"
    );
    let opener = open_later(&gate, Duration::from_millis(200));
    release.complete().unwrap();
    assert_eq!(CountingOwner::releases(&count), 1);
    opener.join().unwrap();
    released.send(()).unwrap();
    importer.join().unwrap();
    assert!(!gate.timed_out.load(Ordering::SeqCst));
}

/// What [`destroy_stream`] did: 0 not called, 1 the destroy failed, 2 the stream was destroyed.
static DESTROYED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// [`super::fence::RECORDS_TRIED_HERE`] when [`destroy_stream`] ran.
static TRIED_AT_DESTROY: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A keeper's give-back that destroys the stream whose handle is its token, as CUDA.jl's
/// `CuStream` finalizer does once nothing roots the stream any more.
fn destroy_stream(handle: u64) {
    // How far this thread's recording had got when the stream went: a destroyed stream with
    // pending work may still accept a record, so the order is checked here, not by a failure.
    TRIED_AT_DESTROY.store(
        super::fence::RECORDS_TRIED_HERE.get(),
        std::sync::atomic::Ordering::SeqCst,
    );
    let _context = DeviceContext::enter(0).expect("device 0's primary context");
    // SAFETY: the stream the test created for this keeper, destroyed once, here.
    let destroyed = unsafe { result::stream::destroy(handle as sys::CUstream) };
    DESTROYED.store(if destroyed.is_ok() { 2 } else { 1 }, Ordering::SeqCst);
}

#[test]
#[ignore = "needs a CUDA driver"]
fn a_release_records_on_the_consumers_stream_before_its_keeper_lets_it_be_destroyed() {
    use crate::test_support::CountingOwner;
    let context = device();
    context.bind_to_thread().unwrap();
    let stream = result::stream::create(result::stream::StreamKind::NonBlocking).unwrap();
    let memory = DeviceAllocation::new(&context, 64 * 4);
    let (mut tensor, count) = imported_on_device(
        &memory,
        crate::stream::StreamRequest::Handle(stream as usize),
    );
    tensor.keep_consumer_stream(crate::release::StreamKeeper::new(
        stream as u64,
        destroy_stream,
    ));
    let gate = closed_gate();
    // SAFETY: a live stream; `gate` outlives the enqueued call (the release waits for it).
    unsafe {
        result::stream::launch_host_function(
            stream,
            hold_until_open,
            Arc::as_ptr(&gate).cast_mut().cast(),
        )
    }
    .expect("cuLaunchHostFunc");

    let tried_before = super::fence::RECORDS_TRIED_HERE.get();
    let mut release = tensor.into_release();
    assert_eq!(
        DESTROYED.load(Ordering::SeqCst),
        2,
        "the keeper was given back with the release, and the stream destroyed with work pending"
    );
    assert_eq!(
        TRIED_AT_DESTROY.load(Ordering::SeqCst),
        tried_before + 1,
        "the stream was destroyed before the release recorded its event there"
    );
    assert!(
        !release.is_ready(),
        "the event was recorded before the stream was destroyed, and waits for its work"
    );
    assert_eq!(CountingOwner::releases(&count), 0);
    let (outcome, waited) = wait_past_the_gate(&gate, || release.complete());
    outcome.expect("no driver call failed: the stream was live when recorded on");
    assert_eq!(CountingOwner::releases(&count), 1);
    assert!(
        waited >= WAITED_AT_LEAST,
        "the deleter ran after {waited:?}, before the destroyed stream's work was done"
    );
}

/// A user context of device 0 (not the primary one) with a non-blocking stream in it; the
/// context is popped again, so that it is current nowhere. Destroyed on drop.
struct UserContextStream {
    context: sys::CUcontext,
    stream: sys::CUstream,
}

impl UserContextStream {
    fn new() -> Self {
        let device = result::device::get(0).unwrap();
        let mut context: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer valid; cuCtxCreate makes the new context current on this thread.
        let status = unsafe { sys::cuCtxCreate_v2(&mut context, 0, device) };
        assert_eq!(status, sys::CUresult::CUDA_SUCCESS, "cuCtxCreate");
        let mut stream: sys::CUstream = std::ptr::null_mut();
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
        // SAFETY: out-pointer valid; the user context is current.
        let status = unsafe { sys::cuStreamCreate(&mut stream, flags) };
        assert_eq!(status, sys::CUresult::CUDA_SUCCESS, "cuStreamCreate");
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: pops the context cuCtxCreate pushed.
        let _ = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
        Self { context, stream }
    }
}

impl Drop for UserContextStream {
    fn drop(&mut self) {
        // SAFETY: our stream and context, destroyed once, the stream with its context current.
        unsafe {
            let _ = sys::cuCtxPushCurrent_v2(self.context);
            let _ = sys::cuStreamDestroy_v2(self.stream);
            let mut popped: sys::CUcontext = std::ptr::null_mut();
            let _ = sys::cuCtxPopCurrent_v2(&mut popped);
            let _ = sys::cuCtxDestroy_v2(self.context);
        }
    }
}

#[test]
#[ignore = "needs a CUDA driver"]
fn a_fence_records_in_the_context_of_a_user_context_stream() {
    use super::fence::{FenceStream, ReleaseFence};
    let _primary = device();
    let user = UserContextStream::new();
    let streams = vec![FenceStream {
        handle: user.stream as usize,
        alias_context: None,
    }];
    // SAFETY: a live stream, outliving the fence.
    let (mut fence, recorded) = unsafe { ReleaseFence::record(0, streams) };
    recorded.expect("an event in the stream's own context (the primary one is refused)");
    assert!(fence.orders_anything() && fence.can_wait());
    fence.wait().unwrap();
}

#[test]
#[ignore = "needs a CUDA driver"]
fn an_alias_fence_holds_the_primary_context_for_its_life() {
    use super::context::HeldContext;
    use super::fence::{FenceStream, ReleaseFence};
    let context = device();
    let streams = vec![FenceStream {
        handle: 1,
        alias_context: HeldContext::current().unwrap(),
    }];
    // SAFETY: the legacy default stream of a current context.
    let (mut fence, recorded) = unsafe { ReleaseFence::record(0, streams) };
    recorded.unwrap();
    drop(context);
    let mut flags = 0u32;
    let mut active = 0i32;
    // SAFETY: out-pointers valid; device 0 exists.
    let status = unsafe { sys::cuDevicePrimaryCtxGetState(0, &mut flags, &mut active) };
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(
        active, 1,
        "the fence's retain keeps the primary context alive"
    );
    fence.wait().unwrap();
}

#[test]
#[ignore = "needs a CUDA driver"]
fn a_capturing_stream_defers_its_event_and_queries_do_not_break_a_global_capture() {
    use super::fence::{FenceStream, ReleaseFence};
    let context = device();
    let captured = context.new_stream().unwrap();
    let other = context.new_stream().unwrap();
    let fence_on = |stream: &CudaStream| {
        let streams = vec![FenceStream {
            handle: stream.cu_stream() as usize,
            alias_context: None,
        }];
        // SAFETY: live streams of device 0, outliving the fences.
        let (fence, recorded) = unsafe { ReleaseFence::record(0, streams) };
        recorded.unwrap();
        fence
    };
    let mut elsewhere = fence_on(&other);
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL;
    // SAFETY: a live stream of the current context.
    let status = unsafe { sys::cuStreamBeginCapture_v2(captured.cu_stream(), mode) };
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
    let mut during = fence_on(&captured);
    assert!(
        !during.is_complete(),
        "a capturing consumer stream is not ready"
    );
    assert!(!during.can_wait());
    // A query of an unrelated fence while a global-mode capture runs (relaxed for us).
    let _ = elsewhere.is_complete();
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: ends the capture begun above on the same stream.
    let status = unsafe { sys::cuStreamEndCapture(captured.cu_stream(), &mut graph) };
    assert_eq!(
        status,
        sys::CUresult::CUDA_SUCCESS,
        "our calls invalidated the capture"
    );
    assert!(during.can_wait(), "recorded once the capture has ended");
    during.wait().unwrap();
    elsewhere.wait().unwrap();
    // SAFETY: the graph the capture made, destroyed once.
    let _ = unsafe { sys::cuGraphDestroy(graph) };
}

#[test]
#[ignore = "needs a CUDA driver"]
fn an_exports_ready_event_outlives_its_producers_stream() {
    use super::order::ReadyEvent;
    let context = device();
    let consumer = context.new_stream().unwrap();
    let mut producer: sys::CUstream = std::ptr::null_mut();
    let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
    context.bind_to_thread().unwrap();
    // SAFETY: out-pointer valid; device 0's primary context is current.
    let status = unsafe { sys::cuStreamCreate(&mut producer, flags) };
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
    let gate = closed_gate();
    // SAFETY: the stream is live; `gate` outlives the enqueued call (synchronised below).
    unsafe {
        result::stream::launch_host_function(
            producer,
            hold_until_open,
            std::ptr::from_ref(&*gate).cast_mut().cast(),
        )
    }
    .unwrap();
    // SAFETY: a live stream of device 0.
    let ready = unsafe { ReadyEvent::record(0, producer as usize) }.unwrap();
    // The producer's stream goes away (its pending work still runs), as a Julia task's does.
    // SAFETY: our stream, destroyed once.
    let _ = unsafe { sys::cuStreamDestroy_v2(producer) };
    // SAFETY: a live stream of device 0.
    unsafe { ready.order_before(consumer.cu_stream() as usize) }.unwrap();
    assert!(
        !completes_soon(&context, &consumer),
        "the consumer waits for the producer"
    );
    gate.open.store(true, Ordering::SeqCst);
    consumer.synchronize().unwrap();
    assert!(!gate.timed_out.load(Ordering::SeqCst));
}

#[test]
#[ignore = "needs a CUDA driver"]
fn managed_memory_passes_the_pointer_check_as_kdlcuda() {
    let context = device();
    let stream = context.default_stream();
    // SAFETY: only handed to pointer queries.
    let unified = unsafe { context.alloc_unified::<f32>(32, true) }.unwrap();
    let (address, _read) = unified.device_ptr(&stream);
    let info = check_pointer(&on(CUDA0, address, &[32], &[1])).unwrap();
    assert!(info.managed, "{info:?}");
}

#[test]
#[ignore = "needs a CUDA driver"]
fn a_no_sync_import_released_without_a_stream_waits_for_the_context_and_says_what_to_pass() {
    use crate::test_support::CountingOwner;
    let context = device();
    let memory = DeviceAllocation::new(&context, 64 * 4);
    let (tensor, count) = imported_on_device(&memory, crate::stream::StreamRequest::NoSync);
    // Work the release was told nothing about, on a stream of the memory's context: the
    // conservative wait (the whole context) must cover it.
    let busy = context.new_stream().unwrap();
    let gate = closed_gate();
    close(&busy, &gate);
    let mut release = tensor.into_release();
    assert!(release.is_ordered(), "never an unordered deleter");
    assert!(release.is_conservative());
    assert!(
        !release.is_ready(),
        "a context synchronisation is never ready by itself (only the explicit flush makes it)"
    );
    let (outcome, waited) = wait_past_the_gate(&gate, || release.complete());
    assert!(
        matches!(outcome, Err(Error::ReleaseNeedsStream)),
        "{outcome:?}"
    );
    assert_eq!(CountingOwner::releases(&count), 1);
    assert!(
        waited >= WAITED_AT_LEAST,
        "the deleter ran after {waited:?}, before the context's work was done"
    );
    busy.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA driver"]
fn an_exports_release_waits_for_every_consumer_stream_before_the_memory_goes_back() {
    use crate::test_support::CountingOwner;
    let context = device();
    let first = context.new_stream().unwrap();
    let second = context.new_stream().unwrap();
    let memory = DeviceAllocation::new(&context, 64 * 4);
    let spec = on(CUDA0, memory.0, &[64], &[1]);
    let (owner, count) = CountingOwner::new();
    let gate = closed_gate();
    close(&second, &gate);
    let fences = crate::release::ConsumerFences::new();
    super::fence::fence_log::take();
    for stream in [first.cu_stream(), second.cu_stream(), first.cu_stream()] {
        let stream = super::fence::FenceStream::named_now(stream as usize);
        // SAFETY: live streams of device 0, each fenced as its consumer's tensor is released.
        unsafe { fences.record(&spec, stream) };
    }
    assert_eq!(fences_recorded_here(), 3);
    let mut release = crate::export::given_back::give_back_after(owner, &fences)
        .queued()
        .expect("the second consumer's stream is busy: a fenced release");
    assert!(release.is_ordered());
    assert!(
        !release.is_ready(),
        "the second consumer's stream is still busy: the memory must not go back"
    );
    assert_eq!(CountingOwner::releases(&count), 0);
    let (outcome, waited) = wait_past_the_gate(&gate, || release.complete());
    outcome.unwrap();
    assert_eq!(CountingOwner::releases(&count), 1);
    assert!(
        waited >= WAITED_AT_LEAST,
        "the memory went back after {waited:?}, before the consumer's work was done"
    );
}

/// A share into a type (`share(A, torch.Tensor)`): the owner (a Julia root) goes back only
/// once the consumer's current work stream, as its exchange API table reported it, has done
/// the work enqueued before the release; a table reporting NULL (or no stream) has its release
/// recorded on the legacy default stream, which records and completes.
#[test]
#[ignore = "needs a CUDA driver"]
fn a_share_into_a_types_owner_goes_back_after_the_consumers_current_stream() {
    use crate::export::plan::exchange_api_release_stream;
    use crate::test_support::CountingOwner;
    let context = device();
    let current = context.new_stream().unwrap();
    let memory = DeviceAllocation::new(&context, 64 * 4);
    let spec = on(CUDA0, memory.0, &[64], &[1]);
    let gate = closed_gate();
    close(&current, &gate);
    let stream = exchange_api_release_stream(DeviceKind::Cuda, Some(current.cu_stream() as usize))
        .expect("device memory is fenced");
    let (owner, count) = CountingOwner::new();
    let fences = crate::release::ConsumerFences::new();
    // SAFETY: a live stream of device 0 that outlives the recording.
    unsafe { fences.record(&spec, super::fence::FenceStream::named_now(stream)) };
    let mut release = crate::export::given_back::give_back_after(owner, &fences)
        .queued()
        .expect("a fenced release");
    assert!(
        !release.is_ready(),
        "the consumer's stream is still busy: the root must not go back"
    );
    assert_eq!(CountingOwner::releases(&count), 0);
    let (outcome, waited) = wait_past_the_gate(&gate, || release.complete());
    outcome.unwrap();
    assert_eq!(CountingOwner::releases(&count), 1);
    assert!(
        waited >= WAITED_AT_LEAST,
        "the root went back after {waited:?}, before the consumer's work was done"
    );

    for reported in [None, Some(0)] {
        let legacy = exchange_api_release_stream(DeviceKind::Cuda, reported);
        assert_eq!(legacy, Some(1), "{reported:?}");
        let (owner, count) = CountingOwner::new();
        let fences = crate::release::ConsumerFences::new();
        super::fence::fence_log::take();
        // SAFETY: 1: the legacy default stream of the context current (device 0's primary).
        unsafe { fences.record(&spec, super::fence::FenceStream::named_now(1)) };
        assert_eq!(fences_recorded_here(), 1);
        // Nothing runs on the legacy stream: given back at once, or after a short wait.
        if let Some(release) = crate::export::given_back::give_back_after(owner, &fences).queued() {
            assert!(release.is_ordered());
            release.complete().unwrap();
        }
        assert_eq!(CountingOwner::releases(&count), 1);
    }
}

/// A consumer's stream is fenced when that consumer's own tensor is released, so it
/// may be destroyed right after (a CuPy `Stream` freed after its array) while another consumer
/// still holds the memory; the memory goes back only once that fence has completed and the
/// last holder has let go.
#[test]
#[ignore = "needs a CUDA driver"]
fn an_exports_consumer_stream_may_go_once_its_own_tensor_is_released() {
    use crate::test_support::CountingOwner;
    let context = device();
    let memory = DeviceAllocation::new(&context, 64 * 4);
    let spec = on(CUDA0, memory.0, &[64], &[1]);
    let fences = crate::release::ConsumerFences::new();
    // The first consumer's stream, busy until the gate opens, fenced at its release and then
    // destroyed (its work, the event included, still completes).
    let first = context.new_stream().unwrap();
    let gate = closed_gate();
    close(&first, &gate);
    // SAFETY: a live stream of device 0, fenced as its consumer's tensor is released.
    unsafe {
        fences.record(
            &spec,
            super::fence::FenceStream::named_now(first.cu_stream() as usize),
        )
    };
    drop(first);
    // The second consumer, released later on another stream.
    let second = context.new_stream().unwrap();
    // SAFETY: as above.
    unsafe {
        fences.record(
            &spec,
            super::fence::FenceStream::named_now(second.cu_stream() as usize),
        )
    };
    let (owner, count) = CountingOwner::new();
    let mut release = crate::export::given_back::give_back_after(owner, &fences)
        .queued()
        .expect("the first consumer's work still runs: a fenced release");
    assert!(
        !release.is_ready(),
        "the destroyed stream's work has not run yet"
    );
    let (outcome, waited) = wait_past_the_gate(&gate, || release.complete());
    outcome.unwrap();
    assert_eq!(CountingOwner::releases(&count), 1);
    assert!(
        waited >= WAITED_AT_LEAST,
        "the memory went back after {waited:?}, before the first consumer's work was done"
    );
}

/// An alias (1, 2) a consumer names while a user context is current means that context's
/// stream: it is held with the stream, and the release's event is made there (the fence log
/// says which context each event went to), not in the primary context.
#[test]
#[ignore = "needs a CUDA driver"]
fn an_alias_named_in_a_user_context_is_fenced_in_that_context() {
    let _primary = device();
    let user = UserContextStream::new();
    // SAFETY: the user context is live until `user` drops, after the fence.
    let status = unsafe { sys::cuCtxPushCurrent_v2(user.context) };
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
    let named = [1, 2].map(super::fence::FenceStream::named_now);
    let mut popped: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: pops the context pushed above.
    let _ = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
    for stream in &named {
        let held = stream
            .alias_context
            .as_ref()
            .expect("the context current when named");
        assert_eq!(held.raw(), user.context as usize, "{}", stream.handle);
    }
    let memory_spec = on(CUDA0, 0x1000, &[4], &[1]);
    let fences = crate::release::ConsumerFences::new();
    super::fence::fence_log::take();
    for stream in named {
        // SAFETY: the aliases of a live user context of device 0 (not current now).
        unsafe { fences.record(&memory_spec, stream) };
    }
    let user_context = Some(user.context as usize);
    let expected = [1, 2].map(|handle| super::fence::fence_log::Entry::Recorded {
        handle,
        alias_context: user_context,
        event_context: user_context,
        defers_on_capture: false,
    });
    assert_eq!(
        super::fence::fence_log::take(),
        expected,
        "each event made in the user context its alias was named in"
    );
    let (fence, error) = fences.take().map_or((None, None), |(f, e)| (Some(f), e));
    assert!(error.is_none(), "recorded in the user context: {error:?}");
    if let Some(mut fence) = fence {
        assert!(
            !fence.is_conservative(),
            "no fallback to the primary context"
        );
        fence.wait().unwrap();
    }
}

/// How many fences this thread asked for since the fence log was last taken.
fn fences_recorded_here() -> usize {
    super::fence::fence_log::take()
        .iter()
        .filter(|entry| matches!(entry, super::fence::fence_log::Entry::Recorded { .. }))
        .count()
}
