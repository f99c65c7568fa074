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

use crate::error::{BridgeError, BridgeResult, TorchState};
use crate::python::call::call_method;
use crate::python::names;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyModule, PyType};
use std::ffi::c_void;

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
    if tf is not torch.Tensor.__torch_function__.__func__ and tf is not torch._C._disabled_torch_function_impl:
        return 2
    # What the checks read must be torch's own, or they are read as for a wrapper.
    base = torch._C.TensorBase
    own = all(getattr(tp, n, None) is getattr(base, n) for n in ('requires_grad', '_cdata'))
    own = own and all(getattr(tp, n, None) is getattr(torch.Tensor, n) for n in ('is_conj', 'is_neg'))
    return 1 if own else 2

def flags(x):
    import torch
    with torch._C.DisableTorchFunctionSubclass():
        return (bool(x.requires_grad), bool(x.is_conj()), bool(x.is_neg()))

# Per function, where to find it, by preference: at::native's kernels answer as the Python
# bindings do (Tensor::is_conj inline) without the dispatcher; at::_ops's go through it.
NATIVE = ((('torch_cpu', '_ZN2at6native7is_conjERKNS_6TensorE'),
           ('torch_cpu', '_ZN2at4_ops7is_conj4callERKNS_6TensorE')),
          (('torch_cpu', '_ZN2at6native6is_negERKNS_6TensorE'),
           ('torch_cpu', '_ZN2at4_ops6is_neg4callERKNS_6TensorE')),
          (('c10', '_ZNK3c1010TensorImpl13requires_gradEv'),))

def native_flags():
    # The addresses of is_conj, is_neg (see NATIVE) and c10::TensorImpl::requires_grad in the
    # libraries this torch loaded, the size of a tensor object, and tensors to check them on,
    # each with torch's own answers.
    import ctypes, os, torch
    lib = os.path.join(os.path.dirname(torch.__file__), 'lib')
    def load(name):
        for file in ('lib%s.so' % name, 'lib%s.dylib' % name):
            if os.path.exists(os.path.join(lib, file)):
                return ctypes.CDLL(os.path.join(lib, file))
        raise OSError('no lib' + name)
    def address(candidates):
        for library, symbol in candidates:
            found = getattr(load(library), symbol, None)
            if found is not None:
                return ctypes.cast(found, ctypes.c_void_p).value
        raise OSError('none of ' + repr(candidates))
    addresses = [address(candidates) for candidates in NATIVE]
    z = torch.tensor([1 + 2j, 3 - 4j])
    leaf = torch.ones(2, 3, requires_grad=True)
    probes = [torch.ones(3), z, z.conj(), z.conj().imag, z.conj().imag[::2], torch.ones(2, 3).t(),
              torch._neg_view(torch.ones(2)), z.conj().real, leaf, leaf[1:].t(),
              torch.nn.Parameter(torch.ones(2)), torch.zeros(0)]
    return (addresses, torch.Tensor.__basicsize__,
            [(t, t._cdata, t.requires_grad, t.is_conj(), t.is_neg()) for t in probes])
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
        1 => {
            NATIVE.get_or_init(py, || NativeFlags::find(py));
            TorchKind::Plain
        }
        2 => TorchKind::Wrapped,
        _ => TorchKind::NotTorch,
    })
}

/// A C++ `bool f(const at::Tensor&)`: an `at::Tensor` is one pointer to its `TensorImpl`, so
/// its reference is the address of such a pointer, and the Itanium C++ ABI passes and returns
/// both as C does.
type TensorFlag = unsafe extern "C" fn(*const *mut c_void) -> bool;

/// A C++ `bool c10::TensorImpl::f() const`: `this` is passed as the first argument.
type ImplFlag = unsafe extern "C" fn(*mut c_void) -> bool;

/// torch's own answers to `requires_grad`, `is_conj()` and `is_neg()`, without their Python
/// bindings (whose `is_conj` and `is_neg` release and retake the GIL on every call):
/// `c10::TensorImpl::requires_grad`, and `at::native::is_conj` and `at::native::is_neg` (or,
/// where those are missing, `at::_ops::is_conj::call` and `at::_ops::is_neg::call`),
/// found once per process by their mangled names in the libraries torch loaded, applied to
/// the `TensorImpl` that a tensor object holds at a fixed offset (what `_cdata` reports). Used
/// only if, on tensors with and without each flag, the offset gives `_cdata` and the functions
/// give torch's own answers; otherwise (another platform, a torch without the symbols or
/// with another object layout) the Python attributes are read.
#[derive(Clone, Copy)]
struct NativeFlags {
    impl_offset: usize,
    requires_grad: ImplFlag,
    is_conj: TensorFlag,
    is_neg: TensorFlag,
}

/// Decided at the first torch tensor type seen; `None` inside: read the Python attributes.
/// A `PyOnceLock`: the search runs Python code, which lets other threads take the GIL, and a
/// thread that waits for the cell must not hold it meanwhile.
static NATIVE: PyOnceLock<Option<NativeFlags>> = PyOnceLock::new();

/// Where a tensor object may hold its `TensorImpl*` (`THPVariable::cdata`, a `MaybeOwned` or
/// plain `at::Tensor` right after the object header): the probe picks the one that matches.
const IMPL_OFFSETS: [usize; 2] = [16, 24];

impl NativeFlags {
    fn find(py: Python<'_>) -> Option<Self> {
        crate::python::attach::releasing(|| Self::find_and_check(py).ok().flatten())
    }

    fn find_and_check(py: Python<'_>) -> BridgeResult<Option<Self>> {
        type Probe<'py> = (Bound<'py, PyAny>, usize, bool, bool, bool);
        let (addresses, basic_size, probes) = helper(py, "native_flags")?
            .call0()
            .and_then(|f| f.extract::<([usize; 3], usize, Vec<Probe<'_>>)>())
            .map_err(|e| BridgeError::producer("finding torch's flag functions", e))?;
        if addresses.contains(&0) {
            return Ok(None);
        }
        // The object's first `basic_size` bytes are its own: only offsets within may be read.
        let reads_cdata = |offset: usize| {
            offset + size_of::<usize>() <= basic_size
                && probes.iter().all(|(tensor, cdata, ..)| {
                    // SAFETY: a live tensor object of at least `basic_size` bytes (torch's
                    // base size; subclasses only add), read within them, unaligned-safe.
                    let held = unsafe {
                        tensor
                            .as_ptr()
                            .cast::<u8>()
                            .add(offset)
                            .cast::<usize>()
                            .read_unaligned()
                    };
                    held == *cdata
                })
        };
        let Some(impl_offset) = IMPL_OFFSETS.into_iter().find(|&o| reads_cdata(o)) else {
            return Ok(None);
        };
        // SAFETY: the addresses of the three functions, found by their mangled names (whose
        // signatures `ImplFlag` and `TensorFlag` restate) in the libraries torch runs on.
        let native = unsafe {
            Self {
                impl_offset,
                requires_grad: std::mem::transmute::<usize, ImplFlag>(addresses[2]),
                is_conj: std::mem::transmute::<usize, TensorFlag>(addresses[0]),
                is_neg: std::mem::transmute::<usize, TensorFlag>(addresses[1]),
            }
        };
        let agrees = probes.iter().all(|(tensor, _, requires_grad, conj, neg)| {
            // SAFETY: a live tensor object of a type whose layout was just checked.
            let answers = unsafe { native.answers(tensor) };
            answers == (*requires_grad, *conj, *neg)
        });
        Ok(agrees.then_some(native))
    }

    /// `(requires_grad, is_conj, is_neg)` of `tensor`.
    ///
    /// # Safety
    /// `tensor` must be an object of a torch tensor type whose layout [`Self::find_and_check`]
    /// accepted (every type [`classify`] calls `Plain`: all are torch's tensor object).
    unsafe fn answers(self, tensor: &Bound<'_, PyAny>) -> (bool, bool, bool) {
        // SAFETY: the tensor object holds its `TensorImpl*` at `impl_offset` (checked once per
        // process on torch's objects; the caller's contract), alive while `tensor` is.
        let tensor_impl = unsafe {
            tensor
                .as_ptr()
                .cast::<u8>()
                .add(self.impl_offset)
                .cast::<*mut c_void>()
                .read_unaligned()
        };
        // SAFETY: `&tensor_impl` is laid out as an `at::Tensor` over a live `TensorImpl`,
        // borrowed for the calls; none of the functions keeps or releases it.
        unsafe {
            (
                (self.requires_grad)(tensor_impl),
                (self.is_conj)(&tensor_impl),
                (self.is_neg)(&tensor_impl),
            )
        }
    }
}

/// Whether torch's flags are read through its C++ functions ([`NativeFlags`]) in this process
/// (a test hook: `None` until a torch tensor type was first seen).
pub fn flags_read_natively(py: Python<'_>) -> bool {
    NATIVE.get(py).is_some_and(Option::is_some)
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
    let (requires_grad, conj, neg) = match (kind, NATIVE.get(object.py()).copied().flatten()) {
        // SAFETY: a `Plain` type's object, and the layout was checked (`NATIVE` is set only
        // then).
        (TorchKind::Plain, Some(native)) => unsafe { native.answers(object) },
        _ => python_flags(object, kind)?,
    };
    let state = if requires_grad {
        TorchState::RequiresGrad
    } else if conj {
        TorchState::Conjugate
    } else if neg {
        TorchState::Negative
    } else {
        return Ok(());
    };
    Err(BridgeError::TorchState {
        type_name: names::with_module(&object.get_type(), false),
        state,
    })
}

/// `(requires_grad, is_conj(), is_neg())` of a torch tensor read through its Python
/// attributes, where torch's C++ functions were not found (with subclass dispatch disabled
/// for `Wrapped` types).
fn python_flags(object: &Bound<'_, PyAny>, kind: TorchKind) -> BridgeResult<(bool, bool, bool)> {
    let py = object.py();
    let read = |err: PyErr| {
        BridgeError::producer(
            format!(
                "reading the flags of {}",
                names::with_module(&object.get_type(), false)
            ),
            err,
        )
    };
    match kind {
        TorchKind::NotTorch => Ok((false, false, false)),
        TorchKind::Plain => {
            let flag = |name: &Bound<'_, pyo3::types::PyString>| {
                call_method(object, name, &[], &[], None).and_then(|v| v.is_truthy())
            };
            Ok((
                object
                    .getattr(pyo3::intern!(py, "requires_grad"))
                    .and_then(|v| v.is_truthy())
                    .map_err(read)?,
                flag(pyo3::intern!(py, "is_conj")).map_err(read)?,
                flag(pyo3::intern!(py, "is_neg")).map_err(read)?,
            ))
        }
        TorchKind::Wrapped => helper(py, "flags")?
            .call1((object,))
            .and_then(|f| f.extract::<(bool, bool, bool)>())
            .map_err(read),
    }
}
