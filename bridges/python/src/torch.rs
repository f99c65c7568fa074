//! PyTorch, the one peer whose tensors carry state DLPack cannot: autograd, and lazy
//! conjugation and negation bits (the memory holds `x` while the tensor means `conj(x)` or
//! `-x`, e.g. `t.conj()` or `t.conj().imag`).
//!
//! torch's `Tensor.__dlpack__` refuses `requires_grad` and the conjugate bit in Python code
//! (BufferError), but exports a tensor with the negative bit as if the bit were clear (checked
//! with torch 2.15: `np.from_dlpack(torch.tensor([1+2j]).conj().imag)` reads `2.0`, torch says
//! `-2.0`), and its C exchange API (`managed_tensor_from_py_object_no_sync`) checks none of the
//! three. So the importer checks all three itself, for every torch tensor type, on either path,
//! and refuses with a message naming the bit and the torch call that resolves it.
//!
//! Subclasses that override `__torch_function__` (e.g. `torch.utils.dlpack.ReadOnlyTensorWrapper`,
//! which refuses every torch function but the DLPack ones) define their own semantics: they are
//! imported through their `__dlpack__`, and the checks run with subclass dispatch disabled,
//! as torch's own wrapper does.

use crate::call::call_method;
use crate::error::{BridgeError, BridgeResult};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyModule, PyType};

/// How a type relates to torch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TorchKind {
    /// Not a torch tensor type.
    NotTorch,
    /// `torch.Tensor`, or a subclass with torch's own `__torch_function__` (e.g.
    /// `torch.nn.Parameter`): its C exchange API may be used.
    Plain,
    /// A subclass that overrides `__torch_function__`: imported through `__dlpack__`.
    Wrapped,
}

/// Python helpers, compiled once. `classify` runs once per type; `flags` only for `Wrapped`
/// types, whose attributes cannot be read directly.
const HELPERS: &CStr = c"
import sys

def classify(tp):
    # torch may be half-imported (by another thread): no tensor type exists before its Tensor.
    tensor = getattr(sys.modules.get('torch'), 'Tensor', None)
    if tensor is None or not isinstance(tp, type) or not issubclass(tp, tensor):
        return 0
    torch = sys.modules['torch']
    tf = getattr(tp, '__torch_function__', None)
    tf = getattr(tf, '__func__', tf)
    if tf is torch.Tensor.__torch_function__.__func__ or tf is torch._C._disabled_torch_function_impl:
        return 1
    return 2

def flags(x):
    import torch
    with torch._C.DisableTorchFunctionSubclass():
        return (bool(x.requires_grad), bool(x.is_conj()), bool(x.is_neg()))
";

use std::ffi::CStr;

fn helper<'py>(py: Python<'py>, name: &str) -> BridgeResult<Bound<'py, PyAny>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = MODULE
        .get_or_try_init(py, || {
            PyModule::from_code(py, HELPERS, c"rsdlpack_torch.py", c"rsdlpack_torch")
                .map(Bound::unbind)
        })
        .map_err(|e| BridgeError::producer("compiling RsDLPack's torch helpers", e))?;
    module
        .bind(py)
        .getattr(name)
        .map_err(|e| BridgeError::producer("RsDLPack's torch helpers", e))
}

/// Whether `ty` is a torch tensor type, and which kind.
pub fn classify(ty: &Bound<'_, PyType>) -> BridgeResult<TorchKind> {
    let py = ty.py();
    let answer = helper(py, "classify")?
        .call1((ty,))
        .and_then(|a| a.extract::<u8>())
        .map_err(|e| BridgeError::producer("classifying a type for torch", e))?;
    Ok(match answer {
        1 => TorchKind::Plain,
        2 => TorchKind::Wrapped,
        _ => TorchKind::NotTorch,
    })
}

/// Refuses a torch tensor whose meaning DLPack cannot carry (see the module docs).
// Inlined: every import asks, and for anything but torch the answer is a comparison.
#[inline]
pub fn check(object: &Bound<'_, PyAny>, kind: TorchKind) -> BridgeResult<()> {
    match kind {
        TorchKind::NotTorch => Ok(()),
        _ => check_torch(object, kind),
    }
}

fn check_torch(object: &Bound<'_, PyAny>, kind: TorchKind) -> BridgeResult<()> {
    let py = object.py();
    let read = |err: PyErr| {
        BridgeError::producer(format!("reading the flags of {}", type_name(object)), err)
    };
    let (requires_grad, conj, neg) = match kind {
        TorchKind::NotTorch => return Ok(()),
        TorchKind::Plain => {
            let flag = |name: &Bound<'_, pyo3::types::PyString>| {
                call_method(object, name, &[], &[], None).and_then(|v| v.is_truthy())
            };
            (
                object
                    .getattr(pyo3::intern!(py, "requires_grad"))
                    .and_then(|v| v.is_truthy())
                    .map_err(read)?,
                flag(pyo3::intern!(py, "is_conj")).map_err(read)?,
                flag(pyo3::intern!(py, "is_neg")).map_err(read)?,
            )
        }
        TorchKind::Wrapped => helper(py, "flags")?
            .call1((object,))
            .and_then(|f| f.extract::<(bool, bool, bool)>())
            .map_err(read)?,
    };
    let refuse = |what: &str, fix: &str| {
        Err(BridgeError::Buffer(format!(
            "cannot import this {} over DLPack: {what}; pass {fix} instead",
            type_name(object)
        )))
    };
    if requires_grad {
        return refuse(
            "it requires grad, which DLPack cannot carry (torch's __dlpack__ refuses it too)",
            "tensor.detach()",
        );
    }
    if conj {
        return refuse(
            "it has the conjugate bit set (a lazy conjugation, e.g. from .conj()), so its memory \
             holds the unconjugated values",
            "tensor.resolve_conj()",
        );
    }
    if neg {
        return refuse(
            "it has the negative bit set (a lazy negation, e.g. from .conj().imag), so its memory \
             holds the unnegated values",
            "tensor.resolve_neg()",
        );
    }
    Ok(())
}

fn type_name(object: &Bound<'_, PyAny>) -> String {
    let ty = object.get_type();
    let module = ty.module().map(|m| m.to_string()).unwrap_or_default();
    let name = ty
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    if module.is_empty() || module == "builtins" {
        name
    } else {
        format!("{module}.{name}")
    }
}
