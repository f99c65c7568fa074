//! Errors for Julia: jlrs turns a returned `JlrsError` into a `JlrsCore.JlrsError` exception,
//! whose message the Julia glue (julia/errors.jl) turns into a `DLPackError`.

use jlrs::error::JlrsError;

pub(crate) fn error(message: impl Into<String>) -> Box<JlrsError> {
    JlrsError::exception(message.into()).into()
}

/// A core error for Julia: `[kind] message`, the prefix naming the `DLPackError` kind that
/// `Error::kind` decided (julia/errors.jl parses it).
pub(crate) fn core_error(e: rsdlpack::Error) -> Box<JlrsError> {
    let kind = match e.kind() {
        rsdlpack::ErrorKind::InvalidInput => "invalid",
        rsdlpack::ErrorKind::BufferRefusal => "buffer",
        rsdlpack::ErrorKind::Resource => "resource",
        rsdlpack::ErrorKind::Internal => "internal",
    };
    error(format!("[{kind}] {e}"))
}
