//! `ImportedArray`: a tensor Julia received, with the core's plan for it.
//!
//! Julia reads the plan through the accessors and builds the array; the opaque object keeps
//! the managed tensor alive until `release!` (the array's finalizer, or `unsafe_free!`) or
//! until the object itself is collected. All methods take `&self` and are untracked: the plan
//! is immutable and the tensor sits behind a mutex, so no borrow bookkeeping is needed (which
//! keeps `release!` cheap enough for a finalizer).

use jlrs::data::managed::value::typed::{TypedValue, TypedValueRet};
use jlrs::error::JlrsError;
use jlrs::prelude::*;
use jlrs::weak_handle;
use rsdlpack::layout::{Access, CopyPolicy, DimRange, IndexOrder, LayoutPlan, check_access, plan};
use rsdlpack::{ImportedTensor, ManagedTensor, TensorDescriptor};
use std::sync::Mutex;

/// What `plan_kind` answers.
const VIEW: u8 = 0;
const EMPTY: u8 = 1;
const COPY: u8 = 2;

#[derive(OpaqueType)]
pub struct ImportedArray {
    tensor: Mutex<Option<ImportedTensor>>,
    descriptor: TensorDescriptor,
    plan: LayoutPlan,
    order: IndexOrder,
}

pub(crate) fn error(message: impl Into<String>) -> Box<JlrsError> {
    JlrsError::exception(message.into()).into()
}

/// A core error for Julia: `[buffer] …` or `[invalid] …`, the prefix naming the
/// `DLPackError` kind (julia/src/errors.jl parses it).
pub(crate) fn core_error(e: rsdlpack::Error) -> Box<JlrsError> {
    let kind = if e.is_exchange_refusal() {
        "buffer"
    } else {
        "invalid"
    };
    error(format!("[{kind}] {e}"))
}

pub(crate) fn order_from(code: u8) -> JlrsResult<IndexOrder> {
    match code {
        0 => Ok(IndexOrder::Producer),
        1 => Ok(IndexOrder::Reversed),
        other => Err(error(format!(
            "index order code must be 0 (producer) or 1 (reversed), got {other}"
        ))),
    }
}

fn copy_policy_from(code: i8) -> JlrsResult<CopyPolicy> {
    match code {
        -1 => Ok(CopyPolicy::IfNeeded),
        0 => Ok(CopyPolicy::Never),
        1 => Ok(CopyPolicy::Always),
        other => Err(error(format!(
            "copy code must be -1 (nothing), 0 (false) or 1 (true), got {other}"
        ))),
    }
}

/// Takes ownership of the `DLManagedTensorVersioned*` at `address` (released on every error
/// path), validates it and plans the Julia array.
pub fn take_tensor(
    address: usize,
    order: u8,
    copy: i8,
    readonly: Bool,
) -> JlrsResult<TypedValueRet<ImportedArray>> {
    // SAFETY: the Julia glue passes the address of an owned tensor that it gives up (the
    // Python bridge's output); null is refused by `from_versioned_raw`.
    let managed = unsafe { ManagedTensor::from_versioned_raw(address as *mut _) };
    let order = order_from(order);
    let policy = copy_policy_from(copy);
    let tensor = ImportedTensor::new(managed.map_err(core_error)?).map_err(core_error)?;
    let (order, policy) = (order?, policy?);
    let descriptor = *tensor.descriptor();
    let policy = policy.given(descriptor.is_copied);
    let plan = plan(&descriptor, order, policy).map_err(core_error)?;
    let access = if readonly.as_bool() {
        Access::ReadOnly
    } else {
        Access::Writable
    };
    check_access(&descriptor, access, &plan).map_err(core_error)?;
    if matches!(plan, LayoutPlan::View(_)) && !descriptor.device.kind.host_accessible() {
        // Device memory is wrapped by the CUDA extension; it reads the same plan.
        if !descriptor.device.kind.is_cuda() {
            return Err(error(
                rsdlpack::Error::UnsupportedDevice {
                    device: descriptor.device.to_dlpack(),
                    hint: "",
                }
                .to_string(),
            ));
        }
    }
    let array = ImportedArray {
        tensor: Mutex::new(Some(tensor)),
        descriptor,
        plan,
        order,
    };
    match weak_handle!() {
        Ok(handle) => {
            Ok(handle.local_scope::<_, 1>(|mut frame| TypedValue::new(&mut frame, array).leak()))
        }
        Err(_) => Err(error("take_tensor must be called from a Julia thread")),
    }
}

impl ImportedArray {
    fn view_range(&self, k: i64) -> Option<DimRange> {
        match &self.plan {
            LayoutPlan::View(view) => usize::try_from(k)
                .ok()
                .and_then(|k| view.ranges.get(k).copied()),
            _ => None,
        }
    }

    pub fn plan_kind(&self) -> u8 {
        match self.plan {
            LayoutPlan::View(_) => VIEW,
            LayoutPlan::Empty { .. } => EMPTY,
            LayoutPlan::Copy { .. } => COPY,
        }
    }

    /// See `rsdlpack::ElementType::code`.
    pub fn element_code(&self) -> u32 {
        self.descriptor.element.code()
    }

    /// The tensor's own DLPack type code (keeps fp8 codes that arrive as bytes).
    pub fn dlpack_type_code(&self) -> u8 {
        self.descriptor.element.to_dlpack().code.0
    }

    pub fn is_read_only(&self) -> Bool {
        Bool::new(self.descriptor.read_only)
    }

    pub fn device_type(&self) -> u32 {
        self.descriptor.device.to_dlpack().device_type.0
    }

    pub fn device_id(&self) -> i32 {
        self.descriptor.device.id
    }

    fn result_dims(&self) -> rsdlpack::DimVec<usize> {
        match &self.plan {
            LayoutPlan::View(view) => view.result_dims(),
            LayoutPlan::Empty { dims } | LayoutPlan::Copy { dims, .. } => *dims,
        }
    }

    pub fn result_ndims(&self) -> i64 {
        self.result_dims().len() as i64
    }

    /// Dimension `k` (0-based) of the Julia array; -1 when out of range.
    pub fn result_dim(&self, k: i64) -> i64 {
        usize::try_from(k)
            .ok()
            .and_then(|k| self.result_dims().get(k).map(|&d| d as i64))
            .unwrap_or(-1)
    }

    /// Where the view's parent array starts (0 unless the plan is a view).
    pub fn parent_address(&self) -> usize {
        match &self.plan {
            LayoutPlan::View(view) => self
                .descriptor
                .first_element
                .wrapping_add_signed(view.parent_byte_offset),
            _ => 0,
        }
    }

    pub fn parent_ndims(&self) -> i64 {
        match &self.plan {
            LayoutPlan::View(view) => view.parent_dims.len() as i64,
            _ => 0,
        }
    }

    pub fn parent_dim(&self, k: i64) -> i64 {
        match &self.plan {
            LayoutPlan::View(view) => usize::try_from(k)
                .ok()
                .and_then(|k| view.parent_dims.get(k))
                .map_or(-1, |&d| d as i64),
            _ => -1,
        }
    }

    pub fn range_start(&self, k: i64) -> i64 {
        self.view_range(k).map_or(0, |r| r.start as i64)
    }

    pub fn range_step(&self, k: i64) -> i64 {
        self.view_range(k).map_or(0, |r| r.step as i64)
    }

    pub fn range_len(&self, k: i64) -> i64 {
        self.view_range(k).map_or(0, |r| r.len as i64)
    }

    /// Parent dimension (0-based) of result dimension `k`.
    pub fn permutation(&self, k: i64) -> i64 {
        match &self.plan {
            LayoutPlan::View(view) => usize::try_from(k)
                .ok()
                .and_then(|k| view.permutation.get(k))
                .map_or(-1, |&p| p as i64),
            _ => -1,
        }
    }

    /// Copies the tensor into `bytes` bytes at `address` (an `Array` Julia just allocated
    /// with the result dims), column-major.
    pub fn copy_into(&self, address: usize, bytes: usize) -> JlrsResult<Nothing> {
        let guard = self
            .tensor
            .lock()
            .map_err(|_| error("the tensor's lock is poisoned"))?;
        let tensor = guard
            .as_ref()
            .ok_or_else(|| error("the tensor was already released"))?;
        if address == 0 && bytes != 0 {
            return Err(error("copy destination is null"));
        }
        let out: &mut [u8] = if bytes == 0 {
            &mut []
        } else {
            // SAFETY: the Julia glue passes `pointer(A)` and `sizeof(A)` of an Array it keeps
            // alive (GC.@preserve) for the call.
            unsafe { std::slice::from_raw_parts_mut(address as *mut u8, bytes) }
        };
        // SAFETY: host memory (copy_into refuses other devices) owned by `tensor`, which stays
        // alive while the guard is held; no one writes through a DLPack import during a copy.
        unsafe { rsdlpack::copy::copy_into(tensor.descriptor(), self.order, out) }
            .map_err(core_error)?;
        Ok(Nothing)
    }

    /// Releases the tensor now (its producer's deleter runs, or is deferred to a thread holding
    /// the GIL for Python producers). Idempotent.
    pub fn release(&self) {
        let taken = match self.tensor.lock() {
            Ok(mut guard) => guard.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        drop(taken);
    }

    pub fn is_released(&self) -> Bool {
        Bool::new(self.tensor.lock().map(|g| g.is_none()).unwrap_or(true))
    }
}
