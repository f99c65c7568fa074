//! Release ordering: an imported tensor on its way to its producer's deleter.
//!
//! DLPack leaves it to the consumer. A GPU producer's deleter hands the memory back at once
//! (torch's caching allocator gives it to the next tensor allocated on its stream), so the
//! work the consumer enqueued on the memory must be complete before the deleter runs. So an
//! imported CUDA tensor remembers the stream its consumer named at import
//! ([`crate::ImportedTensor::set_consumer_stream`]: where the producer made the data ready,
//! and where the consumer works on it), and releasing it
//! ([`crate::ImportedTensor::into_release`], or [`crate::ImportedTensor::into_release_after`]
//! with the releasing caller's stream as well) records an event on those streams. The
//! [`PendingRelease`] it becomes runs the deleter only after the events:
//! [`PendingRelease::complete`] (and dropping it) waits for them on the host, and a queue of
//! releases asks [`PendingRelease::is_ready`] and keeps the ones that are not. Why the host
//! waits rather than the producer's stream: [`crate::cuda::fence`].
//!
//! Host memory and empty tensors need no fence: their releases run the deleter at once and
//! make no driver call. Device memory imported with `stream=-1` (the consumer said it orders
//! itself) is ordered after the releasing caller's stream; a release that names none cannot
//! know what to wait for, so it synchronises the device's context and says so
//! ([`Error::ReleaseNeedsStream`]).
//!
//! The consumer's stream must still exist when the release records its event there, and a
//! consumer may not be able to promise that by itself: CUDA.jl destroys a task's stream in its
//! `CuStream`'s finalizer, and when the importing task has ended, that finalizer and the one
//! that releases the imported array run in the same collection, in no order. Such a consumer
//! hands the tensor a [`StreamKeeper`] (for Julia: a root of the `CuStream`), which the tensor
//! hands to its release, which drops it once the event is recorded (later than the release
//! call while a graph capture defers the record), and never before
//! ([`crate::ImportedTensor::keep_consumer_stream`]). The stream may be destroyed from then on:
//! its work, the event included, still completes (`cuStreamDestroy` returns at once and the
//! driver frees the stream once its work is done). Recording an event at import instead would
//! not order the work the consumer enqueues after the import.
//!
//! Errors never keep a tensor alive and never let its deleter run unordered: when an event
//! cannot be recorded (the stream handle was destroyed, the context is broken) the release falls
//! back to synchronising the context of the memory's device, runs the deleter, and returns the
//! failure to whoever can report it (a queued release, which has no caller, prints it). Only
//! without a driver, where no device work can exist, does nothing wait. A leaked tensor would
//! hold the producer's memory (and a Python object) for the rest of the process.
//!
//! Exports need the mirror of this: a consumer (torch) calls an exported tensor's deleter
//! without waiting for its own streams, and the producer's allocator (CUDA.jl's pool) reuses
//! the memory on its own stream as soon as it is given back. So each exported tensor keeps the
//! stream its consumer was handed the memory on ([`export_release_stream`]; for the aliases 1
//! and 2, with the context current then: [`FenceStream::named_now`]), and its deleter records
//! an event there at once ([`ConsumerFences::record`]): a consumer's stream need only outlive
//! that consumer's own tensor (a CuPy `Stream` may be destroyed right after its array), and
//! no handle is kept past that record (see the capture below). The memory goes back once
//! every holder is released and all those events have completed, through a release queued
//! like an import's ([`PendingRelease::of_export`]), never waited for in a deleter; where no
//! event is still running, the caller decides whether its thread may drop the owner
//! ([`crate::export::given_back::GiveBack`]).
//!
//! A graph capture changes two things. An event cannot be recorded on a stream being captured
//! (it would be a node of the graph). An import's release waits until the capture has ended
//! to record it, and stays queued meanwhile: its stream keepers keep the stream alive until
//! then. An export's consumer keeps nothing alive past its own tensor (its stream may be
//! destroyed once the capture ends), so its release records nothing on a capturing stream and
//! takes the conservative fallback instead: the stream's context synchronised by the explicit
//! flush, and the failure reported ([`Error::ReleaseDuringCapture`]). And the conservative
//! fallback (synchronising a context) would break a capture on any stream of that context: it
//! is left to the explicit flush, and a synchronisation a capture refuses leaves the release
//! pending ([`PendingRelease::wait`]).
//!
//! For the GPU check only: in a build with the `unordered-releases-for-tests` feature
//! (scripts/gpu_check.sh's; never a shipped one), `RSDLPACK_TEST_UNORDERED_RELEASES=1` in the
//! environment (read once per process) makes releases record no fence, so that the check can
//! show the corruption it guards against (test/gpu/check_gpu.py).

use crate::cuda::context::HeldContext;
use crate::cuda::fence::{FenceStream, ReleaseFence};
use crate::descriptor::TensorDescriptor;
use crate::device::DeviceKind;
use crate::error::{Error, Result};
use crate::managed::ManagedTensor;
use crate::stream::StreamRequest;
use std::sync::Mutex;
#[cfg(feature = "unordered-releases-for-tests")]
use std::sync::OnceLock;

/// The environment variable that turns release ordering off, for the GPU check's negative case.
pub const UNORDERED_RELEASES_FOR_TESTS: &str = "RSDLPACK_TEST_UNORDERED_RELEASES";

/// Whether [`UNORDERED_RELEASES_FOR_TESTS`] is set to 1 (read once), in a build with the
/// `unordered-releases-for-tests` feature; never otherwise.
#[cfg(feature = "unordered-releases-for-tests")]
pub(crate) fn ordering_disabled() -> bool {
    static DISABLED: OnceLock<bool> = OnceLock::new();
    *DISABLED.get_or_init(|| {
        std::env::var_os(UNORDERED_RELEASES_FOR_TESTS).is_some_and(|value| value == "1")
    })
}

#[cfg(not(feature = "unordered-releases-for-tests"))]
pub(crate) fn ordering_disabled() -> bool {
    false
}

/// The CUDA device whose streams can use `descriptor`'s memory, or `None` when no device
/// work can touch it (host memory, or an empty tensor). Pinned host memory belongs to no
/// device: the device of the context current now stands for it
/// ([`crate::cuda::device_of_memory`]).
pub fn ordering_device(descriptor: &TensorDescriptor) -> Option<i32> {
    let device = descriptor.device();
    if descriptor.element_count() == 0 || !device.kind.is_cuda() {
        return None;
    }
    let current = match device.kind {
        DeviceKind::CudaHost => crate::cuda::current_device(),
        _ => None,
    };
    crate::cuda::device_of_memory(device.kind, device.id, current)
}

/// What keeps a consumer's stream alive for an imported tensor's release (see the module
/// docs): a token and the function that gives it back (the Python bridge: a Julia root id,
/// queued for Julia to unroot). Dropping it gives the token back, once.
#[derive(Debug)]
pub struct StreamKeeper {
    token: u64,
    give_back: fn(u64),
}

impl StreamKeeper {
    /// A keeper that calls `give_back(token)` when dropped. `give_back` must not unwind.
    pub fn new(token: u64, give_back: fn(u64)) -> Self {
        Self { token, give_back }
    }
}

impl Drop for StreamKeeper {
    fn drop(&mut self) {
        (self.give_back)(self.token);
    }
}

/// What a [`PendingRelease`] lets go of when it completes.
enum Releasing {
    /// An imported tensor: its producer's deleter runs.
    Tensor(#[allow(dead_code)] ManagedTensor),
    /// What keeps an export's memory alive (a Julia array's root, a foreign tensor, the
    /// producer's ready event): dropped.
    Owner(#[allow(dead_code)] Box<dyn Send>),
}

/// A producer's tensor whose deleter is to run once the consumer's work on it is complete.
/// Dropping it waits for that work on the host, then runs the deleter; [`Self::complete`]
/// does the same and says what failed.
pub struct PendingRelease {
    /// `Some` until the deleter has run.
    managed: Option<Releasing>,
    fence: Option<ReleaseFence>,
    /// A failure while recording the fence, returned by [`Self::complete`].
    error: Option<Error>,
    /// Keep the consumer's stream (and the caller's, where one was named with a keeper) alive
    /// until every event is recorded on them.
    stream_keepers: Vec<StreamKeeper>,
}

impl PendingRelease {
    /// A release with nothing to wait for.
    pub fn unordered(managed: ManagedTensor) -> Self {
        Self {
            managed: Some(Releasing::Tensor(managed)),
            fence: None,
            error: None,
            stream_keepers: Vec::new(),
        }
    }

    /// A release of `managed` ordered after the work enqueued so far on the consumer's stream
    /// and on `caller` (a `CUstream` value), when its memory is on a device: `device`, its
    /// [`ordering_device`]. `stream_keepers` keep those streams alive until the events are
    /// recorded on them (a capture may defer a record past this call).
    ///
    /// # Safety
    /// The consumer's stream and `caller` must each be 1, 2 or a live `CUstream` of the
    /// tensor's device.
    pub(crate) unsafe fn after(
        managed: ManagedTensor,
        device: Option<i32>,
        consumer: ConsumerOrdering,
        caller: Option<usize>,
        stream_keepers: Vec<StreamKeeper>,
    ) -> Self {
        let Some(device) = device else {
            return Self::unordered(managed);
        };
        if ordering_disabled() {
            return Self::unordered(managed);
        }
        // The caller's aliases mean the context current on the releasing thread.
        let caller = caller.map(|handle| FenceStream {
            handle,
            alias_context: (handle <= 2)
                .then(|| HeldContext::current().ok().flatten())
                .flatten(),
        });
        let (self_ordered, streams) = match consumer {
            ConsumerOrdering::Stream(stream) => {
                (false, std::iter::once(stream).chain(caller).collect())
            }
            ConsumerOrdering::SelfOrdered => (true, caller.into_iter().collect::<Vec<_>>()),
            ConsumerOrdering::Unknown => (false, caller.into_iter().collect()),
        };
        let (fence, error) = if !streams.is_empty() {
            // SAFETY: the streams are 1, 2 or live streams of the tensor's device (contract).
            let (fence, recorded) = unsafe { ReleaseFence::record(device, streams) };
            (fence, recorded.err())
        } else if self_ordered {
            // Nothing says which stream's work to wait for: the whole context, and why.
            let (fence, _) = ReleaseFence::conservative(device);
            (fence, Some(Error::ReleaseNeedsStream))
        } else {
            return Self::unordered(managed);
        };
        let mut release = Self {
            managed: Some(Releasing::Tensor(managed)),
            fence: Some(fence),
            error,
            stream_keepers,
        };
        release.let_streams_go_once_recorded();
        release
    }

    /// Drops the stream keepers once every event is recorded (a capture may defer one).
    fn let_streams_go_once_recorded(&mut self) {
        if !self.stream_keepers.is_empty()
            && self.fence.as_mut().is_none_or(ReleaseFence::all_recorded)
        {
            self.stream_keepers.clear();
        }
    }

    /// Whether the deleter may run without waiting: no fence, or every event completed.
    pub fn is_ready(&mut self) -> bool {
        let ready = self.fence.as_mut().is_none_or(ReleaseFence::is_complete);
        self.let_streams_go_once_recorded();
        ready
    }

    /// Whether a host wait for the consumer's work would finish by itself: false while a stream
    /// it was used on is being captured into a graph (keep such a release queued).
    pub fn can_wait(&mut self) -> bool {
        let can = self.fence.as_mut().is_none_or(ReleaseFence::can_wait);
        self.let_streams_go_once_recorded();
        can
    }

    /// Whether the release waits by synchronising a context (the fallback where no event could
    /// be recorded: the memory device's, or a capturing stream's own): never complete by
    /// itself, so a queue must wait for it.
    pub fn is_conservative(&self) -> bool {
        self.fence
            .as_ref()
            .is_some_and(ReleaseFence::is_conservative)
    }

    /// The release of an export's memory: `owner` (what keeps it alive: a Julia array's root,
    /// a foreign tensor whose deleter gives it back) is dropped once every event of `fence`
    /// has completed: those its consumers' releases recorded ([`ConsumerFences`]). `error`:
    /// the first failure while recording them, returned by [`Self::complete`].
    pub fn of_export(owner: Box<dyn Send>, fence: ReleaseFence, error: Option<Error>) -> Self {
        Self {
            managed: Some(Releasing::Owner(owner)),
            fence: Some(fence),
            error,
            stream_keepers: Vec::new(),
        }
    }

    /// The release of an export's memory with nothing to wait for: `owner` is dropped when the
    /// release completes, for a caller that may not drop it on its own thread (a foreign
    /// producer's deleter that needs the GIL), and queues it instead.
    pub fn unordered_owner(owner: Box<dyn Send>) -> Self {
        Self {
            managed: Some(Releasing::Owner(owner)),
            fence: None,
            error: None,
            stream_keepers: Vec::new(),
        }
    }

    /// The failure met so far (recording the fence), taken: [`Self::complete`] will not
    /// return it again. For a caller that reports it now and queues the release.
    pub fn take_error(&mut self) -> Option<Error> {
        self.error.take()
    }

    /// Whether a fence orders this release (for tests: host memory has none).
    pub fn is_ordered(&self) -> bool {
        self.fence.is_some()
    }

    /// Waits on the host for the consumer's work without running the deleter yet (so that a
    /// caller can wait without a lock the deleter needs, such as Python's GIL). A failure is
    /// kept for [`Self::complete`]. A wait that a graph capture kept from finishing (an event
    /// still deferred, a context synchronisation the capture refused) leaves the release
    /// pending: [`Self::is_waited`] says so, and a queue keeps it.
    pub fn wait(&mut self) {
        let Some(fence) = self.fence.as_mut() else {
            return;
        };
        let waited = fence.wait();
        if fence.is_settled() {
            self.fence = None;
            if let Err(error) = waited {
                self.error.get_or_insert(error);
            }
        }
    }

    /// Whether nothing is left to wait for before the deleter may run (true before any wait
    /// for a release that orders after nothing; false after a wait a capture kept from
    /// finishing).
    pub fn is_waited(&self) -> bool {
        self.fence.is_none()
    }

    /// Waits on the host for the consumer's work, then runs the deleter — always, also after a
    /// failure, which it then returns (the first: recording, then waiting). A capture that
    /// keeps the wait from finishing is [`Error::ReleaseDuringCapture`]: ask [`Self::can_wait`]
    /// first, as the queues do.
    pub fn complete(mut self) -> Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        self.wait();
        if self.fence.take().is_some() {
            self.error.get_or_insert(Error::ReleaseDuringCapture);
        }
        self.stream_keepers.clear();
        drop(self.managed.take());
        self.error.take().map_or(Ok(()), Err)
    }
}

impl Drop for PendingRelease {
    fn drop(&mut self) {
        // Drop has no caller to tell (use `complete` to hear them): a failure to order a release
        // on a machine with a driver is printed, since the release waited for more than it had
        // to or for less than it should.
        if let Err(error) = self.finish()
            && !matches!(error, Error::NoCudaDriver)
        {
            eprintln!("RsDLPack: a queued CUDA release: {error}");
        }
    }
}

/// The stream an export's release is ordered after, for a consumer that asked for the memory
/// with `request` (its `__dlpack__(stream=…)`): the stream it works on the memory on (the
/// legacy default stream for `None`), for memory that streams order (CUDA and managed); none
/// for `-1` (the consumer orders its own work, and its release) and for memory no stream
/// orders. The C exchange API's consumers work on the current stream, which its
/// `current_work_stream` reports as the legacy default stream:
/// [`crate::export::plan::exchange_api_stream`] gives the request.
pub fn export_release_stream(kind: DeviceKind, request: StreamRequest) -> Option<usize> {
    match kind {
        DeviceKind::Cuda | DeviceKind::CudaManaged => request.cuda_handle(),
        _ => None,
    }
}

/// The fences an export's consumers left: each consumer's release (its tensor's deleter)
/// records an event, at once, on the stream that consumer was handed the memory on
/// ([`Self::record`]), and the export's memory goes back only once every holder is released
/// and all of them have completed ([`crate::export::given_back::give_back_after`]). Recording
/// at each consumer's own release, not at the last holder's, matters: a consumer's stream need
/// only live as long as that consumer's tensor, and may be gone by the time the last holder
/// lets go. Fences found complete are let go as new ones come, so an export consumed many
/// times holds only the events still running.
#[derive(Default)]
pub struct ConsumerFences(Mutex<Recorded>);

#[derive(Default)]
struct Recorded {
    /// Fences not yet known to be complete.
    fences: Vec<ReleaseFence>,
    /// The first failure while recording.
    error: Option<Error>,
}

impl ConsumerFences {
    pub const fn new() -> Self {
        Self(Mutex::new(Recorded {
            fences: Vec::new(),
            error: None,
        }))
    }

    /// Records, now, an event on `stream`: the stream one consumer was handed the memory
    /// `descriptor` describes on, as that consumer releases its tensor. Nothing for memory no
    /// device works on (host memory, an empty tensor) or with ordering switched off for a
    /// test. Never waits and runs no Python: any thread (a deleter runs where its consumer
    /// frees the tensor). The handle is not kept past this call: a stream being captured into
    /// a graph gets no event (it would be a node of the graph), and an event that cannot be
    /// recorded gets none either; both leave the conservative fallback, a context synchronised
    /// by the explicit flush ([`ReleaseFence::record_unless_capturing`]), and the failure,
    /// which the release reports.
    ///
    /// # Safety
    /// `stream.handle` is 1, 2 or a `CUstream` of the memory's device that is live now (the
    /// consumer's, whose tensor is being released: DLPack asks it to outlive the tensor). A
    /// user context named with an alias (held in `stream.alias_context`) must stay alive until
    /// the export's memory has been released (the fence is dropped then).
    pub unsafe fn record(&self, descriptor: &TensorDescriptor, stream: FenceStream) {
        let Some(device) = ordering_device(descriptor) else {
            return;
        };
        if ordering_disabled() {
            return;
        }
        // SAFETY: 1, 2 or a stream of the memory's device live during the call; a user
        // context kept alive with the memory (contract).
        let (fence, recorded) =
            unsafe { ReleaseFence::record_unless_capturing(device, vec![stream]) };
        let mut state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(error) = recorded {
            state.error.get_or_insert(error);
        }
        state.fences.retain_mut(|fence| !fence.is_complete());
        if fence.orders_anything() {
            state.fences.push(fence);
        }
    }

    /// What the consumers' releases left, taken: `None` when there is nothing to wait for and
    /// nothing to report (no consumer recorded a fence, or every fence has completed), else one
    /// fence over every event still running, with the first failure.
    pub fn take(&self) -> Option<(ReleaseFence, Option<Error>)> {
        let recorded = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        let mut fences = recorded.fences.into_iter().filter_map(|mut fence| {
            // Asked once more: the memory goes back at once when nothing is still running.
            (!fence.is_complete()).then_some(fence)
        });
        let fence = fences.next().map(|mut first| {
            fences.for_each(|fence| first.absorb(fence));
            first
        });
        match (fence, recorded.error) {
            (None, None) => None,
            (fence, error) => Some((fence.unwrap_or_else(ReleaseFence::none), error)),
        }
    }
}

/// How an imported tensor's consumer said its work on the memory is ordered.
#[derive(Debug)]
pub enum ConsumerOrdering {
    /// On this stream.
    Stream(FenceStream),
    /// By itself (`stream=-1`): the release needs the caller's stream.
    SelfOrdered,
    /// Nothing was said (the tensor never passed through an import that names a stream).
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::fence::fence_log::{self, Entry};
    use crate::device::Device;
    use crate::dtype::ElementType;
    use crate::export::export_versioned;
    use crate::imported::ImportedTensor;
    use crate::stream::StreamRequest;
    use crate::test_support::{CountingOwner, descriptor_on, require_no_driver};
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    const CUDA0: Device = Device {
        kind: DeviceKind::Cuda,
        id: 0,
    };

    /// A Float32 tensor of `shape` (row-major) claiming to be at `address` on `device`, whose
    /// owner counts releases. Nothing reads the memory.
    fn tensor_on(
        device: Device,
        address: usize,
        shape: &[i64],
    ) -> (ImportedTensor, Arc<AtomicUsize>) {
        let strides: Vec<i64> = match shape {
            [] => vec![],
            [_] => vec![1],
            _ => unreachable!("one dimension suffices here"),
        };
        let spec = descriptor_on(device, address, shape, &strides, ElementType::Float32);
        let (owner, count) = CountingOwner::new();
        let managed = export_versioned(&spec, owner, 3).unwrap();
        (
            ImportedTensor::new(ManagedTensor::Versioned(managed)).unwrap(),
            count,
        )
    }

    /// Holds with and without a driver: host memory has nothing to wait for, so its release
    /// makes no driver call and remembers no stream.
    #[test]
    fn a_host_tensor_is_released_at_once_whatever_the_streams() {
        static DATA: [f32; 4] = [0.0; 4];
        let (mut tensor, count) = tensor_on(Device::CPU, DATA.as_ptr() as usize, &[4]);
        // SAFETY: host memory: no stream is remembered, so none is ever dereferenced.
        unsafe { tensor.set_consumer_stream(StreamRequest::Handle(0x1230)) };
        assert_eq!(tensor.consumer_stream(), None);
        // SAFETY: ignored for host memory (no driver call is made).
        let mut release = unsafe { tensor.into_release_after(0x4560) };
        assert!(!release.is_ordered() && release.is_ready());
        assert_eq!(CountingOwner::releases(&count), 0);
        release.complete().unwrap();
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    /// Holds with and without a driver: an empty tensor needs no fence, and a `stream=-1`
    /// import released without the caller's stream says what to pass (after the conservative
    /// wait, where a driver exists).
    #[test]
    fn no_sync_imports_need_the_callers_stream_and_empty_tensors_nothing() {
        let (mut tensor, count) = tensor_on(CUDA0, 0x1000, &[4]);
        // SAFETY: no stream is named.
        unsafe { tensor.set_consumer_stream(StreamRequest::NoSync) };
        assert_eq!(tensor.consumer_stream(), None);
        let release = tensor.into_release();
        assert!(release.is_ordered(), "never an unordered deleter");
        let outcome = release.complete();
        assert!(
            matches!(outcome, Err(Error::ReleaseNeedsStream)),
            "{outcome:?}"
        );
        assert!(
            outcome
                .unwrap_err()
                .to_string()
                .contains("rsdlpack_imported_release_after"),
            "the error names what to call"
        );
        assert_eq!(CountingOwner::releases(&count), 1, "released all the same");

        let (mut empty, count) = tensor_on(CUDA0, 0x1000, &[0]);
        // SAFETY: an empty tensor remembers no stream (nothing to protect).
        unsafe { empty.set_consumer_stream(StreamRequest::Handle(0x1230)) };
        assert_eq!(empty.consumer_stream(), None);
        // SAFETY: ignored for an empty tensor.
        let release = unsafe { empty.into_release_after(0x4560) };
        assert!(!release.is_ordered());
        release.complete().unwrap();
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    /// Asserts what happens without a driver (CI): a `stream=-1` import released with the
    /// caller's stream is ordered on that stream (here: the recording fails for want of a
    /// driver, and that is the error, not the missing stream).
    #[test]
    fn without_a_driver_a_no_sync_import_takes_the_callers_stream() {
        require_no_driver();
        let (mut tensor, count) = tensor_on(CUDA0, 0x1000, &[4]);
        // SAFETY: no stream is named.
        unsafe { tensor.set_consumer_stream(StreamRequest::NoSync) };
        // SAFETY: without a driver no handle is dereferenced.
        let release = unsafe { tensor.into_release_after(0x4560) };
        assert!(release.is_ordered());
        let outcome = release.complete();
        assert!(matches!(outcome, Err(Error::NoCudaDriver)), "{outcome:?}");
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    #[test]
    fn without_a_driver_a_device_release_runs_the_deleter_and_says_why() {
        require_no_driver();
        for kind in [
            DeviceKind::Cuda,
            DeviceKind::CudaManaged,
            DeviceKind::CudaHost,
        ] {
            let device = Device { kind, id: 0 };
            let (mut tensor, count) = tensor_on(device, 0x1000, &[4]);
            // SAFETY: without a driver no handle is ever dereferenced.
            unsafe { tensor.set_consumer_stream(StreamRequest::Omitted) };
            assert_eq!(
                tensor.consumer_stream(),
                Some(1),
                "omitted: the legacy default stream"
            );
            // SAFETY: as above.
            unsafe { tensor.set_consumer_stream(StreamRequest::Handle(0x1230)) };
            assert_eq!(tensor.consumer_stream(), Some(0x1230));
            let mut release = tensor.into_release();
            assert!(release.is_ordered(), "{kind:?}");
            assert!(
                release.is_ready(),
                "nothing could be recorded, so nothing to wait for"
            );
            assert_eq!(CountingOwner::releases(&count), 0);
            let outcome = release.complete();
            assert!(matches!(outcome, Err(Error::NoCudaDriver)), "{outcome:?}");
            assert_eq!(
                CountingOwner::releases(&count),
                1,
                "released despite the error"
            );
        }
        // Dropped instead of completed: released too, the error unheard.
        let (tensor, count) = tensor_on(CUDA0, 0x1000, &[4]);
        // SAFETY: as above.
        drop(unsafe { tensor.into_release_after(2) });
        assert_eq!(CountingOwner::releases(&count), 1);
    }

    #[test]
    fn an_export_is_released_after_the_stream_each_consumer_named() {
        use DeviceKind::*;
        for kind in [Cuda, CudaManaged] {
            assert_eq!(export_release_stream(kind, StreamRequest::Omitted), Some(1));
            assert_eq!(
                export_release_stream(kind, StreamRequest::LegacyDefault),
                Some(1)
            );
            assert_eq!(
                export_release_stream(kind, StreamRequest::PerThreadDefault),
                Some(2)
            );
            assert_eq!(
                export_release_stream(kind, StreamRequest::Handle(0x7f00)),
                Some(0x7f00)
            );
            assert_eq!(
                export_release_stream(kind, StreamRequest::NoSync),
                None,
                "-1: the consumer orders itself"
            );
        }
        for kind in [Cpu, CudaHost] {
            assert_eq!(export_release_stream(kind, StreamRequest::Omitted), None);
        }
        // The exchange API's consumers: the current stream, reported as the legacy one.
        let exchange = crate::export::plan::exchange_api_stream(Cuda);
        assert_eq!(export_release_stream(Cuda, exchange), Some(1));
    }

    /// Holds with and without a driver: a consumer's release of host memory (or of an empty
    /// tensor) records nothing, and leaves nothing to wait for.
    #[test]
    fn a_consumer_of_host_memory_leaves_no_fence() {
        static DATA: [f32; 4] = [0.0; 4];
        let host = descriptor_on(
            Device::CPU,
            DATA.as_ptr() as usize,
            &[4],
            &[1],
            ElementType::Float32,
        );
        let empty = descriptor_on(CUDA0, 0x1000, &[0], &[1], ElementType::Float32);
        for descriptor in [&host, &empty] {
            let fences = ConsumerFences::new();
            let named = FenceStream::named_now(0x7f00);
            fence_log::take();
            // SAFETY: nothing is recorded (host memory, nothing to order).
            unsafe { fences.record(descriptor, named) };
            assert_eq!(fence_log::take(), [], "no fence asked for");
            assert!(fences.take().is_none(), "nothing to wait for");
        }
    }

    /// Asserts what happens without a driver (CI): each consumer's release of device memory
    /// tries its fence at once, when it is called (not when the memory goes back), and what
    /// they left orders the memory's release, which reports the failure.
    #[test]
    fn without_a_driver_each_consumers_release_records_its_fence_when_it_runs() {
        require_no_driver();
        let device = descriptor_on(CUDA0, 0x1000, &[4], &[1], ElementType::Float32);
        let fences = ConsumerFences::new();
        let before = tried();
        for (n, stream) in [1usize, 0x7f00, 2].into_iter().enumerate() {
            let named = FenceStream::named_now(stream);
            fence_log::take();
            // SAFETY: without a driver no handle is dereferenced.
            unsafe { fences.record(&device, named) };
            assert_eq!(
                fence_log::take(),
                [Entry::Recorded {
                    handle: stream,
                    alias_context: None,
                    event_context: None,
                    defers_on_capture: false,
                }],
                "recorded at this release, on its own stream, keeping no handle past it"
            );
            assert_eq!(
                tried(),
                before + n + 1,
                "one recording per consumer's release"
            );
        }
        let (fence, error) = fences.take().expect("the failure to report");
        assert!(matches!(error, Some(Error::NoCudaDriver)), "{error:?}");
        assert!(fences.take().is_none(), "taken");
        let (owner, count) = CountingOwner::new();
        let release = PendingRelease::of_export(Box::new(owner), fence, error);
        assert!(release.is_ordered());
        assert_eq!(CountingOwner::releases(&count), 0);
        assert!(matches!(release.complete(), Err(Error::NoCudaDriver)));
        assert_eq!(CountingOwner::releases(&count), 1);

        // An import's release, whose stream keepers outlive a deferred record, may defer it.
        let (mut tensor, _) = tensor_on(CUDA0, 0x1000, &[4]);
        // SAFETY: without a driver no handle is dereferenced.
        unsafe { tensor.set_consumer_stream(StreamRequest::Handle(0x1230)) };
        fence_log::take();
        drop(tensor.into_release());
        assert!(
            matches!(
                fence_log::take()[..],
                [Entry::Recorded {
                    handle: 0x1230,
                    defers_on_capture: true,
                    ..
                }]
            ),
            "an import's consumer stream is kept until its record"
        );
    }

    thread_local! {
        /// Tokens given back on this thread, each with how many fences this thread had tried
        /// to record by then.
        static GIVEN_BACK: std::cell::RefCell<Vec<(u64, usize)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }

    fn give_back(token: u64) {
        let tried = crate::cuda::fence::RECORDS_TRIED_HERE.get();
        GIVEN_BACK.with_borrow_mut(|given| given.push((token, tried)));
    }

    fn given_back() -> Vec<(u64, usize)> {
        GIVEN_BACK.take()
    }

    fn tried() -> usize {
        crate::cuda::fence::RECORDS_TRIED_HERE.get()
    }

    /// Asserts what happens without a driver (CI): the stream's keeper is given back once,
    /// right after the release has tried to record its event, on every way a tensor goes.
    #[test]
    fn without_a_driver_the_stream_keeper_is_given_back_once_after_the_recording() {
        require_no_driver();
        let on_device = |keeper_token| {
            let (mut tensor, count) = tensor_on(CUDA0, 0x1000, &[4]);
            // SAFETY: without a driver no handle is ever dereferenced.
            unsafe { tensor.set_consumer_stream(StreamRequest::Handle(0x1230)) };
            tensor.keep_consumer_stream(StreamKeeper::new(keeper_token, give_back));
            (tensor, count)
        };
        given_back();

        // Released: after the recording, before the deleter runs (which may wait long).
        let (tensor, count) = on_device(1);
        assert_eq!(given_back(), [], "held while the tensor is");
        let before = tried();
        let release = tensor.into_release();
        assert_eq!(
            given_back(),
            [(1, before + 1)],
            "given back after the one recording"
        );
        assert_eq!(CountingOwner::releases(&count), 0);
        drop(release);
        assert_eq!(CountingOwner::releases(&count), 1);
        assert_eq!(given_back(), [], "once");

        // Released after the caller's stream too, and through a forwarded tensor's deleter.
        let (tensor, _) = on_device(2);
        let before = tried();
        // SAFETY: as above.
        drop(unsafe { tensor.into_release_after(0x4560) });
        assert_eq!(given_back(), [(2, before + 1)]);
        // The caller's stream kept too: both given back after the one recording, not before.
        let (tensor, count) = on_device(5);
        let before = tried();
        // SAFETY: as above.
        let release =
            unsafe { tensor.into_release_after_kept(0x4560, StreamKeeper::new(6, give_back)) };
        assert_eq!(given_back(), [(5, before + 1), (6, before + 1)]);
        assert_eq!(CountingOwner::releases(&count), 0);
        drop(release);
        assert_eq!(given_back(), [], "once");
        let (tensor, count) = on_device(3);
        let forwarded =
            crate::export::forward::forward_versioned(tensor, |t| drop(t.into_release())).unwrap();
        assert_eq!(given_back(), [], "forwarding keeps it");
        let before = tried();
        drop(forwarded);
        assert_eq!(given_back(), [(3, before + 1)]);
        assert_eq!(CountingOwner::releases(&count), 1);

        // Dropped unreleased (an import's error path): given back with it, nothing recorded.
        let (tensor, _) = on_device(4);
        let before = tried();
        drop(tensor);
        assert_eq!(given_back(), [(4, before)]);
    }

    /// Holds with and without a driver: a tensor that will record nothing gives its keeper
    /// back at once.
    #[test]
    fn a_tensor_without_a_consumer_stream_gives_its_keeper_back_at_once() {
        static DATA: [f32; 4] = [0.0; 4];
        given_back();
        let (mut host, _) = tensor_on(Device::CPU, DATA.as_ptr() as usize, &[4]);
        // SAFETY: host memory: no stream is remembered.
        unsafe { host.set_consumer_stream(StreamRequest::Handle(0x1230)) };
        host.keep_consumer_stream(StreamKeeper::new(7, give_back));
        let (mut unordered, _) = tensor_on(CUDA0, 0x1000, &[4]);
        // SAFETY: no stream is named.
        unsafe { unordered.set_consumer_stream(StreamRequest::NoSync) };
        unordered.keep_consumer_stream(StreamKeeper::new(8, give_back));
        let tokens: Vec<u64> = given_back().into_iter().map(|(token, _)| token).collect();
        assert_eq!(tokens, [7, 8]);
        drop((host.into_release(), unordered.into_release()));
        assert_eq!(given_back(), []);
    }

    /// Asserts what happens without a driver (CI): a forwarded device tensor's deleter hands
    /// its release on, which runs the producer's deleter once.
    #[test]
    fn without_a_driver_a_forwarded_device_tensor_is_released_once() {
        require_no_driver();
        let (mut tensor, count) = tensor_on(CUDA0, 0x1000, &[4]);
        // SAFETY: without a driver no handle is ever dereferenced.
        unsafe { tensor.set_consumer_stream(StreamRequest::Handle(0x1230)) };
        fn ordered(tensor: ImportedTensor) {
            let release = tensor.into_release();
            assert!(release.is_ordered());
            assert!(matches!(release.complete(), Err(Error::NoCudaDriver)));
        }
        let forwarded = crate::export::forward::forward_versioned(tensor, ordered).unwrap();
        assert_eq!(CountingOwner::releases(&count), 0);
        drop(forwarded);
        assert_eq!(CountingOwner::releases(&count), 1);
    }
}
