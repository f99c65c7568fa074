//! Shared helpers for the bridge's tests, which embed CPython and use the real NumPy and JAX
//! (installed into the venv that `.ci/run` creates and puts on PYTHONPATH).
#![allow(dead_code)]

use pyo3::prelude::*;
use pyo3::types::PyDict;
use rsdlpack::dlpark::ffi::DLManagedTensorVersioned;
use rsdlpack::{Device, ElementType, ImportedTensor, IndexOrder, ManagedTensor, TensorDescriptor};
use rsdlpack_python::{Exporter, ImportRequest, import};
use std::ffi::CString;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Evaluates Python `code` (statements, then `result = …`) with numpy as `np`, and returns
/// `result`. `jax` and `jnp` are available when `with_jax` is set.
pub fn run<'py>(py: Python<'py>, code: &str) -> Bound<'py, PyAny> {
    let globals = PyDict::new(py);
    let prelude = "import sys, gc\nimport numpy as np\n";
    let source = CString::new(format!("{prelude}{code}")).unwrap();
    py.run(&source, Some(&globals), None)
        .unwrap_or_else(|e| panic!("python failed: {e}\n{code}"));
    globals
        .get_item("result")
        .unwrap()
        .expect("the snippet sets `result`")
}

/// Imports with the default request.
pub fn import_default(object: &Bound<'_, PyAny>) -> ImportedTensor {
    import(object, &ImportRequest::default()).unwrap_or_else(|e| panic!("import failed: {e}"))
}

/// `sys.getrefcount(object)`.
pub fn refcount(object: &Bound<'_, PyAny>) -> isize {
    // SAFETY: `object` is a live object and we hold the GIL.
    unsafe { pyo3::ffi::Py_REFCNT(object.as_ptr()) }
}

/// A release counter to put inside managed tensors made by the tests.
pub struct Counted(pub Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A Rust-owned tensor over `data` (which the tensor owns: `data`'s buffer must hold the
/// elements `shape` and `strides` address), as an `ImportedTensor`, with a release counter and
/// its address.
pub fn owned_tensor_over<T: Send + 'static>(
    data: Vec<T>,
    device: Device,
    element: ElementType,
    shape: &[usize],
    strides: &[isize],
) -> (ImportedTensor, Arc<AtomicUsize>, usize) {
    let count = Arc::new(AtomicUsize::new(0));
    let address = data.as_ptr() as usize;
    let spec = TensorDescriptor::from_julia_layout(
        address,
        device,
        element,
        shape,
        strides,
        IndexOrder::Producer,
    )
    .unwrap();
    let owner = (data, Counted(Arc::clone(&count)));
    let managed = rsdlpack::export::export_versioned(&spec, owner, 3).unwrap();
    let raw: *mut DLManagedTensorVersioned = managed.into_raw();
    // SAFETY: just built and handed over.
    let tensor =
        ImportedTensor::new(unsafe { ManagedTensor::from_versioned_raw(raw) }.unwrap()).unwrap();
    (tensor, count, address)
}

/// A Rust-owned Float32 tensor (owning `data`) as an `ImportedTensor`, with a release counter.
pub fn rust_tensor(
    data: Vec<f32>,
    shape: &[usize],
    strides: &[isize],
) -> (ImportedTensor, Arc<AtomicUsize>, usize) {
    owned_tensor_over(data, Device::CPU, ElementType::Float32, shape, strides)
}

pub fn releases(count: &Arc<AtomicUsize>) -> usize {
    count.load(Ordering::SeqCst)
}

/// A producer whose dtypes the import tests go through.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Peer {
    NumPy,
    Torch,
    Jax,
}

const EVERY_PEER: &[Peer] = &[Peer::NumPy, Peer::Torch, Peer::Jax];

/// Every dtype the import tests bring in, by the name the peers share (`np.`, `torch.` and
/// `jnp.` spell them alike), with the element type the bridge must read it as and the peers
/// whose import test goes through it. One table, so that a dtype's element type is stated once.
const DTYPES: &[(&str, ElementType, &[Peer])] = &[
    ("bool", ElementType::Bool, EVERY_PEER),
    ("int8", ElementType::Int8, EVERY_PEER),
    ("int16", ElementType::Int16, EVERY_PEER),
    ("int32", ElementType::Int32, EVERY_PEER),
    ("int64", ElementType::Int64, EVERY_PEER),
    ("uint8", ElementType::UInt8, EVERY_PEER),
    ("uint16", ElementType::UInt16, EVERY_PEER),
    ("uint32", ElementType::UInt32, EVERY_PEER),
    ("uint64", ElementType::UInt64, EVERY_PEER),
    ("float16", ElementType::Float16, EVERY_PEER),
    // NumPy has no bfloat16 of its own.
    ("bfloat16", ElementType::BFloat16, &[Peer::Torch, Peer::Jax]),
    ("float32", ElementType::Float32, EVERY_PEER),
    ("float64", ElementType::Float64, EVERY_PEER),
    ("complex64", ElementType::ComplexF32, EVERY_PEER),
    ("complex128", ElementType::ComplexF64, EVERY_PEER),
    // fp8 through JAX (ml_dtypes): raw bytes with their DLPack code.
    (
        "float8_e4m3fn",
        ElementType::RawBytes { code: 10, bits: 8 },
        &[Peer::Jax],
    ),
    (
        "float8_e5m2",
        ElementType::RawBytes { code: 12, bits: 8 },
        &[Peer::Jax],
    ),
];

/// The dtypes `peer` has, in the table's order: (name, element type).
pub fn dtypes(peer: Peer) -> impl Iterator<Item = (&'static str, ElementType)> {
    DTYPES
        .iter()
        .filter(move |(_, _, peers)| peers.contains(&peer))
        .map(|&(name, element, _)| (name, element))
}

/// Runs `code` with `exporter` bound to an exporter of `tensor`, NumPy as `np` and `gc`, and
/// `error(**kw)` giving the exception `exporter.__dlpack__(**kw)` raises as `"Type: message"`
/// (`None` when it raises none); returns the globals.
pub fn with_exporter<'py>(
    py: Python<'py>,
    tensor: ImportedTensor,
    code: &str,
) -> Bound<'py, PyDict> {
    let globals = PyDict::new(py);
    globals
        .set_item(
            "exporter",
            Exporter::new(tensor, None)
                .unwrap()
                .into_pyobject(py)
                .unwrap(),
        )
        .unwrap();
    let prelude = "import gc\nimport numpy as np\n\
                   def error(**kw):\n    try:\n        exporter.__dlpack__(**kw)\n        return None\n    except Exception as e:\n        return type(e).__name__ + ': ' + str(e)\n";
    let source = CString::new(format!("{prelude}{code}")).unwrap();
    py.run(&source, Some(&globals), None)
        .unwrap_or_else(|e| panic!("python failed: {e}\n{code}"));
    globals
}

/// The global `name` that a snippet run by [`with_exporter`] set, converted to `T`.
pub fn get<'py, T: for<'a> FromPyObject<'a, 'py>>(globals: &Bound<'py, PyDict>, name: &str) -> T
where
    for<'a> <T as FromPyObject<'a, 'py>>::Error: std::fmt::Debug,
{
    globals.get_item(name).unwrap().unwrap().extract().unwrap()
}
