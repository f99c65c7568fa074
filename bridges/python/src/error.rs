//! The Python bridge's error type and its two ways out: a Python exception (for methods Python
//! calls, like `__dlpack__`) and a return code plus message (for the C entry points).
//!
//! Both are decided here, once: [`BridgeError::code`] maps every error to an [`ErrorCode`]
//! (core errors by their [`rsdlpack::ErrorKind`], decided in the core), and the code alone picks the
//! Python exception type. The numbers are [`ErrorCode`]'s, written into include/rsdlpack.h as
//! `RsdlErrorCode` (from which Julia's and ctypes' constants are generated; README.md's and
//! docs/src/c_abi.md's tables are checked against it by scripts/check_mirrors.py):
//!
//! | `ErrorCode`  | core `ErrorKind` | Python exception | Julia `DLPackError` kind |
//! |--------------|------------------|------------------|--------------------------|
//! | `Invalid`    | `InvalidInput`   | `ValueError`     | `:invalid`               |
//! | `Buffer`     | `BufferRefusal`  | `BufferError`    | `:buffer`                |
//! | `NotDlpack`  | —                | `TypeError`      | `:not_dlpack`            |
//! | `Producer`   | —                | `RuntimeError`   | `:producer`              |
//! | `Resource`   | `Resource`       | `MemoryError`    | `:resource`              |
//! | `Internal`   | `Internal`       | `RuntimeError`   | `:internal`              |
//! | `Declined`   | —                | —                | `:declined`              |
//!
//! `Declined` is [`BridgeError::Declined`]: an import refused for one of the reasons
//! [`BridgeError::declinable`] names, reported so only to a caller that passed
//! `RSDLPACK_CALL_DECLINE_REFUSALS` (Julia's `pyconvert` rules, which then leave the object
//! to PythonCall's other rules). It never becomes a Python exception: no method Python calls
//! declines.
//! A producer's exception (`Producer`) is wrapped, its type and text in the message, as a
//! `RuntimeError`: it is neither the caller's bad value nor a refusal of ours.

use pyo3::PyErr;
use pyo3::exceptions::{PyBufferError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use rsdlpack::Device;
pub use rsdlpack::ErrorCode;

/// Every failure of the bridge, one variant each, holding its data: the message is formatted
/// here (by `Display`), once, where the error leaves the crate.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error(transparent)]
    Core(#[from] rsdlpack::Error),

    #[error("{what} raised {message}")]
    Producer { what: String, message: String },

    /// An error of one item of a call on several (`rsdlpack_py_import_plans`), `index` 1-based.
    #[error("item {index} of {count}: {error}")]
    Item {
        index: usize,
        count: usize,
        error: Box<BridgeError>,
    },

    #[error("an object of type {type_name} is neither a DLPack capsule nor has __dlpack__")]
    NotDlpack { type_name: String },

    #[error(
        "{type_name} is a class, not a tensor: DLPack imports its objects (pass an instance, \
         e.g. a tensor made by it), not the type itself"
    )]
    TypeObject { type_name: String },

    #[error(
        "a bare DLPack capsule has no __dlpack_device__ to ask; import it (it holds its device), \
         or pass the tensor object itself"
    )]
    CapsuleDevice,

    /// An import error the caller asked to have declined (see [`BridgeError::declinable`]):
    /// its message, the code `Declined`.
    #[error(transparent)]
    Declined(Box<BridgeError>),

    #[error(
        "this DLPack capsule was already consumed (its name starts with \"used_\"); \
         call __dlpack__ again for a fresh capsule"
    )]
    ConsumedCapsule,

    #[error(
        "{object} is not a DLPack capsule (expected the name \"dltensor_versioned\" or \"dltensor\")"
    )]
    NotACapsule { object: String },

    /// A panic caught at the border; `place` names where, after "RsDLPack".
    #[error("internal error in RsDLPack{place} (please report): {what}")]
    Panic { place: &'static str, what: String },

    // The arguments of the C entry points and of the C exchange API's functions.
    /// `names` lists the pointers as the function's signature names them.
    #[error("{function}: {names} must not be null")]
    NullArguments {
        function: &'static str,
        names: &'static str,
    },

    #[error("{function}: the {what} is null")]
    NullHandle {
        function: &'static str,
        what: &'static str,
    },

    /// An argument whose value is none of those it may have.
    #[error("{name} must be {expected}, got {got}")]
    BadValue {
        name: &'static str,
        expected: &'static str,
        got: String,
    },

    #[error("plan options: {what} cannot be {value}")]
    PlanOption { what: &'static str, value: i64 },

    #[error("{function}: unknown flag bits {bits:#x}")]
    UnknownFlags { function: &'static str, bits: u32 },

    #[error("the Python interpreter is not running")]
    InterpreterNotRunning,

    /// A thread still attached to no interpreter where it should hold the GIL (see
    /// [`crate::python::interpreter`]).
    #[error(
        "this thread has no Python thread state, though it should hold the GIL here; call with \
         the GIL taken (PyGILState_Ensure, or ctypes.PyDLL rather than ctypes.CDLL)"
    )]
    NoThreadState,

    /// 3.10 and 3.11: a current thread state that is not this thread's own (see
    /// [`crate::python::interpreter`]).
    #[error(
        "the current Python thread state is not this thread's own: on Python 3.10 and 3.11, \
         once a sub-interpreter has existed, the bridge cannot tell a thread that does not hold \
         the GIL while another does (calling Python would be unsafe) from one that holds it in \
         a sub-interpreter (taking the GIL would deadlock), so it refuses both; call from the \
         thread that holds the GIL, in the main interpreter (or use Python 3.12 or later)"
    )]
    ThreadStateNotItsOwn,

    /// A CPython without either function that reads the current thread state without a fatal
    /// error (see [`crate::python::interpreter`]).
    #[error(
        "this Python exports neither PyThreadState_GetUnchecked nor \
         _PyThreadState_UncheckedGet, so the bridge cannot tell whether this thread holds the \
         GIL without risking an abort; use a CPython release the bridge names (3.10 or later)"
    )]
    NoThreadStateLookup,

    /// An interpreter whose build the exporter is not laid out for (see
    /// [`crate::python::interpreter`]).
    #[error(
        "RsDLPack's Python bridge cannot serve this Python ({version}): {why}; use a CPython \
         built with the GIL (e.g. python3.13, not python3.13t)"
    )]
    UnsupportedInterpreter { version: String, why: String },

    #[error(
        "RsDLPack's Python bridge serves one interpreter per process, the first that called it, \
         and this call came from another (sub-interpreter {id}); call from the main interpreter"
    )]
    OtherInterpreter { id: i64 },

    #[error(
        "{function}: this thread does not hold Python's GIL, and the caller asked not to wait \
         for it (the thread that holds it may be waiting for this one); call from the thread \
         that holds the GIL (under PyCall and PythonCall, Julia's main thread), or take it \
         first (PythonCall 0.9.22 and later: PythonCall.GIL.lock(f), while the thread that holds \
         it is inside PythonCall.GIL.unlock)"
    )]
    GilNotHeld { function: &'static str },

    // Julia arrays to share.
    #[error("unknown element code {code}")]
    UnknownElementCode { code: u32 },

    #[error(
        "a {ndims}-dimensional array has no DLPack export here (at most {} dims)",
        rsdlpack::MAX_NDIM
    )]
    TooManyDims { ndims: usize },

    #[error("rsdlpack_py_share: a dim is negative")]
    NegativeDim,

    #[error("rsdlpack_py_share_into: type must be a Python type, got {got}")]
    NotAType { got: String },

    // Consumers' types (`share_into`) and producers' types (import) with a C exchange API.
    #[error(
        "cannot share into the type {type_name}: it has no DLPack C exchange API that makes its \
         objects (__dlpack_c_exchange_api__ with managed_tensor_to_py_object_no_sync), and \
         calling the type itself is not DLPack; share with a consumer function instead, e.g. \
         share(A, torch.from_dlpack)"
    )]
    NoObjectMaker { type_name: String },

    #[error(
        "a read-only array cannot be shared into {type_name}: its C exchange API does not promise \
         to keep DLPack's READ_ONLY flag, so the result could be written; share a copy, or \
         a writable array"
    )]
    ReadOnlyShareInto { type_name: String },

    #[error(
        "{type_name}'s C exchange API makes {made} objects, not {type_name} ones; share into \
         {made}, or share with a function"
    )]
    ObjectOfOtherType { type_name: String, made: String },

    #[error(
        "{type_name}.__dlpack_c_exchange_api__ is {value}, not a PyCapsule named \"dlpack_exchange_api\" \
         (DLPack 1.3); set it to None to disable the C exchange API for this type"
    )]
    BadExchangeApi { type_name: String, value: String },

    #[error("{type_name}.__dlpack_c_exchange_api__ {function} is missing from the table")]
    MissingTableFunction {
        type_name: String,
        function: &'static str,
    },

    // Our own C exchange API, asked by a consumer.
    /// An object of the wrong Python type (a Python `TypeError`).
    #[error(
        "rsdlpack.DLPackTensor's {function} was given an object of type {type_name}, not an \
         rsdlpack.DLPackTensor (the exchange API serves only the type it was found on)"
    )]
    NotOurExporter {
        function: &'static str,
        type_name: String,
    },

    #[error(
        "dltensor_from_py_object_no_sync: this tensor is read-only and a DLTensor cannot say so; use \
         managed_tensor_from_py_object_no_sync, which sets DLPack's READ_ONLY flag"
    )]
    ReadOnlyDLTensor,

    #[error(
        "dltensor_from_py_object_no_sync: this tensor stores a sub-byte type one element per byte, which only \
         the managed tensor's IS_SUBBYTE_TYPE_PADDED flag can say; use \
         managed_tensor_from_py_object_no_sync"
    )]
    PaddedDLTensor,

    #[error(
        "current_work_stream: rsdlpack.DLPackTensor holds CPU or CUDA memory only, not \
         device type {device_type}"
    )]
    WorkStreamDevice { device_type: u32 },

    // What an import found.
    #[error(
        "a bare DLPack capsule cannot order its data on the consumer's stream; pass the \
         tensor object itself so that __dlpack__(stream=...) can"
    )]
    CapsuleCannotOrderStream,

    /// `producer` names where the tensor came from (`numpy.ndarray`, `T.__dlpack__`, …).
    #[error("{producer} holds a tensor on device {found:?}, not the requested {wanted:?}")]
    WrongDevice {
        producer: String,
        found: Device,
        wanted: Device,
    },

    #[error("copy=false was requested but {producer} holds a copy (IS_COPIED)")]
    CopyNotAllowed { producer: String },

    #[error("{method} returned {answer}, not a (device_type, device_id) tuple")]
    BadDeviceAnswer { method: String, answer: String },

    #[error(
        "cannot import this {type_name} over DLPack: {}; pass {} instead",
        .state.what(),
        .state.fix()
    )]
    TorchState {
        type_name: String,
        state: TorchState,
    },
}

/// What a torch tensor carries that DLPack cannot (see [`crate::import::torch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TorchState {
    RequiresGrad,
    Conjugate,
    Negative,
}

impl TorchState {
    fn what(self) -> &'static str {
        match self {
            Self::RequiresGrad => {
                "it requires grad (every nn.Parameter does, and every tensor an autograd graph \
                 computed), which DLPack cannot carry (torch's __dlpack__ refuses it too)"
            }
            Self::Conjugate => {
                "it has the conjugate bit set (a lazy conjugation, e.g. from .conj()), so its \
                 memory holds the unconjugated values"
            }
            Self::Negative => {
                "it has the negative bit set (a lazy negation, e.g. from .conj().imag), so its \
                 memory holds the unnegated values"
            }
        }
    }

    /// The torch call that gives a tensor DLPack can carry.
    fn fix(self) -> &'static str {
        match self {
            Self::RequiresGrad => "tensor.detach() (the same memory, outside autograd)",
            Self::Conjugate => "tensor.resolve_conj()",
            Self::Negative => "tensor.resolve_neg()",
        }
    }
}

pub type BridgeResult<T> = Result<T, BridgeError>;

/// Refuses null pointers with one message naming them all (`names`, as the signature of
/// `function` does); the first argument names the function, the second the pointers, the rest
/// are the pointers.
macro_rules! refuse_null {
    ($function:expr, $names:expr, $($pointer:expr),+ $(,)?) => {
        if $($pointer.is_null())||+ {
            return Err($crate::error::BridgeError::NullArguments {
                function: $function,
                names: $names,
            });
        }
    };
}
pub(crate) use refuse_null;

impl BridgeError {
    pub fn code(&self) -> ErrorCode {
        use BridgeError::*;
        match self {
            Core(core) => core.kind().into(),
            ConsumedCapsule
            | NotACapsule { .. }
            | NullArguments { .. }
            | NullHandle { .. }
            | BadValue { .. }
            | PlanOption { .. }
            | UnknownFlags { .. }
            | GilNotHeld { .. }
            | UnknownElementCode { .. }
            | NegativeDim
            | NotAType { .. }
            | ObjectOfOtherType { .. }
            | BadExchangeApi { .. }
            | MissingTableFunction { .. }
            | WorkStreamDevice { .. }
            | BadDeviceAnswer { .. } => ErrorCode::Invalid,
            TooManyDims { .. }
            | NoObjectMaker { .. }
            | ReadOnlyShareInto { .. }
            | ReadOnlyDLTensor
            | PaddedDLTensor
            | CapsuleCannotOrderStream
            | WrongDevice { .. }
            | CopyNotAllowed { .. }
            | TorchState { .. } => ErrorCode::Buffer,
            NotDlpack { .. } | TypeObject { .. } | CapsuleDevice | NotOurExporter { .. } => {
                ErrorCode::NotDlpack
            }
            Declined(_) => ErrorCode::Declined,
            Producer { .. } => ErrorCode::Producer,
            InterpreterNotRunning
            | NoThreadState
            | ThreadStateNotItsOwn
            | NoThreadStateLookup
            | UnsupportedInterpreter { .. }
            | OtherInterpreter { .. } => ErrorCode::Interpreter,
            Panic { .. } => ErrorCode::Internal,
            Item { error, .. } => error.code(),
        }
    }

    /// Whether an import that failed with this error was refused for what the object is,
    /// which a converter trying several ways may decline instead of raising
    /// (`RSDLPACK_CALL_DECLINE_REFUSALS`): not a tensor (`NotDlpack`: no `__dlpack__`, a type
    /// object, a bare capsule where an object is needed), the producer's refusal (`Producer`:
    /// its `__dlpack__` or `__dlpack_device__` raised, e.g. torch's for a sparse tensor or
    /// JAX's for a sharded array, or answered nonsense), or a tensor that cannot be exchanged
    /// as asked (`Buffer`: torch state DLPack cannot carry, another device, an element type,
    /// rank or layout the request cannot take). Not: invalid arguments of ours, a call off the
    /// GIL's thread, a malformed tensor (the core's `InvalidInput`), memory, the driver, a
    /// stopped interpreter or a bug, which a caller must hear of.
    pub fn declinable(&self) -> bool {
        matches!(
            self.code(),
            ErrorCode::NotDlpack | ErrorCode::Producer | ErrorCode::Buffer
        ) || matches!(self, Self::BadDeviceAnswer { .. })
    }

    /// The error a caught panic becomes; `place` names where (see [`BridgeError::Panic`]).
    pub(crate) fn panic(place: &'static str, panic: &(dyn std::any::Any + Send)) -> Self {
        Self::Panic {
            place,
            what: panic_message(panic),
        }
    }

    /// Wraps a Python exception raised while calling `what`.
    pub fn producer(what: impl Into<String>, err: PyErr) -> Self {
        Self::Producer {
            what: what.into(),
            message: err.to_string(),
        }
    }
}

impl From<BridgeError> for PyErr {
    fn from(error: BridgeError) -> PyErr {
        let message = error.to_string();
        match error.code() {
            ErrorCode::Invalid => PyValueError::new_err(message),
            // Only entry points that take `RSDLPACK_CALL_DECLINE_REFUSALS` decline, and none
            // raises into Python; were one to, the refusal is a `BufferError`.
            ErrorCode::Buffer | ErrorCode::Declined => PyBufferError::new_err(message),
            ErrorCode::NotDlpack => PyTypeError::new_err(message),
            ErrorCode::Resource => PyMemoryError::new_err(message),
            ErrorCode::Producer
            | ErrorCode::Driver
            | ErrorCode::Interpreter
            | ErrorCode::Internal => PyRuntimeError::new_err(message),
        }
    }
}

/// What a caught panic said, for the "internal error" every entry point reports instead of
/// unwinding into its caller.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a converter may decline is the object's refusal (not a tensor, the producer's,
    /// the request's), never the caller's bug, the GIL, memory or ours.
    #[test]
    fn declinable_errors_are_refusals_of_the_object() {
        let not_a_tensor = BridgeError::NotDlpack {
            type_name: "list".into(),
        };
        let class = BridgeError::TypeObject {
            type_name: "torch.Tensor".into(),
        };
        let refused = BridgeError::TorchState {
            type_name: "torch.nn.parameter.Parameter".into(),
            state: TorchState::RequiresGrad,
        };
        let raised = BridgeError::Producer {
            what: "Tensor.__dlpack__".into(),
            message: "BufferError: sparse".into(),
        };
        let answer = BridgeError::BadDeviceAnswer {
            method: "X.__dlpack_device__".into(),
            answer: "None".into(),
        };
        for error in [
            not_a_tensor,
            class,
            refused,
            raised,
            answer,
            BridgeError::CapsuleDevice,
        ] {
            assert!(error.declinable(), "{error}");
        }
        let kept = [
            BridgeError::GilNotHeld { function: "f" },
            BridgeError::InterpreterNotRunning,
            BridgeError::NoThreadState,
            BridgeError::ThreadStateNotItsOwn,
            BridgeError::NoThreadStateLookup,
            BridgeError::PlanOption {
                what: "target",
                value: 7,
            },
            BridgeError::Panic {
                place: "",
                what: "x".into(),
            },
        ];
        for error in kept {
            assert!(!error.declinable(), "{error}");
        }
        let declined = BridgeError::Declined(Box::new(BridgeError::TorchState {
            type_name: "torch.nn.parameter.Parameter".into(),
            state: TorchState::RequiresGrad,
        }));
        assert_eq!(declined.code(), ErrorCode::Declined);
        let text = declined.to_string();
        assert!(
            text.contains("requires grad") && text.contains("tensor.detach()"),
            "{text}"
        );
    }
}
