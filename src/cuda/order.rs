//! Stream ordering by events: the consumer's stream waits for what the producer's stream has
//! enqueued so far ([`order_streams`], at once), or had enqueued when its memory was handed
//! over ([`ReadyEvent`], for exports that outlive the call). No device-wide synchronisation
//! happens, and the host waits only where a graph capture leaves nothing else (below).
//!
//! Graph captures (the Programming Guide's "Prohibited and Unhandled Operations"): a wait
//! enqueued on a capturing stream for an event recorded outside the capture, a record on a
//! capturing stream that a non-capturing stream then waits for, and any use of the legacy
//! default stream while a blocking stream of its context captures, each invalidate the
//! capture. So each stream's capture state is asked first ([`super::context::Capture`]) and
//! the decisions below ([`consumer_wait`], [`streams_order`]) pick what keeps the capture
//! valid: nothing, when the producer's work has completed already; a wait with
//! `CU_EVENT_WAIT_EXTERNAL` (an external-event node of the graph: "invalid outside of stream
//! capture") for an event that outlives the graph's launches ([`ReadyEvent`]'s, which lives as
//! long as the exported memory); a host wait, relaxed, for an event that dies with the call
//! ([`order_streams`]'s) or for the unusable legacy stream; and a refusal, saying so, for a
//! producer stream that is itself being captured (its work is not running: nothing that does
//! run can wait for it), but for a join of two streams of the same capture.
//!
//! Each event is created in its producer stream's own context (`cuStreamGetCtx`; for the
//! aliases 1 and 2, the context current on the calling thread when it is of the memory's
//! device, else that device's primary context): a stream of another context refuses an event
//! of this one.

use super::call;
use super::context::{Capture, HeldContext, capture_of};
use crate::error::{Error, Result};
use cudarc::driver::sys;

/// How a consumer's stream is made to wait for a producer's event: the decision, made without
/// the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitPlan {
    /// `cuStreamWaitEvent`: the consumer's work runs.
    Wait,
    /// Nothing: the event has completed already, so a capturing consumer needs no node for it.
    Skip,
    /// `cuStreamWaitEvent` with `CU_EVENT_WAIT_EXTERNAL`: the capturing consumer's graph gets
    /// an external-event wait node (each launch waits for the event), which needs the event to
    /// outlive the graph's launches.
    WaitExternal,
    /// Wait on the host (capture mode relaxed), then nothing on the stream: for an event that
    /// does not outlive the call, and for the legacy stream while a blocking stream captures
    /// (which can take no wait at all).
    HostWait,
}

/// See [`WaitPlan`]. `event_done`: whether the event has completed (asked only when the
/// consumer is not idle); `event_outlives_call`: whether the event lives on after this call
/// (a [`ReadyEvent`]) or is destroyed at its end ([`order_streams`]).
pub fn consumer_wait(
    consumer: Capture,
    event_done: impl FnOnce() -> bool,
    event_outlives_call: bool,
) -> WaitPlan {
    match consumer {
        Capture::Idle => WaitPlan::Wait,
        _ if event_done() => WaitPlan::Skip,
        Capture::Capturing(_) if event_outlives_call => WaitPlan::WaitExternal,
        _ => WaitPlan::HostWait,
    }
}

/// How [`order_streams`] orders a consumer after a producer: the decision, made without the
/// driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamsOrder {
    /// The same stream: nothing.
    Nothing,
    /// Record on the producer, wait on the consumer: both run, or both are in one capture (a
    /// join inside the graph).
    RecordAndWait,
    /// Record on the producer, then make the capturing consumer wait as [`consumer_wait`] says.
    RecordThenAsk,
}

/// See [`StreamsOrder`]; a producer whose work is being captured is refused (nothing that runs
/// can wait for work that does not), except by a consumer in the same active capture.
pub fn streams_order(
    same_stream: bool,
    producer: Capture,
    consumer: Capture,
) -> Result<StreamsOrder> {
    match (producer, consumer) {
        _ if same_stream => Ok(StreamsOrder::Nothing),
        (Capture::Idle, Capture::Idle) => Ok(StreamsOrder::RecordAndWait),
        (Capture::Idle, _) => Ok(StreamsOrder::RecordThenAsk),
        (Capture::Capturing(Some(p)), Capture::Capturing(Some(c))) if p == c => {
            Ok(StreamsOrder::RecordAndWait)
        }
        _ => Err(Error::ProducerCapturing),
    }
}

/// The context the alias `handle` (1, 2) of memory on device `ordinal` means: the one current
/// on this thread when it is of that device, else the device's primary context (a DLPack
/// stream is a stream of the tensor's device).
fn alias_context(ordinal: i32) -> Result<HeldContext> {
    match HeldContext::current()? {
        Some(current) if current.device() == ordinal => Ok(current),
        _ => HeldContext::primary(ordinal),
    }
}

/// The context of `stream` (1, 2 or a handle) for memory of device `ordinal`.
///
/// # Safety
/// `stream` must be 1, 2 or a live `CUstream`.
unsafe fn context_of(stream: usize, ordinal: i32) -> Result<HeldContext> {
    if stream > 2 {
        // SAFETY: live (contract).
        unsafe { HeldContext::of_stream(stream) }
    } else {
        alias_context(ordinal)
    }
}

/// An event created (timing off) in the current context.
fn create_event() -> Result<sys::CUevent> {
    let mut event: sys::CUevent = std::ptr::null_mut();
    let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
    // SAFETY: `event` is a valid out-pointer; a context is current (every caller entered one).
    let status = unsafe { sys::cuEventCreate(&mut event, flags) };
    call(status, "cuEventCreate")?;
    Ok(event)
}

/// Whether `event` has completed (a failed query counts as not).
///
/// # Safety
/// `event` must be live; its context current.
unsafe fn event_done(event: sys::CUevent) -> bool {
    // SAFETY: contract.
    unsafe { sys::cuEventQuery(event) == sys::CUresult::CUDA_SUCCESS }
}

/// Makes `consumer` (whose context is current) wait for `event` as [`consumer_wait`] decides.
///
/// # Safety
/// `consumer` must be 1, 2 or a live `CUstream` of the current context; `event` live.
unsafe fn make_wait(consumer: usize, event: sys::CUevent, event_outlives_call: bool) -> Result<()> {
    // SAFETY: a live stream of the current context (contract).
    let capture = unsafe { capture_of(consumer) }?;
    // SAFETY: a live event (contract).
    let plan = consumer_wait(
        capture,
        || unsafe { event_done(event) },
        event_outlives_call,
    );
    let stream = consumer as sys::CUstream;
    let external = sys::CUevent_wait_flags::CU_EVENT_WAIT_EXTERNAL as u32;
    match plan {
        WaitPlan::Skip => Ok(()),
        // SAFETY: live stream and event (contract).
        WaitPlan::Wait => call(
            unsafe { sys::cuStreamWaitEvent(stream, event, 0) },
            "cuStreamWaitEvent",
        ),
        // SAFETY: as above; the consumer is capturing, where the flag is valid.
        WaitPlan::WaitExternal => call(
            unsafe { sys::cuStreamWaitEvent(stream, event, external) },
            "cuStreamWaitEvent(CU_EVENT_WAIT_EXTERNAL)",
        ),
        // SAFETY: a live event recorded outside any capture; the capture mode is relaxed on
        // this thread (the caller's `Current` guard), so the wait breaks no capture.
        WaitPlan::HostWait => call(
            unsafe { sys::cuEventSynchronize(event) },
            "cuEventSynchronize",
        ),
    }
}

/// Records an event on `producer` and makes `consumer` wait for it. Both are `CUstream`
/// handles (1 = legacy default, 2 = per-thread default) used with memory of device `ordinal`.
/// Equal streams need nothing. The event lives in the producer's context; the consumer's
/// capture state decides the wait ([`streams_order`], [`consumer_wait`]).
///
/// # Safety
/// `producer` and `consumer` must be 1, 2 or live `CUstream`s for memory of device `ordinal`:
/// the driver dereferences them and does not validate arbitrary values.
pub unsafe fn order_streams(ordinal: i32, producer: usize, consumer: usize) -> Result<()> {
    super::driver()?;
    if producer == consumer {
        return Ok(());
    }
    // SAFETY: live streams (contract).
    let (producer_context, consumer_context) = unsafe {
        (
            context_of(producer, ordinal)?,
            context_of(consumer, ordinal)?,
        )
    };
    let (producer_capture, consumer_capture) = {
        let _current = producer_context.enter()?;
        // SAFETY: a live stream of the current context.
        let p = unsafe { capture_of(producer) }?;
        drop(_current);
        let _current = consumer_context.enter()?;
        // SAFETY: as above.
        (p, unsafe { capture_of(consumer) }?)
    };
    let order = streams_order(false, producer_capture, consumer_capture)?;
    let current = producer_context.enter()?;
    let event = create_event()?;
    // SAFETY: `event` was just created in the producer's context; the stream is live.
    let recorded = call(
        unsafe { sys::cuEventRecord(event, producer as sys::CUstream) },
        "cuEventRecord",
    );
    drop(current);
    let waited = recorded.and_then(|()| {
        let _current = consumer_context.enter()?;
        match order {
            StreamsOrder::Nothing => Ok(()),
            // SAFETY: live stream and event; events may be waited for across contexts.
            StreamsOrder::RecordAndWait => call(
                unsafe { sys::cuStreamWaitEvent(consumer as sys::CUstream, event, 0) },
                "cuStreamWaitEvent",
            ),
            // SAFETY: as above; the event is destroyed below, so it outlives nothing.
            StreamsOrder::RecordThenAsk => unsafe { make_wait(consumer, event, false) },
        }
    });
    // Destroying an event whose wait is enqueued is allowed: the driver frees it once done.
    let destroyed = producer_context.enter().and_then(|_current| {
        // SAFETY: `event` is ours and used no further.
        call(unsafe { sys::cuEventDestroy_v2(event) }, "cuEventDestroy")
    });
    waited.and(destroyed)
}

/// The point in a producer's stream after which its memory is ready: an event recorded there
/// once, when the memory is handed over, that every later consumer's stream waits for. The
/// producer's stream itself is not touched again, so it may be destroyed meanwhile (a Julia
/// task's stream is, once the task's stream object is collected).
pub struct ReadyEvent {
    context: HeldContext,
    event: sys::CUevent,
    /// The device of the memory, whose streams consumer aliases (1, 2) mean.
    ordinal: i32,
}

// SAFETY: an event is a process-wide driver handle that any thread may wait for or destroy,
// with its context pushed (every call here does); nothing mutates it through `&self`.
unsafe impl Send for ReadyEvent {}
// SAFETY: as above.
unsafe impl Sync for ReadyEvent {}

impl ReadyEvent {
    /// Records the event on `producer` (1, 2 or a handle), for memory of device `ordinal`. An
    /// alias means the stream of the context current now when it is of that device, else of
    /// the device's primary context. A producer stream being captured is refused
    /// ([`Error::ProducerCapturing`]): the event would be a node of its graph, not a point in
    /// work that runs.
    ///
    /// # Safety
    /// `producer` must be 1, 2 or a live `CUstream`.
    pub unsafe fn record(ordinal: i32, producer: usize) -> Result<Self> {
        super::driver()?;
        // SAFETY: live (contract).
        let context = unsafe { context_of(producer, ordinal) }?;
        let current = context.enter()?;
        // SAFETY: a live stream of the current context.
        if unsafe { capture_of(producer) }?.is_capturing() {
            return Err(Error::ProducerCapturing);
        }
        let event = create_event()?;
        // SAFETY: the event was just created in the stream's context; the stream is live.
        let status = unsafe { sys::cuEventRecord(event, producer as sys::CUstream) };
        if let Err(error) = call(status, "cuEventRecord") {
            // SAFETY: our event, recorded nowhere, destroyed once.
            let _ = unsafe { sys::cuEventDestroy_v2(event) };
            return Err(error);
        }
        drop(current);
        Ok(Self {
            context,
            event,
            ordinal,
        })
    }

    /// Makes `consumer` (1, 2 or a handle of the memory's device) wait for the event, as its
    /// capture state allows ([`consumer_wait`]; the event outlives a graph that waits for it,
    /// since it lives as long as the memory): no host wait, except for the legacy default
    /// stream while a blocking stream captures. Events may be waited for from streams of other
    /// contexts and devices.
    ///
    /// # Safety
    /// `consumer` must be 1, 2 or a live `CUstream`.
    pub unsafe fn order_before(&self, consumer: usize) -> Result<()> {
        // SAFETY: live (contract).
        let context = unsafe { context_of(consumer, self.ordinal) }?;
        let _current = context.enter()?;
        // SAFETY: a live stream of the current context; our live event.
        unsafe { make_wait(consumer, self.event, true) }
    }

    /// Blocks the calling thread until the event has completed (for host copies), with the
    /// thread's capture mode relaxed (the event was recorded outside any capture).
    pub fn wait_on_host(&self) -> Result<()> {
        let _current = self.context.enter()?;
        // SAFETY: a live event of ours; its context is current.
        let status = unsafe { sys::cuEventSynchronize(self.event) };
        call(status, "cuEventSynchronize")
    }
}

impl Drop for ReadyEvent {
    fn drop(&mut self) {
        if let Ok(_current) = self.context.enter() {
            // SAFETY: our event, destroyed once; waits already enqueued on it still complete
            // (the driver frees it once they are done). Errors are ignored in Drop.
            let _ = unsafe { sys::cuEventDestroy_v2(self.event) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACTIVE: Capture = Capture::Capturing(Some(7));

    #[test]
    fn a_capturing_consumer_waits_as_a_graph_node_or_not_at_all() {
        assert_eq!(consumer_wait(Capture::Idle, || true, true), WaitPlan::Wait);
        assert_eq!(consumer_wait(Capture::Idle, || true, false), WaitPlan::Wait);
        for consumer in [ACTIVE, Capture::Capturing(None), Capture::Implicit] {
            for outlives in [true, false] {
                assert_eq!(
                    consumer_wait(consumer, || true, outlives),
                    WaitPlan::Skip,
                    "completed work needs no node"
                );
            }
        }
        assert_eq!(
            consumer_wait(ACTIVE, || false, true),
            WaitPlan::WaitExternal
        );
        assert_eq!(
            consumer_wait(ACTIVE, || false, false),
            WaitPlan::HostWait,
            "an event destroyed at once cannot be a graph's node"
        );
        assert_eq!(
            consumer_wait(Capture::Implicit, || false, true),
            WaitPlan::HostWait,
            "the legacy stream takes no wait while a blocking stream captures"
        );
        let asked = std::cell::Cell::new(false);
        consumer_wait(
            Capture::Idle,
            || {
                asked.set(true);
                true
            },
            true,
        );
        assert!(!asked.get(), "an idle consumer costs no query");
    }

    #[test]
    fn a_capturing_producer_is_refused_but_for_a_join_within_its_capture() {
        use StreamsOrder::*;
        let idle = Capture::Idle;
        assert_eq!(streams_order(true, ACTIVE, idle).unwrap(), Nothing);
        assert_eq!(streams_order(false, idle, idle).unwrap(), RecordAndWait);
        assert_eq!(streams_order(false, idle, ACTIVE).unwrap(), RecordThenAsk);
        assert_eq!(
            streams_order(false, idle, Capture::Implicit).unwrap(),
            RecordThenAsk
        );
        assert_eq!(streams_order(false, ACTIVE, ACTIVE).unwrap(), RecordAndWait);
        for (producer, consumer) in [
            (ACTIVE, idle),
            (ACTIVE, Capture::Capturing(Some(8))),
            (Capture::Capturing(None), Capture::Capturing(None)),
            (Capture::Implicit, idle),
            (Capture::Implicit, Capture::Implicit),
        ] {
            let refused = streams_order(false, producer, consumer);
            assert!(
                matches!(refused, Err(Error::ProducerCapturing)),
                "{producer:?} -> {consumer:?}: {refused:?}"
            );
        }
        let message = Error::ProducerCapturing.to_string();
        assert!(message.contains("captured"), "{message}");
    }
}
