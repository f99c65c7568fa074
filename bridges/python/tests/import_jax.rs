//! Import from the real JAX (CPU), which exports legacy "dltensor" capsules only.
//!
//! One test function: JAX must not be imported by two test threads at once (Python's import
//! lock reports a deadlock when both import `jax.numpy` concurrently).

mod common;

use common::*;
use pyo3::prelude::*;
use rsdlpack::layout::{CopyPolicy, IndexOrder, LayoutPlan, plan};

#[test]
fn every_jax_dtype_scalars_and_empty_arrays_arrive_zero_copy_as_legacy_tensors() {
    Python::attach(|py| {
        for (name, element) in dtypes(Peer::Jax) {
            let array = run(
                py,
                &format!(
                    "import jax\njax.config.update('jax_enable_x64', True)\nimport jax.numpy as jnp\n\
                     result = jnp.arange(12).reshape(3, 4).astype(jnp.{name})\nresult.block_until_ready()"
                ),
            );
            let address: usize = array
                .call_method0("unsafe_buffer_pointer")
                .unwrap()
                .extract()
                .unwrap();
            let tensor = import_default(&array);
            let d = tensor.descriptor();
            assert_eq!(d.element(), element, "{name}");
            assert_eq!(d.first_element(), address, "{name}: same memory");
            assert_eq!(d.shape(), vec![3, 4], "{name}");
            assert!(d.version().is_none(), "{name}: JAX exports legacy capsules");
            assert!(matches!(
                plan(d, IndexOrder::Producer, CopyPolicy::Never).unwrap(),
                LayoutPlan::View(_)
            ));
        }

        // What the Julia package asks for an `Array` target: dl_device=(CPU, 0), and copy
        // when requested. JAX honours dl_device for CPU arrays and still shares its memory.
        let x = run(
            py,
            "import jax.numpy as jnp\nresult = jnp.arange(6.0).reshape(2, 3)",
        );
        let address: usize = x
            .call_method0("unsafe_buffer_pointer")
            .unwrap()
            .extract()
            .unwrap();
        let cpu = rsdlpack_python::ImportRequest {
            device: Some(rsdlpack::Device::CPU),
            ..Default::default()
        };
        let shared = rsdlpack_python::import(&x, &cpu).unwrap();
        assert_eq!(shared.descriptor().first_element(), address);

        let scalar = run(
            py,
            "import jax.numpy as jnp\nresult = jnp.float32(2.5) + jnp.zeros(())",
        );
        assert_eq!(import_default(&scalar).descriptor().ndim(), 0);
        let empty = run(py, "import jax.numpy as jnp\nresult = jnp.zeros((0, 4))");
        let tensor = import_default(&empty);
        assert_eq!(
            plan(tensor.descriptor(), IndexOrder::Producer, CopyPolicy::Never).unwrap(),
            LayoutPlan::Empty {
                dims: rsdlpack::DimVec::from_slice(&[0, 4]).unwrap()
            }
        );
    });
}
