//! RsDLPack's Julia bridge, loaded by the Julia package through `JlrsCore.Wrap.@wrapmodule`.
//!
//! It maps, and decides nothing: the core validates, plans and copies; this crate hands Julia
//! the core's answers as plain numbers (addresses, dims, ranges, a permutation) and keeps the
//! managed tensors alive in an opaque Julia object. Julia composes the array from those numbers
//! (`julia/arrays.jl`).
//!
//! It never links Python: tensors arrive as `DLManagedTensorVersioned*` addresses, made by the
//! Python bridge (or anyone else), and leave the same way.
//!
//! Everything here runs with `panic = "abort"`: inputs are checked and errors are returned as
//! `JlrsResult`, which jlrs turns into a `JlrsCore.JlrsError` carrying the core's message.

mod imported;
mod shared;
mod stream;

use imported::{ImportedArray, take_tensor};
use jlrs::data::managed::value::ValueRet;
use jlrs::data::managed::value::typed::TypedValueRet;
use jlrs::prelude::*;
use shared::{export_array, next_released_root};
use stream::{new_stream_object, stream_context, stream_device};

julia_module! {
    become rsdlpack_julia_init;

    struct ImportedArray;
    fn take_tensor(address: usize, order: u8, copy: i8, readonly: Bool) -> JlrsResult<TypedValueRet<ImportedArray>>;
    #[untracked_self]
    in ImportedArray fn plan_kind(&self) -> u8;
    #[untracked_self]
    in ImportedArray fn element_code(&self) -> u32;
    #[untracked_self]
    in ImportedArray fn dlpack_type_code(&self) -> u8;
    #[untracked_self]
    in ImportedArray fn is_read_only(&self) -> Bool;
    #[untracked_self]
    in ImportedArray fn device_type(&self) -> u32;
    #[untracked_self]
    in ImportedArray fn device_id(&self) -> i32;
    #[untracked_self]
    in ImportedArray fn result_ndims(&self) -> i64;
    #[untracked_self]
    in ImportedArray fn result_dim(&self, k: i64) -> i64;
    #[untracked_self]
    in ImportedArray fn parent_address(&self) -> usize;
    #[untracked_self]
    in ImportedArray fn parent_ndims(&self) -> i64;
    #[untracked_self]
    in ImportedArray fn parent_dim(&self, k: i64) -> i64;
    #[untracked_self]
    in ImportedArray fn range_start(&self, k: i64) -> i64;
    #[untracked_self]
    in ImportedArray fn range_step(&self, k: i64) -> i64;
    #[untracked_self]
    in ImportedArray fn range_len(&self, k: i64) -> i64;
    #[untracked_self]
    in ImportedArray fn permutation(&self, k: i64) -> i64;
    #[untracked_self]
    in ImportedArray fn copy_into(&self, address: usize, bytes: usize) -> JlrsResult<Nothing> as copy_into!;
    #[untracked_self]
    in ImportedArray fn release(&self) as release!;
    #[untracked_self]
    in ImportedArray fn is_released(&self) -> Bool;

    fn export_array(address: usize, element_code: u32, ndims: i64, dims_address: usize, strides_address: usize, order: u8, read_only: Bool, device_type: u32, device_id: i32, root_id: u64) -> JlrsResult<usize>;
    fn next_released_root() -> u64;

    fn stream_context(handle: usize) -> JlrsResult<usize>;
    fn stream_device(handle: usize) -> JlrsResult<i32>;
    fn new_stream_object(stream_type: DataType, handle: Value<'_, 'static>, context: Value<'_, 'static>) -> JlrsResult<ValueRet>;
}
