//! CUDA.jl `CuStream` objects for foreign stream handles (PyTorch's, CuPy's), built here so
//! that nobody reinterprets CUDA.jl's structs by hand.
//!
//! The stream's context comes from the driver (`cuStreamGetCtx`, in the core). The object is
//! made with the type's `new` — not its constructors, which would attach a finalizer that
//! destroys the stream: the stream belongs to its producer, the wrapper only borrows it.
//! CUDA.jl's field layout changed across versions (5.0–5.3: `handle, ctx`; 5.4–6.x:
//! `handle, valid, ctx`; development versions add a stream-order tracker), so it is read from
//! the type at run time, fields are filled by name, and every value is checked against its
//! field's type before the object is built.

use crate::errors::{BridgeError, to_julia};
use jlrs::data::managed::value::ValueRet;
use jlrs::prelude::*;
use jlrs::weak_handle;
use rsdlpack::cuda::stream_info::StreamDescription;

fn describe(handle: usize) -> Result<StreamDescription, BridgeError> {
    // SAFETY: the only caller is Julia's `RsDLPack.unsafe_cuda_stream(handle)`, whose documented
    // contract is that `handle` is a live CUstream (aliases 0, 1, 2 are refused here).
    unsafe { rsdlpack::cuda::stream_info::describe_stream(handle) }.map_err(BridgeError::core)
}

/// The `CUcontext` of the stream `handle`, as an address.
pub fn stream_context(handle: usize) -> Result<usize, ValueRet> {
    to_julia(describe(handle).map(|stream| stream.context))
}

/// Builds an instance of `stream_type` (CUDA.jl's `CuStream`) from a `CUstream` value and a
/// `CuContext`, without running its constructors. Fields are filled by name: `handle`, `ctx`,
/// `valid` (true), and any other field that admits `nothing` (e.g. a stream-order tracker:
/// a borrowed stream is not tracked) gets `nothing`.
pub fn new_stream_object(
    stream_type: DataType,
    handle: Value<'_, 'static>,
    context: Value<'_, 'static>,
) -> Result<ValueRet, ValueRet> {
    to_julia(build_stream_object(stream_type, handle, context))
}

fn build_stream_object(
    stream_type: DataType,
    handle: Value<'_, 'static>,
    context: Value<'_, 'static>,
) -> Result<ValueRet, BridgeError> {
    let count = stream_type.n_fields().unwrap_or(0) as usize;
    let names: Vec<&str> = (0..count)
        .map(|i| stream_type.field_name_str(i).unwrap_or("?"))
        .collect();
    if !(names.contains(&"handle") && names.contains(&"ctx")) {
        return Err(BridgeError::invalid(format!(
            "CuStream has fields {names:?}; RsDLPack needs `handle` and `ctx` (CUDA.jl 5.0-6.x)"
        )));
    }
    match weak_handle!() {
        Ok(julia) => julia
            .local_scope::<_, 1>(|mut frame| {
                let truth = Value::true_v(&frame);
                let nothing = Value::nothing(&frame);
                let mut values = Vec::with_capacity(count);
                for (index, &name) in names.iter().enumerate() {
                    let value = match name {
                        "handle" => handle,
                        "ctx" => context,
                        "valid" => truth,
                        _ => nothing,
                    };
                    if !stream_type
                        .field_type(index)
                        .is_some_and(|ty| value.isa(ty))
                    {
                        return Err(format!(
                            "cannot fill CuStream field `{name}` (index {index})"
                        ));
                    }
                    values.push(value);
                }
                #[allow(deprecated)] // the non-constructor path is exactly what is needed here
                // SAFETY: every value was checked against its field's type above, so `new` cannot
                // throw; no constructor runs, so no finalizer will destroy a stream we only borrow.
                let object = unsafe { stream_type.instantiate_unchecked(&mut frame, values) };
                Ok(object.leak())
            })
            .map_err(BridgeError::invalid),
        Err(_) => Err(BridgeError::invalid(
            "new_stream_object must be called from a Julia thread",
        )),
    }
}
