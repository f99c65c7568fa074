//! How messages name a Python type. Reading a name can fail (a broken metaclass); a message
//! then says `?` rather than failing itself.

use pyo3::prelude::*;
use pyo3::types::PyType;

/// `type.__name__`.
pub(crate) fn short(ty: &Bound<'_, PyType>) -> String {
    ty.name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// `short` of an object's type.
pub(crate) fn of_object(object: &Bound<'_, PyAny>) -> String {
    short(&object.get_type())
}

/// `module.__name__` (`torch.Tensor`), or `module.__qualname__` with `qualified`; builtins
/// unprefixed.
pub(crate) fn with_module(ty: &Bound<'_, PyType>, qualified: bool) -> String {
    let module = ty.module().map(|m| m.to_string()).unwrap_or_default();
    let name = if qualified { ty.qualname() } else { ty.name() };
    let name = name.map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
    if module.is_empty() || module == "builtins" {
        name
    } else {
        format!("{module}.{name}")
    }
}
