//! Link arguments for the shared library Julia and ctypes load.
//!
//! The library does not link libpython (abi3, `PYO3_BUILD_EXTENSION_MODULE=1`): its Python
//! symbols come from the process that loads it. GNU ld accepts undefined symbols in a shared
//! library by default; Apple's linker refuses them unless told `-undefined dynamic_lookup`,
//! which pyo3-build-config adds on macOS targets only (nothing elsewhere).

fn main() {
    pyo3_build_config::add_extension_module_link_args();
}
