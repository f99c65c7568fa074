//! The Python bridge's error type and its two ways out: a Python exception (for methods Python
//! calls, like `__dlpack__`) and a return code plus message (for the C entry points).

use pyo3::PyErr;
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};

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

/// The return codes of the C entry points (0 is success).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The input was invalid (a Python `ValueError`).
    Invalid = 1,
    /// The tensor cannot be exchanged as asked (a Python `BufferError`).
    Buffer = 2,
    /// The object does not speak DLPack (a Python `TypeError`).
    NotDlpack = 3,
    /// The producer raised a Python exception.
    Producer = 4,
    /// A bug in RsDLPack: a panic was caught at the border.
    Internal = 99,
}

impl BridgeError {
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Core(core) if core.is_exchange_refusal() => ErrorCode::Buffer,
            Self::Core(_) | Self::Argument(_) | Self::ConsumedCapsule => ErrorCode::Invalid,
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
            ErrorCode::Buffer => PyBufferError::new_err(message),
            ErrorCode::NotDlpack => PyTypeError::new_err(message),
            _ => PyValueError::new_err(message),
        }
    }
}
