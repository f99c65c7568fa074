//! Errors for Julia: a `DLPackError`, built by the one function that builds them all.
//!
//! Each exported function returns `Result<T, ValueRet>`: jlrs returns the `T`, or throws the
//! error value. That value is what `RsDLPack.native_error(code, message)` (julia/errors.jl)
//! returns: a `DLPackError` whose kind Julia maps from the code with `error_kind`, as it does the
//! Python bridge's return codes. The code is an `RsdlErrorCode` (include/rsdlpack.h), the number
//! the Python bridge's C entry points return for the same kind of failure; the message is the
//! core's, unchanged. (A `JlrsResult` error would reach Julia as a `JlrsCore.JlrsError` holding
//! text only.)

use jlrs::data::managed::value::ValueRet;
use jlrs::prelude::*;
use jlrs::weak_handle_unchecked;
use rsdlpack::ErrorCode;

/// A failure on its way to Julia.
#[derive(Debug)]
pub(crate) struct BridgeError {
    code: ErrorCode,
    message: String,
}

impl BridgeError {
    /// Bad input found here, in the bridge.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self {
            code: ErrorCode::Invalid,
            message: message.into(),
        }
    }

    /// A core error, with the code of the kind the core decided (`Error::kind`).
    pub(crate) fn core(error: rsdlpack::Error) -> Self {
        Self {
            code: error.kind().into(),
            message: error.to_string(),
        }
    }

    /// The value jlrs throws: `RsDLPack.native_error(code, message)`, not rooted, so it must be
    /// returned to jlrs at once (the glue `julia_module!` generates throws it before anything
    /// else runs, as it does the exception it builds for a `JlrsResult` error). Should the
    /// package's function be unreachable (the bridge loaded outside the package) or throw, the
    /// message itself, or that exception, is what Julia gets.
    fn into_julia(self) -> ValueRet {
        // SAFETY: only the functions of the `julia_module!` manifest call this, on their way
        // back to Julia, which called them: the thread is a Julia thread in the GC-unsafe
        // state, as jlrs assumes when it builds the exception of a `JlrsResult` error.
        let julia = unsafe { weak_handle_unchecked!() };
        julia.local_scope::<_, 4>(|mut frame| {
            let code = Value::new(&mut frame, self.code as i32);
            let message = JuliaString::new(&mut frame, &self.message).as_value();
            let Some(builder) = Module::package_root_module(&frame, "RsDLPack")
                .and_then(|package| package.global(&mut frame, "native_error").ok())
            else {
                return message.leak();
            };
            // SAFETY: `native_error` is RsDLPack's own pure function of an integer and a
            // string (julia/errors.jl); called on this Julia thread with rooted arguments, and
            // whatever it throws is caught into `Err` by jlrs.
            match unsafe { builder.call(&mut frame, [code, message]) } {
                Ok(error) | Err(error) => error.leak(),
            }
        })
    }
}

/// `result` as the exported functions return it: the value, or the error for jlrs to throw.
pub(crate) fn to_julia<T>(result: Result<T, BridgeError>) -> Result<T, ValueRet> {
    result.map_err(BridgeError::into_julia)
}
