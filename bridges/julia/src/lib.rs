//! RsDLPack's Julia bridge, loaded by the Julia package through `JlrsCore.Wrap.@wrapmodule`.
//!
//! It maps, and decides nothing. What needs Julia's own objects lives here: a CUDA.jl
//! `CuStream` built for a foreign stream handle, with its context looked up through the
//! driver. Tensors do not pass through this library: the Python bridge imports, validates and
//! plans in one call that the Julia glue makes directly (`rsdlpack_py_import_plan`), so each
//! user call crosses into Rust once.
//!
//! Everything here runs with `panic = "abort"`: inputs are checked and errors are returned,
//! as a code and the core's message from which Julia's `RsDLPack.native_error` builds the
//! `DLPackError` that jlrs throws (see [`errors`]).

mod errors;
mod stream;

use jlrs::data::managed::value::ValueRet;
use jlrs::prelude::*;
use stream::{new_stream_object, stream_context};

julia_module! {
    become rsdlpack_julia_init;

    fn stream_context(handle: usize) -> Result<usize, ValueRet>;
    fn new_stream_object(stream_type: DataType, handle: Value<'_, 'static>, context: Value<'_, 'static>) -> Result<ValueRet, ValueRet>;
}
