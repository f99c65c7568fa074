//! The Python bridge's error type and its two ways out: a Python exception (for methods Python
//! calls, like `__dlpack__`) and a return code plus message (for the C entry points).
//!
//! Both are decided here, once: [`BridgeError::code`] maps every error to an [`ErrorCode`]
//! (core errors by their [`ErrorKind`], decided in the core), and the code alone picks the
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
//!
//! A producer's exception (`Producer`) is wrapped, its type and text in the message, as a
//! `RuntimeError`: it is neither the caller's bad value nor a refusal of ours.

use pyo3::PyErr;
use pyo3::exceptions::{PyBufferError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use rsdlpack::ErrorKind;

#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error(transparent)]
    Core(#[from] rsdlpack::Error),

    #[error("{what} raised {message}")]
    Producer { what: String, message: String },

    #[error("an object of type {type_name} is neither a DLPack capsule nor has __dlpack__")]
    NotDlpack { type_name: String },

    #[error(
        "this DLPack capsule was already consumed (its name starts with \"used_\"); \
         call __dlpack__ again for a fresh capsule"
    )]
    ConsumedCapsule,

    #[error("{0}")]
    Argument(String),

    /// An object of the wrong Python type (a Python `TypeError`).
    #[error("{0}")]
    WrongType(String),

    #[error("{0}")]
    Buffer(String),
}

pub type BridgeResult<T> = Result<T, BridgeError>;

/// The return codes of the C entry points (0 is success); C names them `RsdlErrorCode`
/// (`RSDL_ERROR_CODE_INVALID`, …). The numbers are ABI: never reuse one. Julia's
/// `DLPackError` kind is the code's name in lower case (`:not_dlpack`).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The input was invalid (a Python `ValueError`).
    Invalid = 1,
    /// The tensor cannot be exchanged as asked (a Python `BufferError`).
    Buffer = 2,
    /// The object does not speak DLPack (a Python `TypeError`).
    NotDlpack = 3,
    /// The producer raised a Python exception (a Python `RuntimeError` naming it).
    Producer = 4,
    /// Memory could not be had (a Python `MemoryError`).
    Resource = 5,
    /// A bug in RsDLPack: a panic caught at the border, or a broken invariant.
    Internal = 99,
}

impl From<ErrorKind> for ErrorCode {
    fn from(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::InvalidInput => Self::Invalid,
            ErrorKind::BufferRefusal => Self::Buffer,
            ErrorKind::Resource => Self::Resource,
            ErrorKind::Internal => Self::Internal,
        }
    }
}

impl BridgeError {
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Core(core) => core.kind().into(),
            Self::Argument(_) | Self::ConsumedCapsule => ErrorCode::Invalid,
            Self::Buffer(_) => ErrorCode::Buffer,
            Self::NotDlpack { .. } | Self::WrongType(_) => ErrorCode::NotDlpack,
            Self::Producer { .. } => ErrorCode::Producer,
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
            ErrorCode::Buffer => PyBufferError::new_err(message),
            ErrorCode::NotDlpack => PyTypeError::new_err(message),
            ErrorCode::Resource => PyMemoryError::new_err(message),
            ErrorCode::Producer | ErrorCode::Internal => PyRuntimeError::new_err(message),
        }
    }
}

/// What a caught panic said, for the "internal error" every entry point reports instead of
/// unwinding into its caller.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}
