//! DLPack capsules: taking ownership of a producer's, and making our own.
//!
//! A consumer owns a capsule's tensor once it renames the capsule to `used_dltensor…`; the
//! producer's capsule destructor then leaves it alone. Our own capsules' destructor releases
//! the tensor only while the name is still unused, i.e. when nobody consumed it.
//!
//! An unconsumed capsule of device memory fences nothing: no consumer worked on the memory,
//! and nothing promises that the stream named for it is alive when the capsule is collected
//! (the consumer refused it, or an export failed past its claim). Its destructor says so to
//! the tensor's deleter for the length of the drop ([`releasing_unconsumed`]), which then lets
//! the stream go without recording on it.

use crate::error::{BridgeError, BridgeResult};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use rsdlpack::DeviceKind;
use rsdlpack::ManagedTensor;
use rsdlpack::dlpark::ffi::{DLManagedTensor, DLManagedTensorVersioned};
use rsdlpack::dlpark::{Managed, ManagedTensorBase};
use rsdlpack::export::plan::ordered_by_streams;
use std::cell::Cell;
use std::ffi::CStr;
use std::ptr::NonNull;

thread_local! {
    /// Set by an unconsumed capsule's destructor around the drop of its tensor of device
    /// memory, taken by that tensor's deleter ([`releasing_unconsumed`]).
    static UNCONSUMED: Cell<bool> = const { Cell::new(false) };
}

/// Whether the tensor whose deleter asks is being released by its capsule's destructor,
/// unconsumed (so no consumer's stream is to be fenced). Asked by the deleter of a tensor of
/// memory streams order that has a stream to fence, before it runs anything else, or by the
/// memory's release where none asked: the answer is taken, so that a deleter run further down
/// the same drop (a producer's, releasing other tensors) reads no.
pub(crate) fn releasing_unconsumed() -> bool {
    UNCONSUMED.replace(false)
}

/// Drops `tensor`, the tensor of a capsule nobody consumed, telling its deleter so when its
/// memory is ordered by streams (see [`releasing_unconsumed`]). Out of line: a consumed
/// capsule's destructor, the common case, stays short.
#[inline(never)]
pub(crate) fn drop_unconsumed<M: ManagedTensorBase>(tensor: Managed<M>) {
    // SAFETY: a live tensor we own.
    let device = DeviceKind::of(unsafe { tensor.tensor() }.device.device_type);
    let told = ordered_by_streams(device);
    if told {
        UNCONSUMED.set(true);
    }
    drop(tensor);
    if told {
        // Taken by the deleter already, unless it never asked.
        UNCONSUMED.set(false);
    }
}

const VERSIONED: &CStr = c"dltensor_versioned";
const LEGACY: &CStr = c"dltensor";
const USED_VERSIONED: &CStr = c"used_dltensor_versioned";
const USED_LEGACY: &CStr = c"used_dltensor";

/// Whether `object` is a PyCapsule (of any name).
pub fn is_capsule(object: &Bound<'_, PyAny>) -> bool {
    object.is_instance_of::<PyCapsule>()
}

/// Takes ownership of the tensor inside a DLPack capsule and marks the capsule used.
pub fn consume(capsule: &Bound<'_, PyAny>) -> BridgeResult<ManagedTensor> {
    let raw = capsule.as_ptr();
    let is_named = |name: &CStr| {
        // SAFETY: `raw` is a live object (borrowed from `capsule`); IsValid never raises and
        // answers false for non-capsules and other names.
        unsafe { ffi::PyCapsule_IsValid(raw, name.as_ptr()) == 1 }
    };
    let (name, used) = if is_named(VERSIONED) {
        (VERSIONED, USED_VERSIONED)
    } else if is_named(LEGACY) {
        (LEGACY, USED_LEGACY)
    } else if is_named(USED_VERSIONED) || is_named(USED_LEGACY) {
        return Err(BridgeError::ConsumedCapsule);
    } else {
        return Err(BridgeError::NotACapsule {
            object: capsule.to_string(),
        });
    };
    // SAFETY: the capsule is valid under `name` (checked above), so GetPointer returns its
    // non-null pointer without raising.
    let pointer = unsafe { ffi::PyCapsule_GetPointer(raw, name.as_ptr()) };
    // Rename before taking ownership: should renaming fail, the producer still owns the tensor.
    // SAFETY: `used` is a 'static C string, as capsule names must outlive the capsule.
    if unsafe { ffi::PyCapsule_SetName(raw, used.as_ptr()) } != 0 {
        return Err(BridgeError::producer(
            "PyCapsule_SetName",
            PyErr::fetch(capsule.py()),
        ));
    }
    let tensor = if name == VERSIONED {
        // SAFETY: a "dltensor_versioned" capsule holds a DLManagedTensorVersioned*, and the
        // rename made us its only owner.
        unsafe { ManagedTensor::from_versioned_raw(pointer.cast()) }
    } else {
        // SAFETY: as above, for a legacy "dltensor" capsule.
        unsafe { ManagedTensor::from_legacy_raw(pointer.cast()) }
    };
    Ok(tensor?)
}

/// A managed-tensor ABI and the capsule name it travels under.
pub trait CapsuleAbi: ManagedTensorBase {
    const NAME: &'static CStr;
}

impl CapsuleAbi for DLManagedTensorVersioned {
    const NAME: &'static CStr = VERSIONED;
}

impl CapsuleAbi for DLManagedTensor {
    const NAME: &'static CStr = LEGACY;
}

/// Wraps a managed tensor in a capsule named for its ABI ("dltensor_versioned" or
/// "dltensor") whose destructor frees it if nobody consumed it.
pub fn into_capsule<'py, M: CapsuleAbi>(
    py: Python<'py>,
    tensor: Managed<M>,
) -> BridgeResult<Bound<'py, PyCapsule>> {
    let raw = NonNull::new(tensor.into_raw().cast()).expect("Managed is never null");
    // SAFETY: `raw` is an owned tensor; `release_unconsumed::<M>` frees it iff unconsumed.
    let capsule = unsafe {
        PyCapsule::new_with_pointer_and_destructor(py, raw, M::NAME, Some(release_unconsumed::<M>))
    };
    capsule.map_err(|err| {
        // SAFETY: capsule creation failed, so we still own `raw`; no consumer saw it.
        if let Ok(tensor) = unsafe { Managed::<M>::from_raw(raw.as_ptr().cast()) } {
            drop_unconsumed(tensor);
        }
        BridgeError::producer("PyCapsule_New", err)
    })
}

unsafe extern "C" fn release_unconsumed<M: CapsuleAbi>(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with a live capsule; IsValid never raises.
    if unsafe { ffi::PyCapsule_IsValid(capsule, M::NAME.as_ptr()) } != 1 {
        return; // consumed: the consumer owns the tensor now
    }
    // The deleter may run Python code (a Python producer's deleter behind our source), and a
    // destructor may be called while an exception is being raised: keep that exception.
    let (mut kind, mut value, mut traceback) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    // SAFETY: the GIL is held (Python calls destructors with it); out-pointers are valid.
    unsafe { ffi::PyErr_Fetch(&mut kind, &mut value, &mut traceback) };
    // SAFETY: valid under M::NAME, so the pointer is our unconsumed tensor of ABI `M`.
    let raw = unsafe { ffi::PyCapsule_GetPointer(capsule, M::NAME.as_ptr()) };
    // SAFETY: nobody else owns an unconsumed tensor; dropping it calls its deleter once.
    if let Ok(tensor) = unsafe { Managed::<M>::from_raw(raw.cast()) } {
        drop_unconsumed(tensor);
    }
    // SAFETY: restores exactly what was fetched (ownership of the three references returns).
    unsafe { ffi::PyErr_Restore(kind, value, traceback) };
}
