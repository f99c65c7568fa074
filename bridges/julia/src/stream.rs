//! CUDA.jl `CuStream` objects for foreign stream handles (PyTorch's, CuPy's), built here so
//! that nobody reinterprets CUDA.jl's structs by hand.
//!
//! The stream's context comes from the driver (`cuStreamGetCtx`, in the core). The object is
//! made with the type's `new` — not its constructors, which would attach a finalizer that
//! destroys the stream: the stream belongs to its producer, the wrapper only borrows it.
//! CUDA.jl's field layout changed across versions (5.0–5.3: `handle, ctx`; 5.4–6.x:
//! `handle, valid, ctx`), so it is read from the type at run time and every value is checked
//! against its field's type before the object is built.

use crate::imported::{core_error, error};
use jlrs::data::managed::value::ValueRet;
use jlrs::prelude::*;
use jlrs::weak_handle;

/// The `CUcontext` of the stream `handle`, as an address.
pub fn stream_context(handle: usize) -> JlrsResult<usize> {
    let description = rsdlpack::cuda::stream_info::describe_stream(handle).map_err(core_error)?;
    Ok(description.context)
}

/// The device ordinal of the stream `handle`.
pub fn stream_device(handle: usize) -> JlrsResult<i32> {
    let description = rsdlpack::cuda::stream_info::describe_stream(handle).map_err(core_error)?;
    Ok(description.device)
}

/// Builds an instance of `stream_type` (CUDA.jl's `CuStream`) from a `CUstream` value and a
/// `CuContext`, without running its constructors.
pub fn new_stream_object(
    stream_type: DataType,
    handle: Value<'_, 'static>,
    context: Value<'_, 'static>,
) -> JlrsResult<ValueRet> {
    let count = stream_type.n_fields().unwrap_or(0) as usize;
    let names: Vec<&str> = (0..count)
        .filter_map(|i| stream_type.field_name_str(i))
        .collect();
    let with_valid = match names.as_slice() {
        ["handle", "valid", "ctx"] => true,
        ["handle", "ctx"] => false,
        other => {
            return Err(error(format!(
                "[invalid] CuStream has fields {other:?}; RsDLPack knows (handle, valid, ctx) \
                 (CUDA.jl 5.4-6) and (handle, ctx) (CUDA.jl 5.0-5.3)"
            )));
        }
    };
    let fits = |index: usize, value: Value| {
        stream_type
            .field_type(index)
            .is_some_and(|ty| value.isa(ty))
    };
    let context_index = if with_valid { 2 } else { 1 };
    if !fits(0, handle) {
        return Err(error("[invalid] the stream handle is not a CUDA.CUstream"));
    }
    if !fits(context_index, context) {
        return Err(error("[invalid] the context is not a CUDA.CuContext"));
    }
    match weak_handle!() {
        Ok(julia) => Ok(julia.local_scope::<_, 1>(|mut frame| {
            let valid = Value::true_v(&frame);
            let values: Vec<Value> = if with_valid {
                vec![handle, valid, context]
            } else {
                vec![handle, context]
            };
            #[allow(deprecated)] // the non-constructor path is exactly what is needed here
            // SAFETY: every value was checked against its field's type above (the Bool for
            // `valid` by construction), so `new` cannot throw; no constructor runs, so no
            // finalizer will destroy a stream we only borrow.
            let object = unsafe { stream_type.instantiate_unchecked(&mut frame, values) };
            object.leak()
        })),
        Err(_) => Err(error(
            "new_stream_object must be called from a Julia thread",
        )),
    }
}
