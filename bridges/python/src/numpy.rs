//! NumPy, the peer whose arrays always live in host memory.
//!
//! Asking a producer for `dl_device=(CPU, 0)` when its tensor is on the CPU already changes
//! nothing, but NumPy parses the tuple (`device_converter` + `PyArg_ParseTuple`), a large part
//! of its `__dlpack__` call (BENCHMARKS.md, "Measured choices"). Every `from_dlpack(Array, x)`
//! asks for the CPU, so the importer leaves the argument out for `numpy.ndarray` itself, whose
//! memory is host memory by construction; the result's device is checked against the request
//! all the same. Subclasses may override `__dlpack__`, so only the exact type qualifies.

use pyo3::prelude::*;
use pyo3::types::PyType;

/// Whether `ty` is `numpy.ndarray` itself. Decided once per type (see
/// [`crate::exchange_api::TypeInfo`]); a type whose names cannot be read is not.
pub fn is_ndarray(ty: &Bound<'_, PyType>) -> bool {
    let named = |module: &str, name: &str| {
        ty.module()
            .is_ok_and(|m| m.to_str().is_ok_and(|m| m == module))
            && ty
                .qualname()
                .is_ok_and(|n| n.to_str().is_ok_and(|n| n == name))
    };
    named("numpy", "ndarray")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_ndarray_type_itself_qualifies() {
        Python::attach(|py| {
            let np = py
                .import("numpy")
                .expect("numpy in the venv (scripts/env.sh)");
            let ndarray = np
                .getattr("ndarray")
                .unwrap()
                .cast_into::<PyType>()
                .unwrap();
            assert!(is_ndarray(&ndarray));
            let matrix = np.getattr("matrix").unwrap().cast_into::<PyType>().unwrap();
            assert!(!is_ndarray(&matrix), "a subclass may override __dlpack__");
            assert!(!is_ndarray(&py.get_type::<pyo3::types::PyInt>()));
        });
    }
}
