//! The exporter's Python face: the methods and class attributes of `rsdlpack.DLPackTensor`.
//!
//! Kept apart from [`super::exporter`] so that the modules implementing them
//! ([`super::dlpack_method`], [`super::exchange_api`]) use the type without the type using
//! them back: the dependencies run one way, from here down.

use super::exporter::Exporter;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

#[pymethods]
impl Exporter {
    /// `__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)`, a method that
    /// reads its keywords itself (see [`super::dlpack_method`]).
    #[classattr]
    fn __dlpack__(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        // While the type is being built, `type_object` answers the type itself.
        super::dlpack_method::descriptor(&<Self as pyo3::PyTypeInfo>::type_object(py))
    }

    /// The DLPack 1.3 C exchange API of this type (see [`super::exchange_api`]).
    #[classattr]
    fn __dlpack_c_exchange_api__(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
        super::exchange_api::capsule(py)
    }

    fn __dlpack_device__(&self) -> (u32, i32) {
        let device = self.descriptor().device().to_dlpack();
        (device.device_type.0, device.device_id)
    }

    fn __repr__(&self) -> String {
        let d = self.descriptor();
        format!(
            "rsdlpack.DLPackTensor(shape={:?}, strides={:?}, dtype={}, device={:?}, read_only={})",
            d.shape(),
            d.strides(),
            d.element().julia_name(),
            d.device(),
            d.read_only()
        )
    }
}
