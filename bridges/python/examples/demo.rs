//! Moves real NumPy and JAX arrays through RsDLPack both ways and prints where the bytes are.
//!
//! Run with `scripts/demo.sh` (it prepares the Python packages).

use pyo3::prelude::*;
use pyo3::types::PyDict;
use rsdlpack::copy::AlignedBuffer;
use rsdlpack::layout::{CopyPolicy, IndexOrder, LayoutPlan, plan};
use rsdlpack::{Device, ElementType, ImportedTensor, ManagedTensor, TensorDescriptor};
use rsdlpack_python::{Exporter, ImportRequest, import};

/// A core error as the Python `ValueError` a demo can return.
fn value_error(error: rsdlpack::Error) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(error.to_string())
}

/// How Julia would wrap `d`: a plain `Array`, or a view of a parent (dims, ranges, permutation).
fn julia_view(d: &TensorDescriptor) -> PyResult<String> {
    Ok(
        match plan(d, IndexOrder::Producer, CopyPolicy::Never).map_err(value_error)? {
            LayoutPlan::View(v) if v.is_identity_permutation() && v.is_whole_parent() => {
                "a plain Array".to_string()
            }
            LayoutPlan::View(v) => format!(
                "parent {:?}, ranges {:?}, permutation {:?}",
                v.parent_dims,
                v.ranges
                    .iter()
                    .map(|r| (r.start, r.step, r.len))
                    .collect::<Vec<_>>(),
                v.permutation
            ),
            other => format!("{other:?}"),
        },
    )
}

/// Imports NumPy's `a` and `t` and JAX's `x` from `globals` and prints where each lies.
fn python_to_rust(globals: &Bound<'_, PyDict>) -> PyResult<()> {
    println!("Python -> Rust (what Julia's from_dlpack receives)");
    for name in ["a", "t", "x"] {
        let object = globals.get_item(name)?.expect("defined by main");
        let tensor = import(&object, &ImportRequest::default()).map_err(PyErr::from)?;
        let d = tensor.descriptor();
        let python_address: usize = if name == "x" {
            object.call_method0("unsafe_buffer_pointer")?.extract()?
        } else {
            object.getattr("ctypes")?.getattr("data")?.extract()?
        };
        println!(
            "  {name}: {:<7} shape {:?} strides {:?} {} at {:#x} (Python: {:#x}, same: {}) -> Julia view: {}",
            d.element().julia_name(),
            d.shape(),
            d.strides(),
            if d.version().is_some() {
                "versioned"
            } else {
                "legacy   "
            },
            d.first_element(),
            python_address,
            d.first_element() == python_address,
            julia_view(d)?,
        );
    }
    Ok(())
}

/// Exports a Rust-owned 2x3 column-major Float32 array and lets NumPy and JAX consume it.
fn rust_to_python(py: Python<'_>, globals: &Bound<'_, PyDict>) -> PyResult<()> {
    println!("Rust -> Python (what Julia's share hands out): a 2x3 column-major Float32 array");
    let buffer = AlignedBuffer::zeroed(6 * 4);
    // SAFETY: the buffer holds six f32s and is exclusively ours until exported.
    let values = unsafe { std::slice::from_raw_parts_mut(buffer.as_ptr().cast::<f32>(), 6) };
    values
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = i as f32);
    let address = buffer.as_ptr() as usize;
    let spec = TensorDescriptor::from_julia_layout(
        address,
        Device::CPU,
        ElementType::Float32,
        &[2, 3],
        &[1, 2],
        IndexOrder::Producer,
    )
    .map_err(value_error)?;
    let managed = rsdlpack::export::export_versioned(&spec, buffer, 3).map_err(value_error)?;
    // SAFETY: the managed tensor was just built and is handed over.
    let owned = unsafe { ManagedTensor::from_versioned_raw(managed.into_raw()) }
        .and_then(ImportedTensor::new)
        .map_err(value_error)?;
    let exporter = Exporter::new(owned, None).map_err(PyErr::from)?;
    globals.set_item("exporter", exporter)?;
    py.run(
        c"n = np.from_dlpack(exporter)\n\
          j = jax.dlpack.from_dlpack(exporter)\n\
          print(f'  numpy sees {n.tolist()} at {n.ctypes.data:#x}, jax sees {np.asarray(j).tolist()} at {j.unsafe_buffer_pointer():#x}')",
        Some(globals),
        None,
    )?;
    println!("  Rust buffer at {address:#x}");
    Ok(())
}

fn main() -> PyResult<()> {
    Python::attach(|py| {
        let globals = PyDict::new(py);
        py.run(
            c"import numpy as np, jax, jax.numpy as jnp, jax.dlpack\n\
              a = np.arange(12, dtype=np.float32).reshape(3, 4)\n\
              t = a.T[::2]\n\
              x = jnp.arange(6.0).reshape(2, 3)",
            Some(&globals),
            None,
        )?;
        python_to_rust(&globals)?;
        rust_to_python(py, &globals)
    })
}
