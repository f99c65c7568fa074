//! Errors for Julia: jlrs turns a returned `JlrsError` into a `JlrsCore.JlrsError` exception,
//! whose message the Julia glue (julia/errors.jl) turns into a `DLPackError`.

use jlrs::error::JlrsError;

pub(crate) fn error(message: impl Into<String>) -> Box<JlrsError> {
    JlrsError::exception(message.into()).into()
}

/// A core error for Julia: `[buffer] …` or `[invalid] …`, the prefix naming the
/// `DLPackError` kind (julia/errors.jl parses it).
pub(crate) fn core_error(e: rsdlpack::Error) -> Box<JlrsError> {
    let kind = if e.is_exchange_refusal() {
        "buffer"
    } else {
        "invalid"
    };
    error(format!("[{kind}] {e}"))
}
