//! Export of Julia arrays: a managed tensor over the array's memory that roots the array until
//! the consumer's deleter runs.
//!
//! Rooting lives on the Julia side (a locked `Dict` from root id to array, `julia/share.jl`)
//! because a Julia object can only be kept alive from Julia. The deleter may run on any thread
//! (a Python consumer frees tensors wherever it likes), and no Julia code may run there, so the
//! owner's drop only queues the root id; Julia unroots queued ids at its next RsDLPack call
//! (`next_released_root`).

use crate::imported::{core_error, error, order_from};
use jlrs::prelude::*;
use rsdlpack::dlpark::ffi::{DLDevice, DLDeviceType};
use rsdlpack::export::export_versioned;
use rsdlpack::{Device, ElementType, ExportSpec};
use std::sync::Mutex;

static RELEASED_ROOTS: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// The owner inside an exported tensor: dropping it tells Julia the array may be unrooted.
struct JuliaRoot(u64);

impl Drop for JuliaRoot {
    fn drop(&mut self) {
        RELEASED_ROOTS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.0);
    }
}

/// Builds a versioned managed tensor over a Julia array and returns its address (to hand to
/// the Python bridge's exporter). `dims_address`/`strides_address` point to `ndims` `Int`s
/// (Julia's `size` and `strides`); `device_type`/`device_id` are DLPack's (1, 0 for host
/// memory; 2, ordinal for a `CuArray`); `root_id` names the array in Julia's root table.
#[allow(clippy::too_many_arguments)] // mirrors one ccall signature
pub fn export_array(
    address: usize,
    element_code: u32,
    ndims: i64,
    dims_address: usize,
    strides_address: usize,
    order: u8,
    read_only: Bool,
    device_type: u32,
    device_id: i32,
    root_id: u64,
) -> JlrsResult<usize> {
    let root = JuliaRoot(root_id);
    let device = Device::from_dlpack(DLDevice {
        device_type: DLDeviceType(device_type),
        device_id,
    });
    let element = ElementType::from_code(element_code)
        .ok_or_else(|| error(format!("unknown element code {element_code}")))?;
    let ndims = usize::try_from(ndims)
        .map_err(|_| error(format!("ndims must be non-negative, got {ndims}")))?;
    if ndims > rsdlpack::descriptor::MAX_NDIM {
        return Err(error(format!(
            "[buffer] a {ndims}-dimensional array has no DLPack export here (at most {} dims)",
            rsdlpack::descriptor::MAX_NDIM
        )));
    }
    if ndims > 0 && (dims_address == 0 || strides_address == 0) {
        return Err(error("dims and strides must not be null"));
    }
    let read = |at: usize| -> Vec<isize> {
        if ndims == 0 {
            Vec::new()
        } else {
            // SAFETY: the Julia glue passes pointers to two `Vector{Int}` of length `ndims` that
            // it preserves for the call.
            unsafe { std::slice::from_raw_parts(at as *const isize, ndims) }.to_vec()
        }
    };
    let dims: Vec<usize> = read(dims_address)
        .into_iter()
        .map(|d| d.max(0) as usize)
        .collect();
    let strides = read(strides_address);
    let order = order_from(order)?;
    let mut spec = ExportSpec::from_julia_layout(address, device, element, &dims, &strides, order)
        .map_err(core_error)?;
    spec.read_only = read_only.as_bool();
    let managed = export_versioned(
        &spec,
        root,
        rsdlpack::dlpark::ffi::DLPackVersion::CURRENT.minor,
    )
    .map_err(core_error)?;
    Ok(managed.into_raw() as usize)
}

/// The next root id whose tensor was released, or 0 when there is none.
pub fn next_released_root() -> u64 {
    RELEASED_ROOTS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .pop()
        .unwrap_or(0)
}
