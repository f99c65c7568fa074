//! Against a real driver: graph captures next to our ordering and releases, two contexts on one
//! device (standing in for two devices where only one GPU exists), and the primary-context
//! question asked without creating one. Every ordering claim is checked against a gate (a host
//! function holding a stream until opened) so that a wrong order shows, and every capture is
//! ended and must come back valid: a call of ours that broke it fails the test there.

use super::*;
use crate::cuda::context::HeldContext;
use crate::cuda::fence::{FenceStream, ReleaseFence};
use crate::cuda::order::ReadyEvent;

/// Enqueues a closed gate on the raw stream `stream` (with its context current).
fn close_raw(stream: sys::CUstream, gate: &Gate) {
    // SAFETY: the stream is live; `gate` outlives the enqueued call (see `hold_until_open`).
    unsafe {
        result::stream::launch_host_function(
            stream,
            hold_until_open,
            std::ptr::from_ref(gate).cast_mut().cast(),
        )
    }
    .expect("cuLaunchHostFunc");
}

/// A stream of the current context created without `CU_STREAM_NON_BLOCKING`: it synchronises
/// with the legacy default stream, as CUDA.jl's task streams do. Destroyed on drop.
struct BlockingStream(sys::CUstream);

impl BlockingStream {
    fn new() -> Self {
        let mut stream: sys::CUstream = std::ptr::null_mut();
        // SAFETY: out-pointer valid; a context is current (the tests bind one first).
        let status = unsafe { sys::cuStreamCreate(&mut stream, 0) };
        assert_eq!(status, sys::CUresult::CUDA_SUCCESS, "cuStreamCreate");
        Self(stream)
    }
}

impl Drop for BlockingStream {
    fn drop(&mut self) {
        // SAFETY: our stream, destroyed once.
        let _ = unsafe { sys::cuStreamDestroy_v2(self.0) };
    }
}

/// Begins a global-mode capture on `stream` (the strictest mode: an unsafe call from any
/// thread not in relaxed mode invalidates it).
fn begin_capture(stream: sys::CUstream) {
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL;
    // SAFETY: a live stream of the current context.
    let status = unsafe { sys::cuStreamBeginCapture_v2(stream, mode) };
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS, "cuStreamBeginCapture");
}

/// Ends the capture on `stream`; fails the test when something invalidated it. Returns the
/// graph (destroy it with [`destroy_graph`]).
fn end_capture(stream: sys::CUstream, what: &str) -> sys::CUgraph {
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: ends the capture begun on the same stream.
    let status = unsafe { sys::cuStreamEndCapture(stream, &mut graph) };
    assert_eq!(
        status,
        sys::CUresult::CUDA_SUCCESS,
        "the capture was invalidated: {what}"
    );
    graph
}

fn destroy_graph(graph: sys::CUgraph) {
    // SAFETY: a graph a capture made, destroyed once.
    let _ = unsafe { sys::cuGraphDestroy(graph) };
}

fn node_count(graph: sys::CUgraph) -> usize {
    let mut count = 0usize;
    // SAFETY: a live graph; a null node array asks for the count only.
    let status = unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut count) };
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
    count
}

#[test]
#[ignore = "needs a CUDA driver"]
fn a_capturing_consumer_waits_for_a_ready_event_as_an_external_node_of_its_graph() {
    let context = device();
    let producer = context.new_stream().unwrap();
    let consumer = context.new_stream().unwrap();
    let launcher = context.new_stream().unwrap();
    let gate = closed_gate();
    close(&producer, &gate);
    // SAFETY: a live stream of device 0.
    let ready = unsafe { ReadyEvent::record(0, producer.cu_stream() as usize) }.unwrap();

    begin_capture(consumer.cu_stream());
    // SAFETY: a live stream of device 0.
    let ordered = unsafe { ready.order_before(consumer.cu_stream() as usize) };
    let graph = end_capture(consumer.cu_stream(), "order_before on a capturing consumer");
    ordered.unwrap();
    assert_eq!(node_count(graph), 1, "one external-event wait node");
    let mut exec: sys::CUgraphExec = std::ptr::null_mut();
    // SAFETY: a live graph; instantiated once, destroyed below.
    let status = unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) };
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
    // SAFETY: a live executable graph and stream.
    let status = unsafe { sys::cuGraphLaunch(exec, launcher.cu_stream()) };
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
    let waits = !completes_soon(&context, &launcher);
    gate.open.store(true, Ordering::SeqCst);
    launcher.synchronize().unwrap();
    producer.synchronize().unwrap();
    // SAFETY: destroyed once, after its launch completed.
    unsafe { sys::cuGraphExecDestroy(exec) };
    destroy_graph(graph);
    assert!(
        waits,
        "the graph's launch did not wait for the producer's event"
    );

    // The event has completed: a capture needs no node for it.
    begin_capture(consumer.cu_stream());
    // SAFETY: as above.
    let ordered = unsafe { ready.order_before(consumer.cu_stream() as usize) };
    let graph = end_capture(consumer.cu_stream(), "order_before of a completed event");
    ordered.unwrap();
    assert_eq!(node_count(graph), 0, "nothing to wait for");
    destroy_graph(graph);
}

#[test]
#[ignore = "needs a CUDA driver"]
fn a_capturing_producer_is_refused_and_its_capture_left_valid() {
    let context = device();
    let producer = context.new_stream().unwrap();
    let consumer = context.new_stream().unwrap();
    begin_capture(producer.cu_stream());
    // SAFETY: live streams of device 0.
    let (ready, ordered) = unsafe {
        (
            ReadyEvent::record(0, producer.cu_stream() as usize),
            order_streams(
                0,
                producer.cu_stream() as usize,
                consumer.cu_stream() as usize,
            ),
        )
    };
    let graph = end_capture(producer.cu_stream(), "refusing a capturing producer");
    destroy_graph(graph);
    assert!(
        matches!(ready, Err(Error::ProducerCapturing)),
        "{:?}",
        ready.err()
    );
    assert!(
        matches!(ordered, Err(Error::ProducerCapturing)),
        "{ordered:?}"
    );
    // A join inside one capture is allowed: both streams in the same capture.
    begin_capture(producer.cu_stream());
    // Fork `consumer` into the capture (it waits for a node of it), then join it back.
    let fork = context.new_event(None).unwrap();
    fork.record(&producer).unwrap();
    consumer.wait(&fork).unwrap();
    // SAFETY: both streams are in the same active capture.
    let joined = unsafe {
        order_streams(
            0,
            consumer.cu_stream() as usize,
            producer.cu_stream() as usize,
        )
    };
    let graph = end_capture(producer.cu_stream(), "a join within one capture");
    destroy_graph(graph);
    joined.unwrap();
}

#[test]
#[ignore = "needs a CUDA driver"]
fn the_legacy_stream_is_left_alone_while_a_blocking_stream_captures() {
    let context = device();
    context.bind_to_thread().unwrap();
    let producer = context.new_stream().unwrap();
    let blocking = BlockingStream::new();
    let gate = closed_gate();
    close(&producer, &gate);
    // SAFETY: a live stream of device 0.
    let ready = unsafe { ReadyEvent::record(0, producer.cu_stream() as usize) }.unwrap();

    begin_capture(blocking.0);
    // A consumer naming the legacy stream: it can take no wait now, so the host waits (for the
    // gate, opened later) instead of joining the capture.
    let opener = open_later(&gate, Duration::from_millis(300));
    let started = Instant::now();
    // SAFETY: the legacy default stream of the current (primary) context.
    let ordered = unsafe { ready.order_before(1) };
    let host = started.elapsed();
    opener.join().unwrap();
    // A release fence on the legacy stream defers its event; the conservative one cannot wait.
    let streams = vec![FenceStream {
        handle: 1,
        alias_context: HeldContext::current().unwrap(),
    }];
    // SAFETY: the legacy default stream of the current context.
    let (mut deferred, recorded) = unsafe { ReleaseFence::record(0, streams) };
    let (mut conservative, held) = ReleaseFence::conservative(0);
    let deferred_waits = deferred.can_wait();
    let conservative_waits = conservative.can_wait();
    let graph = end_capture(
        blocking.0,
        "the legacy stream used during a blocking capture",
    );
    destroy_graph(graph);
    ordered.unwrap();
    recorded.unwrap();
    held.unwrap();
    assert!(
        host >= Duration::from_millis(250),
        "order_before(1) returned after {host:?}, before the producer's gate opened"
    );
    assert!(!deferred.is_conservative(), "deferred, not fallen back");
    assert!(
        !deferred_waits && !conservative_waits,
        "nothing waits during the capture"
    );
    assert!(
        deferred.can_wait() && conservative.can_wait(),
        "and both can once it ended"
    );
    deferred.wait().unwrap();
    conservative.wait().unwrap();
    assert!(deferred.is_settled() && conservative.is_settled());
}

#[test]
#[ignore = "needs a CUDA driver"]
fn a_deferred_record_orders_the_work_enqueued_before_the_capture() {
    let context = device();
    let stream = context.new_stream().unwrap();
    let gate = closed_gate();
    close(&stream, &gate);
    begin_capture(stream.cu_stream());
    let streams = vec![FenceStream {
        handle: stream.cu_stream() as usize,
        alias_context: None,
    }];
    // SAFETY: a live stream of device 0, outliving the fence.
    let (mut fence, recorded) = unsafe { ReleaseFence::record(0, streams) };
    recorded.unwrap();
    let graph = end_capture(stream.cu_stream(), "a fence on a capturing stream");
    destroy_graph(graph);
    assert!(fence.can_wait(), "recorded once the capture has ended");
    assert!(
        !fence.is_complete(),
        "the deferred event follows the work enqueued before the capture (the gate)"
    );
    gate.open.store(true, Ordering::SeqCst);
    fence.wait().unwrap();
    assert!(!gate.timed_out.load(Ordering::SeqCst));
}

/// A user context on device 0, made current until dropped.
struct UserContext(sys::CUcontext);

impl UserContext {
    fn new() -> Self {
        driver().unwrap();
        let mut context: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer valid; device 0 exists. The new context is pushed current.
        let status = unsafe { sys::cuCtxCreate_v2(&mut context, 0, 0) };
        assert_eq!(status, sys::CUresult::CUDA_SUCCESS, "cuCtxCreate");
        Self(context)
    }
}

impl Drop for UserContext {
    fn drop(&mut self) {
        // SAFETY: our context, destroyed once (it pops it where current).
        let _ = unsafe { sys::cuCtxDestroy_v2(self.0) };
    }
}

fn primary_active() -> bool {
    let (mut flags, mut active) = (0u32, 0i32);
    // SAFETY: out-pointers valid; device 0 exists.
    let status = unsafe { sys::cuDevicePrimaryCtxGetState(0, &mut flags, &mut active) };
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
    active != 0
}

#[test]
#[ignore = "needs a CUDA driver"]
fn a_user_context_stream_is_held_without_creating_the_primary_context() {
    driver().unwrap();
    assert!(
        !primary_active(),
        "device 0's primary context is active before the test: another test left a retain"
    );
    let user = UserContext::new();
    let stream = BlockingStream::new();
    // The control: retaining and releasing the inactive primary context creates and tears it
    // down, which takes long.
    let started = Instant::now();
    drop(HeldContext::primary(0).unwrap());
    let primary_cycle = started.elapsed();
    assert!(!primary_active());

    let started = Instant::now();
    // SAFETY: a live stream of the user context.
    let held = unsafe { HeldContext::of_stream(stream.0 as usize) }.unwrap();
    let user_hold = started.elapsed();
    assert!(
        !primary_active(),
        "holding a user context activated the primary one"
    );
    // A fence with pending work on it: waited for, in the user context.
    let gate = closed_gate();
    close_raw(stream.0, &gate);
    let streams = vec![FenceStream {
        handle: stream.0 as usize,
        alias_context: None,
    }];
    // SAFETY: a live stream of the user context, outliving the fence.
    let (mut fence, recorded) = unsafe { ReleaseFence::record(0, streams) };
    recorded.unwrap();
    assert!(!fence.is_complete(), "the gate holds the stream");
    let opener = open_later(&gate, Duration::from_millis(200));
    fence.wait().unwrap();
    opener.join().unwrap();
    assert!(!primary_active(), "the fence activated the primary context");
    drop((held, fence, stream, user));
    assert!(
        user_hold * 2 < primary_cycle,
        "holding a user context took {user_hold:?}, a primary context's creation {primary_cycle:?}"
    );
}

#[test]
#[ignore = "needs a CUDA driver"]
fn the_legacy_streams_of_two_contexts_are_two_fence_streams_and_events_live_in_the_producers() {
    let context = device();
    context.bind_to_thread().unwrap();
    let primary_alias = HeldContext::current().unwrap();
    let user = UserContext::new(); // current from here on
    let user_alias = HeldContext::current().unwrap();
    let gate = closed_gate();
    close_raw(1 as sys::CUstream, &gate); // the user context's legacy stream
    let streams = vec![
        FenceStream {
            handle: 1,
            alias_context: primary_alias,
        },
        FenceStream {
            handle: 1,
            alias_context: user_alias,
        },
    ];
    // SAFETY: the legacy streams of two live contexts of device 0.
    let (mut fence, recorded) = unsafe { ReleaseFence::record(0, streams) };
    recorded.unwrap();
    assert_eq!(
        fence.event_count(),
        2,
        "one event per context's legacy stream"
    );
    assert!(
        !fence.is_complete(),
        "the user context's legacy stream is held by the gate"
    );
    gate.open.store(true, Ordering::SeqCst);
    fence.wait().unwrap();

    // A producer stream of the user context, a consumer of the primary one: the event is the
    // producer's context's.
    let producer = BlockingStream::new();
    let consumer = context.new_stream().unwrap();
    // SAFETY: live streams of two contexts of device 0.
    let ordered = unsafe { order_streams(0, producer.0 as usize, consumer.cu_stream() as usize) };
    ordered.unwrap();
    consumer.synchronize().unwrap();
    drop(producer);
    drop(user);
}

/// An export's consumer that releases its tensor while its stream is being captured keeps no
/// handle: no event is made (none is deferred), the stream's context is synchronised instead
/// by the explicit wait, and the stream may be destroyed right after the capture ends. That
/// wait still follows the work enqueued before the capture (the gate).
#[test]
#[ignore = "needs a CUDA driver"]
fn an_exports_consumer_capturing_at_its_release_takes_the_fallback_and_keeps_no_stream() {
    let context = device();
    let stream = context.new_stream().unwrap();
    let gate = closed_gate();
    close(&stream, &gate);
    let spec = on(CUDA0, 0x1000, &[4], &[1]);
    let fences = crate::release::ConsumerFences::new();
    begin_capture(stream.cu_stream());
    // SAFETY: a live stream of device 0, during the call.
    unsafe { fences.record(&spec, FenceStream::named_now(stream.cu_stream() as usize)) };
    let graph = end_capture(
        stream.cu_stream(),
        "a consumer's fence on a capturing stream",
    );
    destroy_graph(graph);
    drop(stream);
    let (mut fence, error) = fences.take().expect("a fallback to wait for");
    assert!(
        matches!(error, Some(Error::ReleaseDuringCapture)),
        "{error:?}"
    );
    assert!(
        fence.is_conservative(),
        "the stream's context, synchronised"
    );
    assert!(fence.is_settled() || fence.can_wait(), "no deferred record");
    assert!(
        !fence.is_complete(),
        "never complete without the explicit wait"
    );
    let (outcome, waited) = wait_past_the_gate(&gate, || fence.wait());
    outcome.unwrap();
    assert!(fence.is_settled());
    assert!(
        waited >= WAITED_AT_LEAST,
        "the fallback returned after {waited:?}, before the work enqueued before the capture"
    );
}
