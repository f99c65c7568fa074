//! Release fences: events recorded on the streams a consumer used an imported tensor on, which
//! its release waits for before the producer's deleter runs (see [`crate::release`]).
//!
//! The wait is on the host (`cuEventSynchronize` on these events only: never a stream, device
//! or context synchronisation), not a `cuStreamWaitEvent` on the producer's stream, because
//! the deleter hands the memory to an allocator whose reuse we cannot see. torch's caching
//! allocator gives a freed block at once to the next allocation on the stream the block was
//! *allocated* on, which need not be torch's current work stream (the only stream the DLPack
//! C exchange API names), and a producer without that API names no stream at all. A wait
//! enqueued on another stream than the one that reuses the memory orders nothing; a host wait
//! is right whichever stream reuses it. It costs time only when the consumer's kernels on the
//! memory are still running at the release, and queued releases need not wait at all: they
//! ask [`ReleaseFence::is_complete`] and stay queued until it says yes.
//!
//! Each event lives in the context of the stream it is recorded on, held (retained, when
//! primary) for the event's whole life ([`super::context`]). An event recorded on a stream
//! being captured into a graph would be a graph node, not a point in the stream's work. A fence
//! whose streams are kept alive until every event is recorded (an import's release, whose
//! [`crate::release::StreamKeeper`]s outlive it) defers the record until the capture has ended,
//! and counts as incomplete meanwhile ([`ReleaseFence::record`]). A fence that keeps nothing
//! alive (an export's consumer, whose stream need only outlive its own tensor) never keeps a
//! handle past its call: a capturing stream there takes the conservative fallback, its
//! context synchronised by the explicit flush ([`ReleaseFence::record_unless_capturing`]). An
//! event whose deferred record fails is not counted as recorded (an event never recorded
//! queries as complete): its context is synchronised instead.
//!
//! Where no event can be recorded (the driver refuses the stream, its context is unknown) the
//! fence falls back to the conservative wait: the whole context of the memory's device (for a
//! capturing stream or a failed deferred record: the stream's own context) is synchronised
//! before the deleter runs. Slower, still ordered; the failure is reported.
//! Synchronising a context while any of its streams is being captured is invalid (and breaks
//! that capture), so the fallback is never complete by itself: only an explicit wait makes it,
//! not while a blocking stream of the context captures ([`ReleaseFence::can_wait`]), and a
//! synchronisation a capture refuses leaves the fence pending, never the deleter run
//! unordered ([`sync_outcome`]).
//!
//! Two streams are one when they are the same stream of the same context ([`fence_key`]): the
//! legacy default streams of two contexts are two streams.

use super::call;
use super::context::{HeldContext, is_capturing};
use crate::error::{Error, Result};
use cudarc::driver::sys;

/// The driver's value for the legacy default stream (`CU_STREAM_LEGACY`).
const LEGACY_DEFAULT: usize = 1;
/// The driver's value for the calling thread's per-thread default stream (`CU_STREAM_PER_THREAD`).
const PER_THREAD_DEFAULT: usize = 2;

#[cfg(test)]
thread_local! {
    /// How many fences this thread has tried to record: lets tests without a driver see what
    /// happens before and after the recording.
    pub(crate) static RECORDS_TRIED_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A test seam (the core's tests, and the bridge's through the `fence-log-for-tests` feature,
/// which only its dev-dependency turns on): what this thread named and asked fences for, in
/// order, so that a test without a driver sees when a stream is named and when, and with
/// which handle and context, each fence is recorded; and a test with one, which context each
/// event went to. Never in a shipped build.
#[cfg(any(test, feature = "fence-log-for-tests"))]
pub mod fence_log {
    use std::cell::RefCell;

    /// One thing a fence's code did on this thread.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Entry {
        /// [`super::FenceStream::named_now`]: the handle, and the context held with an alias
        /// (`None` for a handle, or without a current context).
        Named {
            handle: usize,
            context: Option<usize>,
        },
        /// A fence asked for on a stream ([`super::ReleaseFence::record`] and
        /// [`super::ReleaseFence::record_unless_capturing`]): the handle, the context named
        /// with its alias, and the context its event was made in (`None`: none, the failure
        /// is the fence's).
        Recorded {
            handle: usize,
            alias_context: Option<usize>,
            event_context: Option<usize>,
            /// Whether a capture would defer the record, keeping the handle past the call
            /// ([`super::ReleaseFence::record`]), rather than fall back.
            defers_on_capture: bool,
        },
    }

    thread_local! {
        static LOG: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn push(entry: Entry) {
        LOG.with_borrow_mut(|log| log.push(entry));
    }

    /// What this thread logged since the last call, taken.
    pub fn take() -> Vec<Entry> {
        LOG.take()
    }
}

/// A stream a release is to be ordered after, with the context its aliases (1, 2) meant.
#[derive(Debug)]
pub struct FenceStream {
    /// `CUstream`: 1 the legacy default stream, 2 the per-thread default stream, or a handle.
    pub handle: usize,
    /// For 1 and 2, the context current when the stream was named (`None`: none was). Ignored
    /// for a handle, which names its own context.
    pub alias_context: Option<HeldContext>,
}

impl FenceStream {
    /// The stream `handle` as a consumer names it now (`__dlpack__(stream=…)`, a C exchange
    /// API call): for the aliases 1 and 2, the context current on the calling thread now is
    /// the one they mean, and is held with them, as an import's consumer stream is
    /// ([`crate::ImportedTensor::set_consumer_stream`]); a handle names its own context. Without
    /// a driver, or with no context current, none is held (the memory device's primary context
    /// then stands in, [`context_choice`]).
    pub fn named_now(handle: usize) -> Self {
        let alias_context = match handle {
            LEGACY_DEFAULT | PER_THREAD_DEFAULT => HeldContext::current().ok().flatten(),
            _ => None,
        };
        #[cfg(any(test, feature = "fence-log-for-tests"))]
        fence_log::push(fence_log::Entry::Named {
            handle,
            context: alias_context.as_ref().map(HeldContext::raw),
        });
        Self {
            handle,
            alias_context,
        }
    }
}

/// Which context a fence's event on `handle` lives in: the decision, made without the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextChoice {
    /// The stream's own (`cuStreamGetCtx`).
    OfStream,
    /// The context current when the alias was named.
    NamedWithAlias,
    /// An alias named with no context of the memory's device current: the primary context of
    /// that device.
    PrimaryOfMemoryDevice,
}

/// See [`ContextChoice`]. `alias_device`: the device of the context current when an alias (1,
/// 2) was named, if one was. A DLPack stream is a stream of the tensor's device, so an alias
/// named while another device's context was current means the memory device's stream, not
/// that device's: its primary context stands in.
pub fn context_choice(
    handle: usize,
    alias_device: Option<i32>,
    memory_device: i32,
) -> ContextChoice {
    match handle {
        LEGACY_DEFAULT | PER_THREAD_DEFAULT if alias_device == Some(memory_device) => {
            ContextChoice::NamedWithAlias
        }
        LEGACY_DEFAULT | PER_THREAD_DEFAULT => ContextChoice::PrimaryOfMemoryDevice,
        _ => ContextChoice::OfStream,
    }
}

/// The stream an event is recorded on for `handle`. A per-thread default stream (2) is
/// recorded as the legacy default stream (1): the release may run on another thread than the
/// one whose per-thread stream the consumer used, and an event on the legacy default stream
/// completes only after the work enqueued before it on every blocking stream of the context,
/// per-thread default streams included.
pub fn recorded_stream(handle: usize) -> usize {
    match handle {
        PER_THREAD_DEFAULT => LEGACY_DEFAULT,
        other => other,
    }
}

/// What makes two of a fence's streams one: the context its event lives in and the stream it
/// is recorded on. The aliases name a different stream in each context (the legacy default
/// stream of two contexts are two streams), so the handle alone is not enough.
pub fn fence_key(context: usize, handle: usize) -> (usize, usize) {
    (context, recorded_stream(handle))
}

/// What a context synchronisation's status says (the conservative fallback's wait).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncOutcome {
    /// The context's work is done: the deleter may run.
    Done,
    /// A stream of the context is being captured into a graph, so the synchronisation was
    /// refused (and the capture perhaps broken): nothing is known to be done, the release stays
    /// pending.
    Capturing,
    /// Another failure, for good: reported, and the deleter runs (a retry would fail alike).
    Failed,
}

/// See [`SyncOutcome`].
pub fn sync_outcome(status: sys::CUresult) -> SyncOutcome {
    use sys::CUresult as R;
    match status {
        R::CUDA_SUCCESS => SyncOutcome::Done,
        R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
        | R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        | R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        | R::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
        | R::CUDA_ERROR_STREAM_CAPTURE_UNMATCHED
        | R::CUDA_ERROR_STREAM_CAPTURE_UNJOINED
        | R::CUDA_ERROR_STREAM_CAPTURE_ISOLATION
        | R::CUDA_ERROR_STREAM_CAPTURE_MERGE
        | R::CUDA_ERROR_CAPTURED_EVENT => SyncOutcome::Capturing,
        _ => SyncOutcome::Failed,
    }
}

/// One event, in its stream's context.
struct FenceEvent {
    context: HeldContext,
    event: sys::CUevent,
    /// The stream the event is to be recorded on while a graph capture defers the record;
    /// `None` once recorded.
    awaiting_capture: Option<usize>,
}

/// What a stream being captured does to a fence asked for on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnCapture {
    /// The record waits until the capture has ended (the stream is kept alive until then).
    Defer,
    /// The fence falls back to synchronising the stream's context (nothing keeps the stream).
    Fallback,
}

/// Events recorded on streams, destroyed (and their contexts let go) when the fence is; and
/// the contexts of the conservative fallback.
pub struct ReleaseFence {
    events: Vec<FenceEvent>,
    /// The contexts to synchronise instead, where an event could not be recorded (each once).
    fallback: Vec<HeldContext>,
    /// A deferred record that failed (its context joined the fallback): reported by the
    /// [`Self::wait`] that settles the fence.
    failure: Option<Error>,
}

// SAFETY: CUDA events and contexts are process-wide driver handles that any thread may query,
// wait for or destroy; a fence owns its events and holds their contexts, and every call on
// them pushes the event's context on the calling thread first.
unsafe impl Send for ReleaseFence {}

impl ReleaseFence {
    /// A fence that waits for nothing.
    pub fn none() -> Self {
        Self {
            events: Vec::new(),
            fallback: Vec::new(),
            failure: None,
        }
    }

    /// Records an event on each of `streams` (a stream named twice once: [`fence_key`]).
    /// `memory_device` is the device whose primary context stands in where a stream's context
    /// is unknown, and which the fallback synchronises. Returns the fence, holding every event
    /// that could be recorded (and the fallback where one could not), with the first failure.
    /// On a stream being captured the record is deferred until the capture has ended: the
    /// fence then uses the handle later (in [`Self::is_complete`], [`Self::can_wait`],
    /// [`Self::all_recorded`], [`Self::wait`]), until [`Self::all_recorded`] says yes.
    ///
    /// # Safety
    /// Every handle must be 1, 2 or a live `CUstream`: the driver dereferences it and does not
    /// validate arbitrary values. A stream being captured must stay live until
    /// [`Self::all_recorded`] answers yes (or the fence is dropped). A user context named with
    /// an alias must stay alive until the fence is dropped.
    pub unsafe fn record(memory_device: i32, streams: Vec<FenceStream>) -> (Self, Result<()>) {
        // SAFETY: forwarded from this function's contract.
        unsafe { Self::record_with(memory_device, streams, OnCapture::Defer) }
    }

    /// [`Self::record`] for streams that need only be live during this call: a stream being
    /// captured gets no event (none can be recorded now, and the handle is not kept for
    /// later); its context joins the conservative fallback instead, which only an explicit
    /// wait synchronises, once no blocking stream of that context captures
    /// ([`Self::can_wait`]). Reported as [`Error::ReleaseDuringCapture`].
    ///
    /// # Safety
    /// Every handle must be 1, 2 or a `CUstream` live during this call. A user context named
    /// with an alias must stay alive until the fence is dropped.
    pub unsafe fn record_unless_capturing(
        memory_device: i32,
        streams: Vec<FenceStream>,
    ) -> (Self, Result<()>) {
        // SAFETY: forwarded from this function's contract (no handle is kept past the call).
        unsafe { Self::record_with(memory_device, streams, OnCapture::Fallback) }
    }

    /// # Safety
    /// As [`Self::record`] for [`OnCapture::Defer`], as [`Self::record_unless_capturing`] for
    /// [`OnCapture::Fallback`].
    unsafe fn record_with(
        memory_device: i32,
        streams: Vec<FenceStream>,
        on_capture: OnCapture,
    ) -> (Self, Result<()>) {
        #[cfg(test)]
        RECORDS_TRIED_HERE.set(RECORDS_TRIED_HERE.get() + 1);
        let mut fence = Self::none();
        let mut outcome = Ok(());
        let mut seen: Vec<(usize, usize)> = Vec::with_capacity(streams.len());
        for stream in streams {
            let handle = stream.handle;
            #[cfg(any(test, feature = "fence-log-for-tests"))]
            let alias_context = stream.alias_context.as_ref().map(HeldContext::raw);
            // SAFETY: a stream of this function's contract.
            let context = unsafe { event_context(memory_device, stream) };
            #[cfg(any(test, feature = "fence-log-for-tests"))]
            fence_log::push(fence_log::Entry::Recorded {
                handle,
                alias_context,
                event_context: context.as_ref().ok().map(HeldContext::raw),
                defers_on_capture: on_capture == OnCapture::Defer,
            });
            let event = context.and_then(|context| {
                let key = fence_key(context.raw(), handle);
                if seen.contains(&key) {
                    return Ok(Recorded::Twice);
                }
                seen.push(key);
                // SAFETY: as above; `context` is the stream's.
                unsafe { fence_event(context, recorded_stream(handle), on_capture) }
            });
            match event {
                Ok(Recorded::Event(event)) => fence.events.push(event),
                Ok(Recorded::Twice) => {}
                Ok(Recorded::Capturing(context)) => {
                    fence.fall_back_to(context);
                    outcome = outcome.and(Err(Error::ReleaseDuringCapture));
                }
                Err(error) => {
                    if let Ok(primary) = HeldContext::primary(memory_device) {
                        fence.fall_back_to(primary);
                    }
                    outcome = outcome.and(Err(error));
                }
            }
        }
        (fence, outcome)
    }

    /// Adds `context` to the fallback's contexts, once.
    fn fall_back_to(&mut self, context: HeldContext) {
        if !self.fallback.iter().any(|held| held.raw() == context.raw()) {
            self.fallback.push(context);
        }
    }

    /// A fence that only synchronises the primary context of `memory_device` (a release that
    /// named no stream to wait for), with the failure to hold it, if any.
    pub fn conservative(memory_device: i32) -> (Self, Result<()>) {
        match HeldContext::primary(memory_device) {
            Ok(context) => {
                let mut fence = Self::none();
                fence.fallback.push(context);
                (fence, Ok(()))
            }
            Err(error) => (Self::none(), Err(error)),
        }
    }

    /// Takes over `other`'s events, fallback contexts and failure: one fence that waits for
    /// both. Events recorded at different times on the same stream are both kept (the later
    /// completes last; waiting for both costs nothing more).
    pub fn absorb(&mut self, mut other: ReleaseFence) {
        self.events.append(&mut other.events);
        for context in other.fallback.drain(..) {
            self.fall_back_to(context);
        }
        if self.failure.is_none() {
            self.failure = other.failure.take();
        }
        // `other` is empty now: its drop destroys nothing.
    }

    /// How many events the fence holds (for tests: one per stream of each context).
    #[cfg(test)]
    pub(crate) fn event_count(&self) -> usize {
        self.events.len()
    }

    /// Whether this fence waits by synchronising a whole context (the fallback).
    pub fn is_conservative(&self) -> bool {
        !self.fallback.is_empty()
    }

    /// Whether this fence waits for anything (no driver, or nothing recorded: it does not).
    pub fn orders_anything(&self) -> bool {
        !self.events.is_empty() || !self.fallback.is_empty()
    }

    /// Whether every wait is done: no event deferred by a capture, no context left to
    /// synchronise. Only then may the deleter run after [`Self::wait`].
    pub fn is_settled(&self) -> bool {
        self.fallback.is_empty() && self.events.iter().all(|e| e.awaiting_capture.is_none())
    }

    /// Whether the consumer's work is known to be complete, so the deleter may run without a
    /// wait. Events deferred by a capture are recorded here once it has ended. A fallback is
    /// never complete without its wait; a capture still running, never; a failed query counts
    /// as complete (the failure is the driver's answer for good, and [`Self::wait`] reports it).
    pub fn is_complete(&mut self) -> bool {
        if !self.all_recorded() || !self.fallback.is_empty() {
            return false;
        }
        self.events.iter().all(|event| {
            let Ok(_current) = event.context.enter() else {
                return true;
            };
            // SAFETY: a live event this fence created; its context is current.
            let status = unsafe { sys::cuEventQuery(event.event) };
            !is_still_running(status)
        })
    }

    /// Whether [`Self::wait`] would finish by itself: false while a stream is being captured
    /// (the capture ends only when its owner ends it, perhaps on this very thread), and, for the
    /// fallback, while a blocking stream of one of its contexts captures (the legacy default
    /// stream answers `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`): synchronising the context would
    /// break that capture. A capture on a non-blocking stream cannot be seen from here; the
    /// synchronisation then fails, and the release stays pending ([`SyncOutcome::Capturing`]).
    pub fn can_wait(&mut self) -> bool {
        self.all_recorded() && !self.fallback.iter().any(fallback_blocked)
    }

    /// Whether every event is recorded (those a capture deferred are recorded here once it has
    /// ended): the streams are not needed any more. A deferred record that fails (the stream
    /// is gone, the driver refuses it) is not counted as recorded: its event is dropped and its
    /// context joins the fallback, and the failure is reported by [`Self::wait`].
    pub fn all_recorded(&mut self) -> bool {
        let mut all = true;
        let mut index = 0;
        while index < self.events.len() {
            // SAFETY: a deferred stream is live until every event is recorded (`record`'s
            // contract).
            match unsafe { self.events[index].record_if_capture_ended() } {
                DeferredRecord::Done => index += 1,
                DeferredRecord::Waiting => {
                    all = false;
                    index += 1;
                }
                DeferredRecord::Failed(error) => {
                    let event = self.events.swap_remove(index);
                    let context = event.destroy_unrecorded();
                    self.fall_back_to(context);
                    self.failure.get_or_insert(error);
                }
            }
        }
        all
    }

    /// Blocks the calling thread until every event has completed (each was created with
    /// `CU_EVENT_BLOCKING_SYNC`, so the thread sleeps rather than spins) or the fallback's
    /// contexts are synchronised. Returns the first failure; everything that can be waited for
    /// is waited for regardless. What a capture keeps from being waited for (an event whose
    /// stream is still being captured, a context one of whose streams captures) stays, and the
    /// fence is then not [`Self::is_settled`]: that is [`Error::ReleaseDuringCapture`] (ask
    /// [`Self::can_wait`] first).
    pub fn wait(&mut self) -> Result<()> {
        let mut outcome = Ok(());
        if !self.can_wait() {
            outcome = Err(Error::ReleaseDuringCapture);
        }
        for event in &self.events {
            if event.awaiting_capture.is_some() {
                continue;
            }
            let waited = event.context.enter().and_then(|_current| {
                // SAFETY: a live event this fence created; its context is current.
                let status = unsafe { sys::cuEventSynchronize(event.event) };
                call(status, "cuEventSynchronize")
            });
            outcome = outcome.and(waited);
        }
        let mut left = Vec::new();
        for context in std::mem::take(&mut self.fallback) {
            if fallback_blocked(&context) {
                left.push(context);
                continue;
            }
            let status = context.enter().map(|_current| {
                // SAFETY: a context is current; this waits for its work only.
                unsafe { sys::cuCtxSynchronize() }
            });
            match status.map(|status| (sync_outcome(status), status)) {
                Ok((SyncOutcome::Done, _)) => {}
                Ok((SyncOutcome::Capturing, _)) => {
                    outcome = outcome.and(Err(Error::ReleaseDuringCapture));
                    left.push(context);
                }
                Ok((SyncOutcome::Failed, status)) => {
                    outcome = outcome.and(call(status, "cuCtxSynchronize"));
                }
                Err(error) => outcome = outcome.and(Err(error)),
            }
        }
        self.fallback = left;
        if self.is_settled() {
            // A failed deferred record came first; kept until then (an unsettled wait's outcome
            // is not reported: the release stays pending and waits again).
            let outcome = self.failure.take().map_or(outcome, Err);
            outcome.and(self.destroy())
        } else {
            outcome
        }
    }

    /// Destroys the events (each with its context current); returns the first failure.
    fn destroy(&mut self) -> Result<()> {
        let mut outcome = Ok(());
        for event in self.events.drain(..) {
            let destroyed = event.context.enter().and_then(|_current| {
                // SAFETY: a live event this fence created, destroyed once (drained).
                let status = unsafe { sys::cuEventDestroy_v2(event.event) };
                call(status, "cuEventDestroy")
            });
            outcome = outcome.and(destroyed);
            // The context is let go after its event: `event` drops here.
        }
        outcome
    }
}

impl Drop for ReleaseFence {
    fn drop(&mut self) {
        // Errors are ignored: Drop never panics and has no caller to tell.
        let _ = self.destroy();
    }
}

/// Whether synchronising `context` now would break a graph capture that can be seen: a
/// blocking stream of it capturing (its legacy default stream says so). A failed query is no
/// such sign (the synchronisation reports what is wrong).
fn fallback_blocked(context: &HeldContext) -> bool {
    let Ok(_current) = context.enter() else {
        return false;
    };
    // SAFETY: the legacy default stream of the context just made current.
    matches!(unsafe { is_capturing(LEGACY_DEFAULT) }, Ok(true))
}

/// What became of an event whose record a capture deferred.
enum DeferredRecord {
    /// Recorded (now or before).
    Done,
    /// Its stream is still being captured.
    Waiting,
    /// The record failed: the event was never recorded, so it would query as complete at
    /// once, while the stream's work may still run.
    Failed(Error),
}

/// What a deferred record comes to, given whether its stream still captures (`capturing`,
/// the driver's answer) and the record itself (`record`, called only once the capture has
/// ended). Any failure is [`DeferredRecord::Failed`], never counted as recorded.
fn deferred_record(capturing: Result<bool>, record: impl FnOnce() -> Result<()>) -> DeferredRecord {
    match capturing {
        Ok(true) => DeferredRecord::Waiting,
        Ok(false) => match record() {
            Ok(()) => DeferredRecord::Done,
            Err(error) => DeferredRecord::Failed(error),
        },
        Err(error) => DeferredRecord::Failed(error),
    }
}

impl FenceEvent {
    /// Records the event once its stream is no longer being captured.
    ///
    /// # Safety
    /// The deferred stream must still be live.
    unsafe fn record_if_capture_ended(&mut self) -> DeferredRecord {
        let Some(stream) = self.awaiting_capture else {
            return DeferredRecord::Done;
        };
        let outcome = match self.context.enter() {
            Err(error) => DeferredRecord::Failed(error),
            Ok(_current) => deferred_record(
                // SAFETY: the stream is live (contract); its context is current.
                unsafe { is_capturing(stream) },
                || {
                    // SAFETY: our event; the stream is live and not capturing; its context is
                    // current.
                    let status = unsafe { sys::cuEventRecord(self.event, stream as sys::CUstream) };
                    call(status, "cuEventRecord")
                },
            ),
        };
        if !matches!(outcome, DeferredRecord::Waiting) {
            self.awaiting_capture = None;
        }
        outcome
    }

    /// Destroys an event that was never recorded, and gives back its context (for the fallback
    /// to synchronise).
    fn destroy_unrecorded(self) -> HeldContext {
        if let Ok(_current) = self.context.enter() {
            // SAFETY: our event, destroyed once (consumed here); its context is current.
            let _ = unsafe { sys::cuEventDestroy_v2(self.event) };
        }
        self.context
    }
}

/// Whether a query's status says the work is still going (or cannot be asked about yet).
fn is_still_running(status: sys::CUresult) -> bool {
    use sys::CUresult as R;
    matches!(
        status,
        R::CUDA_ERROR_NOT_READY
            | R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
            | R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
            | R::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
            | R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
    )
}

/// The context `stream`'s event lives in (see [`context_choice`]).
///
/// # Safety
/// `stream.handle` must be 1, 2 or a live `CUstream`.
unsafe fn event_context(memory_device: i32, stream: FenceStream) -> Result<HeldContext> {
    let alias_device = stream.alias_context.as_ref().map(HeldContext::device);
    match (
        context_choice(stream.handle, alias_device, memory_device),
        stream.alias_context,
    ) {
        // SAFETY: a live stream (contract).
        (ContextChoice::OfStream, _) => unsafe { HeldContext::of_stream(stream.handle) },
        (ContextChoice::NamedWithAlias, Some(context)) => Ok(context),
        _ => HeldContext::primary(memory_device),
    }
}

/// What [`fence_event`] made of a stream.
enum Recorded {
    /// An event, recorded (or its record deferred by a capture).
    Event(FenceEvent),
    /// A stream the fence has an event on already.
    Twice,
    /// A stream being captured, with no event ([`OnCapture::Fallback`]): its context.
    Capturing(HeldContext),
}

/// Creates an event in `context` (`handle`'s) and records it on `handle`. While the stream is
/// being captured (for the legacy default stream: while a blocking stream of its context is,
/// see [`super::context::capture_answer`]) the record is deferred ([`OnCapture::Defer`]), or
/// no event is made and the context is handed back ([`OnCapture::Fallback`]).
///
/// # Safety
/// `handle` must be 1 or a live `CUstream` of `context`.
unsafe fn fence_event(
    context: HeldContext,
    handle: usize,
    on_capture: OnCapture,
) -> Result<Recorded> {
    let current = context.enter()?;
    // SAFETY: a live stream (contract); its context is current.
    let capturing = unsafe { is_capturing(handle) }?;
    if capturing && on_capture == OnCapture::Fallback {
        drop(current);
        return Ok(Recorded::Capturing(context));
    }
    let mut event: sys::CUevent = std::ptr::null_mut();
    let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32
        | sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
    // SAFETY: `event` is a valid out-pointer; the stream's context is current.
    let status = unsafe { sys::cuEventCreate(&mut event, flags) };
    call(status, "cuEventCreate")?;
    let recorded = if capturing {
        Ok(Some(handle))
    } else {
        // SAFETY: `event` was just created in the stream's context; the stream is live.
        let status = unsafe { sys::cuEventRecord(event, handle as sys::CUstream) };
        call(status, "cuEventRecord").map(|()| None)
    };
    drop(current);
    match recorded {
        Ok(awaiting_capture) => Ok(Recorded::Event(FenceEvent {
            context,
            event,
            awaiting_capture,
        })),
        Err(error) => {
            if let Ok(_current) = context.enter() {
                // SAFETY: our event, recorded nowhere, destroyed once; its context is current.
                let _ = unsafe { sys::cuEventDestroy_v2(event) };
            }
            Err(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_live_in_the_streams_context_or_the_one_its_alias_meant() {
        assert_eq!(context_choice(0x7f00, None, 0), ContextChoice::OfStream);
        assert_eq!(
            context_choice(0x7f00, Some(0), 0),
            ContextChoice::OfStream,
            "a handle names its own context"
        );
        for alias in [1, 2] {
            assert_eq!(
                context_choice(alias, Some(1), 1),
                ContextChoice::NamedWithAlias
            );
            assert_eq!(
                context_choice(alias, None, 0),
                ContextChoice::PrimaryOfMemoryDevice
            );
            assert_eq!(
                context_choice(alias, Some(0), 1),
                ContextChoice::PrimaryOfMemoryDevice,
                "an alias named in another device's context means the memory device's stream"
            );
        }
        assert_eq!(recorded_stream(2), 1);
        assert_eq!(recorded_stream(1), 1);
        assert_eq!(recorded_stream(0x7f00), 0x7f00);
    }

    #[test]
    fn one_event_per_stream_of_each_context() {
        let (a, b) = (0xa000, 0xb000);
        assert_eq!(
            fence_key(a, 1),
            fence_key(a, 2),
            "the per-thread stream is recorded as the legacy one"
        );
        assert_ne!(
            fence_key(a, 1),
            fence_key(b, 1),
            "the legacy streams of two contexts are two streams"
        );
        assert_eq!(fence_key(a, 0x7f00), fence_key(a, 0x7f00));
        assert_ne!(fence_key(a, 0x7f00), fence_key(a, 1));
    }

    #[test]
    fn a_context_sync_refused_by_a_capture_leaves_the_release_pending() {
        use sys::CUresult as R;
        assert_eq!(sync_outcome(R::CUDA_SUCCESS), SyncOutcome::Done);
        for capture in [
            R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
            R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
            R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
            R::CUDA_ERROR_CAPTURED_EVENT,
        ] {
            assert_eq!(sync_outcome(capture), SyncOutcome::Capturing, "{capture:?}");
        }
        assert_eq!(
            sync_outcome(R::CUDA_ERROR_ILLEGAL_ADDRESS),
            SyncOutcome::Failed
        );
    }

    #[test]
    fn a_capture_counts_as_still_running_and_other_failures_as_done() {
        use sys::CUresult as R;
        assert!(is_still_running(R::CUDA_ERROR_NOT_READY));
        assert!(is_still_running(R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED));
        assert!(is_still_running(R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED));
        assert!(is_still_running(R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT));
        assert!(!is_still_running(R::CUDA_SUCCESS));
        assert!(!is_still_running(R::CUDA_ERROR_INVALID_HANDLE));
    }

    /// Holds with and without a driver: a deferred record that fails (the stream query or the
    /// record itself) is a failure, never an event counted as recorded (an event never
    /// recorded queries as complete while the stream's work may still run).
    #[test]
    fn a_failed_deferred_record_is_never_counted_as_recorded() {
        let never = || -> Result<()> { panic!("recorded while the capture runs") };
        assert!(matches!(
            deferred_record(Ok(true), never),
            DeferredRecord::Waiting
        ));
        assert!(matches!(
            deferred_record(Ok(false), || Ok(())),
            DeferredRecord::Done
        ));
        let refused = || Err(Error::NoCudaDriver);
        assert!(matches!(
            deferred_record(Ok(false), refused),
            DeferredRecord::Failed(Error::NoCudaDriver)
        ));
        assert!(matches!(
            deferred_record(Err(Error::NoCudaDriver), never),
            DeferredRecord::Failed(Error::NoCudaDriver)
        ));
    }

    #[test]
    fn without_a_driver_a_fence_records_nothing_and_waits_for_nothing() {
        let here = super::super::driver();
        assert!(
            matches!(here, Err(Error::NoCudaDriver)),
            "asserts the no-driver behaviour, but this machine answers {here:?}"
        );
        let streams = vec![
            FenceStream {
                handle: 0x1234,
                alias_context: None,
            },
            FenceStream {
                handle: 2,
                alias_context: None,
            },
        ];
        // SAFETY: without a driver nothing is dereferenced.
        let (mut fence, recorded) = unsafe { ReleaseFence::record(0, streams) };
        assert!(matches!(recorded, Err(Error::NoCudaDriver)), "{recorded:?}");
        assert!(!fence.orders_anything());
        assert!(fence.is_complete() && fence.can_wait() && fence.is_settled());
        fence.wait().unwrap();
        let (fence, held) = ReleaseFence::conservative(0);
        assert!(matches!(held, Err(Error::NoCudaDriver)));
        assert!(!fence.orders_anything());
    }
}
