//! Exchange costs against NumPy, as ratios measured side by side in one process and one run
//! (the machines are shared and noisy: compare within a run, never across runs).
//!
//!     bash scripts/bench.sh          (or: cargo bench -p rsdlpack-python --features embed)
//!
//! Every competitor is called from native code, the way Julia's `ccall` or a C program calls
//! it, and the competitors alternate round by round so that drifts of the machine hit all
//! alike. This bench links the bridge into its own binary, inside pyo3's attach: the compiler
//! inlines it differently from the shipped library, and the GIL check of each entry point is
//! skipped, so it reads lower than the library as callers load it. `shipped.c` (beside this
//! file, run by `scripts/bench.sh`) times the shipped `librsdlpack_python.so` from C; this one
//! covers every size and is the one to profile. Reported per call (median of the rounds):
//! - import of a NumPy float32 array: `np.from_dlpack(a)`, and ours (`rsdlpack_py_import` +
//!   `rsdlpack_tensor_release`) without options and with `dl_device=(CPU, 0)` (what
//!   `from_dlpack(Array, …)` passes), each beside its floor: the producer's own
//!   `a.__dlpack__(…)` call with the same arguments plus dropping the capsule, so that
//!   "ours − floor" is what RsDLPack adds to the Python calls it must make. (A `numpy.ndarray`
//!   is not asked for `dl_device=(CPU, 0)`, which changes nothing for host memory: the import
//!   with that option makes the plain floor's call, and "+dev − floor" is then less than
//!   RsDLPack's own cost, which is "+dev" minus the plain floor.)
//! - Julia's path: `rsdlpack_py_import_plan` (import, validate and plan in one call, with the
//!   options `from_dlpack(Array, …)` passes) + `rsdlpack_imported_release`;
//! - import of a torch tensor, which goes through torch's DLPack 1.3 C exchange API, against
//!   `torch.from_dlpack(t)` and against `t.__dlpack__(max_version=(1, 3))` alone (the floor of any
//!   Python-protocol import);
//! - export round trip: a Rust-owned buffer exported (`rsdlpack_py_export`) and consumed by
//!   `np.from_dlpack`, and Julia's `rsdlpack_py_share` of a buffer consumed likewise, against
//!   NumPy's own `np.from_dlpack(ndarray)`.
//!
//! With `RSDLPACK_BENCH_CSV=path` the import rows are also written as CSV (for the plot).
//! With `RSDLPACK_BENCH_PROFILE=import` (or `julia`: Julia's one-call path) it only imports a
//! small array in a loop for a few seconds, for `perf record`; with `=share`, it only shares a
//! 16×16 array with `np.from_dlpack` in a loop.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyModule, PyString, PyTuple};
use rsdlpack::dlpark::ffi::DLManagedTensorVersioned;
use rsdlpack::{Device, ElementType, IndexOrder, TensorDescriptor};
use rsdlpack_python::c_abi::{
    RsdlArrayExport, RsdlImportResult, RsdlPlanOptions, RsdlShareResult, rsdlpack_imported_release,
    rsdlpack_py_import_plan, rsdlpack_py_share, rsdlpack_py_take_released_roots,
};
use rsdlpack_python::c_abi::{
    RsdlImportOptions, rsdlpack_py_export, rsdlpack_py_import, rsdlpack_tensor_release,
};
use rsdlpack_python::python::call::call_method;
use std::hint::black_box;
use std::time::Instant;

/// Calls per timed batch and batches per competitor.
const CALLS: usize = 2_000;
const ROUNDS: usize = 31;

/// Median nanoseconds per call of each competitor, batches interleaved.
fn race(competitors: &mut [(&str, &mut dyn FnMut())]) -> Vec<f64> {
    let mut samples = vec![Vec::with_capacity(ROUNDS); competitors.len()];
    for (_, f) in competitors.iter_mut() {
        for _ in 0..CALLS / 10 {
            f(); // warm up
        }
    }
    for _ in 0..ROUNDS {
        for (i, (_, f)) in competitors.iter_mut().enumerate() {
            let start = Instant::now();
            for _ in 0..CALLS {
                f();
            }
            samples[i].push(start.elapsed().as_secs_f64() * 1e9 / CALLS as f64);
        }
    }
    samples
        .into_iter()
        .map(|mut s| {
            s.sort_by(f64::total_cmp);
            s[s.len() / 2]
        })
        .collect()
}

fn import_with(object: *mut ffi::PyObject, options: Option<&RsdlImportOptions>) {
    let mut tensor: *mut DLManagedTensorVersioned = std::ptr::null_mut();
    let options = options.map_or(std::ptr::null(), |o| o as *const _);
    // SAFETY: a live object, a valid out-pointer; errors are not expected (checked below).
    let code = unsafe { rsdlpack_py_import(object, options, &mut tensor, std::ptr::null_mut()) };
    assert_eq!(code, 0, "import failed");
    // SAFETY: the tensor we were just given.
    unsafe { rsdlpack_tensor_release(black_box(tensor)) };
}

/// What Julia's `from_dlpack(Array, a)` asks of the planner.
const JULIA_ARRAY: RsdlPlanOptions = RsdlPlanOptions::any();

fn import_plan_with(object: *mut ffi::PyObject, options: &RsdlImportOptions) {
    let mut result = std::mem::MaybeUninit::<RsdlImportResult>::uninit();
    // SAFETY: a live object, valid options and out-pointer; errors are not expected.
    let code = unsafe {
        rsdlpack_py_import_plan(
            object,
            options,
            &JULIA_ARRAY,
            result.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(code, 0, "import_plan failed");
    // SAFETY: written on success; its handle is ours to release.
    let plan = unsafe { result.assume_init() }.plan;
    // SAFETY: the handle we were just given, released once.
    unsafe { rsdlpack_imported_release(black_box(plan.tensor)) };
}

fn human(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// What every block calls: NumPy's `from_dlpack`, the `__dlpack__` name and its arguments,
/// and the options `from_dlpack(Array, …)` passes.
struct Calls<'py> {
    np: Bound<'py, PyModule>,
    from_dlpack: Bound<'py, PyAny>,
    dlpack: &'py Bound<'py, PyString>,
    max_version: Bound<'py, PyAny>,
    cpu_device: Bound<'py, PyAny>,
    kw_max_version: &'py Bound<'py, PyTuple>,
    kw_with_device: &'py Bound<'py, PyTuple>,
    cpu: RsdlImportOptions,
}

impl<'py> Calls<'py> {
    fn new(py: Python<'py>) -> Self {
        let np = py
            .import("numpy")
            .expect("numpy in the venv (scripts/env.sh)");
        Self {
            from_dlpack: np.getattr("from_dlpack").unwrap(),
            np,
            dlpack: pyo3::intern!(py, "__dlpack__"),
            max_version: PyTuple::new(py, [1, 3]).unwrap().into_any(),
            cpu_device: PyTuple::new(py, [1, 0]).unwrap().into_any(),
            kw_max_version: rsdlpack_python::keyword_names!(py, "max_version"),
            kw_with_device: rsdlpack_python::keyword_names!(py, "max_version", "dl_device"),
            cpu: RsdlImportOptions {
                has_device: 1,
                device_type: 1,
                copy: -1,
                ..Default::default()
            },
        }
    }

    /// `object.__dlpack__(max_version=(1, 3))`, and `dl_device=(1, 0)` too when `device`.
    fn producer_call(&self, object: &Bound<'py, PyAny>, device: bool) {
        let capsule = if device {
            call_method(
                object,
                self.dlpack,
                &[],
                &[&self.max_version, &self.cpu_device],
                Some(self.kw_with_device),
            )
        } else {
            call_method(
                object,
                self.dlpack,
                &[],
                &[&self.max_version],
                Some(self.kw_max_version),
            )
        };
        drop(black_box(capsule.unwrap()));
    }

    fn float32_ones(&self, shape: impl IntoPyObject<'py>) -> Bound<'py, PyAny> {
        self.np
            .call_method1("ones", (shape,))
            .unwrap()
            .call_method1("astype", ("float32",))
            .unwrap()
    }
}

/// Loops one path for a few seconds, for `perf record`.
fn profile(mut path: impl FnMut()) {
    let start = Instant::now();
    while start.elapsed().as_secs() < 4 {
        for _ in 0..10_000 {
            path();
        }
    }
}

/// The NumPy import rows, per size; each row also goes to `csv`.
fn numpy_imports(calls: &Calls<'_>, csv: &mut String) {
    println!("== import of a NumPy float32 array (ns per call, median of {ROUNDS}×{CALLS})");
    println!(
        "{:>9} {:>7} {:>7} {:>9} {:>7} {:>11} {:>9}   {:>8} {:>8} {:>9} {:>11} {:>11} {:>11}",
        "size",
        "numpy",
        "floor",
        "floor+dev",
        "ours",
        "ours+dev",
        "julia",
        "ours/np",
        "+dev/np",
        "julia/np",
        "ours-floor",
        "+dev-floor",
        "julia-floor"
    );
    for elements in [12usize, 256, 1 << 14, 1 << 18, 1 << 24, 1 << 28] {
        let array = calls.float32_ones(elements);
        let raw = array.as_ptr();
        let times = race(&mut [
            ("numpy", &mut || {
                drop(black_box(calls.from_dlpack.call1((&array,)).unwrap()));
            }),
            ("floor", &mut || calls.producer_call(&array, false)),
            ("floor+dev", &mut || calls.producer_call(&array, true)),
            ("ours", &mut || import_with(raw, None)),
            ("ours+dev", &mut || import_with(raw, Some(&calls.cpu))),
            ("julia", &mut || import_plan_with(raw, &calls.cpu)),
        ]);
        let bytes = elements * 4;
        println!(
            "{:>9} {:>7.0} {:>7.0} {:>9.0} {:>7.0} {:>11.0} {:>9.0}   {:>7.2}x {:>7.2}x {:>8.2}x {:>11.0} {:>11.0} {:>11.0}",
            human(bytes),
            times[0],
            times[1],
            times[2],
            times[3],
            times[4],
            times[5],
            times[3] / times[0],
            times[4] / times[0],
            times[5] / times[0],
            times[3] - times[1],
            times[4] - times[2],
            times[5] - times[2],
        );
        csv.push_str(&format!(
            "{bytes},{:.1},{:.1},{:.1},{:.1},{:.1}\n",
            times[0], times[1], times[2], times[3], times[4]
        ));
    }
}

/// The torch import row: ours through torch's C exchange API against torch's own calls.
fn torch_import(py: Python<'_>, calls: &Calls<'_>) {
    println!("\n== import of a torch float32 tensor (12 elements; ns per call, median)");
    let torch = match py.import("torch") {
        Err(e) => return println!("SKIPPED: torch is not importable ({e})"),
        Ok(torch) => torch,
    };
    let tensor = torch.call_method1("ones", (12,)).unwrap();
    let torch_from_dlpack = torch.getattr("from_dlpack").unwrap();
    let raw = tensor.as_ptr();
    let before = rsdlpack_python::import::exchange_api::imports_through_c_api();
    import_with(raw, None);
    assert!(
        rsdlpack_python::import::exchange_api::imports_through_c_api() > before,
        "the torch import went through the C exchange API"
    );
    let times = race(&mut [
        ("ours (C API)", &mut || import_with(raw, None)),
        ("ours+dev (C API)", &mut || {
            import_with(raw, Some(&calls.cpu))
        }),
        ("torch.from_dlpack", &mut || {
            drop(black_box(torch_from_dlpack.call1((&tensor,)).unwrap()));
        }),
        ("__dlpack__", &mut || calls.producer_call(&tensor, false)),
    ]);
    println!(
        "{:>12} {:>9} {:>17} {:>10}   {:>16} {:>15}",
        "ours (C API)",
        "ours+dev",
        "torch.from_dlpack",
        "__dlpack__",
        "ours/from_dlpack",
        "ours/__dlpack__"
    );
    println!(
        "{:>12.0} {:>9.0} {:>17.0} {:>10.0}   {:>15.3}x {:>14.3}x",
        times[0],
        times[1],
        times[2],
        times[3],
        times[0] / times[2],
        times[0] / times[3]
    );
}

/// Julia's share of `data` (a 16×16 f32 column-major array): describe, export and wrap in one
/// call, then NumPy consumes it; roots taken back as Julia does after every share.
fn share_once(py: Python<'_>, calls: &Calls<'_>, data: &[f32]) {
    let (dims, strides) = ([16i64, 16], [1i64, 16]);
    let array = RsdlArrayExport {
        address: data.as_ptr() as usize,
        dims: dims.as_ptr(),
        strides: strides.as_ptr(),
        ndims: 2,
        root_id: 1,
        stream: 0,
        element_code: ElementType::Float32.code(),
        order: 0,
        device_type: 1,
        device_id: 0,
        read_only: 0,
        reserved: 0,
    };
    let mut result = std::mem::MaybeUninit::<RsdlShareResult>::uninit();
    // SAFETY: a valid description of `data`, which outlives the exporter; a valid out-pointer.
    let code = unsafe { rsdlpack_py_share(&array, result.as_mut_ptr(), std::ptr::null_mut()) };
    assert_eq!(code, 0);
    // SAFETY: written on success.
    let result = unsafe { result.assume_init() };
    // Unroot what consumers released (here the previous round's array), so that the queue
    // stays as short as it is in Julia.
    if result.released_roots > 0 {
        let mut batch = [0u64; 64];
        // SAFETY: writable for its length.
        unsafe { rsdlpack_py_take_released_roots(batch.as_mut_ptr(), batch.len()) };
    }
    // SAFETY: a new reference we were just given.
    let exporter = unsafe { Bound::from_owned_ptr(py, result.exporter) };
    drop(black_box(calls.from_dlpack.call1((&exporter,)).unwrap()));
}

/// A Rust-owned tensor over `spec` through `rsdlpack_py_export`, consumed by NumPy.
fn export_once(py: Python<'_>, calls: &Calls<'_>, spec: &TensorDescriptor) {
    let tensor = rsdlpack::export::export_versioned(spec, (), 3).unwrap();
    let mut exporter: *mut ffi::PyObject = std::ptr::null_mut();
    // SAFETY: an owned tensor handed over, a valid out-pointer.
    let code =
        unsafe { rsdlpack_py_export(tensor.into_raw(), &mut exporter, std::ptr::null_mut()) };
    assert_eq!(code, 0);
    // SAFETY: a new reference we were just given.
    let exporter = unsafe { Bound::from_owned_ptr(py, exporter) };
    drop(black_box(calls.from_dlpack.call1((&exporter,)).unwrap()));
}

/// The export round trip and Julia's share, against NumPy → NumPy.
fn round_trips(py: Python<'_>, calls: &Calls<'_>, data: &[f32]) {
    println!("\n== export round trip (ns per call)");
    let spec = TensorDescriptor::from_julia_layout(
        data.as_ptr() as usize,
        Device::CPU,
        ElementType::Float32,
        &[16, 16],
        &[1, 16],
        IndexOrder::Producer,
    )
    .unwrap();
    let ndarray = calls.float32_ones((16, 16));
    let times = race(&mut [
        ("ours", &mut || export_once(py, calls, &spec)),
        ("numpy", &mut || {
            drop(black_box(calls.from_dlpack.call1((&ndarray,)).unwrap()));
        }),
        ("share", &mut || share_once(py, calls, data)),
    ]);
    // The shared buffer's root ids queue up: take them as Julia would.
    let mut sink = [0u64; 64];
    while rsdlpack_python::export::roots::take_released(&mut sink) > 0 {}
    println!(
        "Rust-owned 16×16 f32 → rsdlpack_py_export → np.from_dlpack: {:.0} ns; \
         np.from_dlpack(ndarray): {:.0} ns; ratio {:.2}x",
        times[0],
        times[1],
        times[0] / times[1]
    );
    println!(
        "Julia's share: rsdlpack_py_share → np.from_dlpack: {:.0} ns; ratio {:.2}x",
        times[2],
        times[2] / times[1]
    );
}

fn main() {
    let mut csv =
        String::from("bytes,numpy_ns,floor_ns,floor_dl_device_ns,ours_ns,ours_dl_device_ns\n");
    Python::attach(|py| {
        let calls = Calls::new(py);
        let data = vec![0f32; 256];
        match std::env::var("RSDLPACK_BENCH_PROFILE")
            .unwrap_or_default()
            .as_str()
        {
            profiled @ ("import" | "julia") => {
                let array = calls.np.call_method1("ones", (12,)).unwrap();
                let julia = profiled == "julia";
                profile(|| {
                    if julia {
                        import_plan_with(array.as_ptr(), &calls.cpu);
                    } else {
                        import_with(array.as_ptr(), Some(&calls.cpu));
                    }
                });
            }
            "share" => profile(|| share_once(py, &calls, &data)),
            _ => {
                numpy_imports(&calls, &mut csv);
                torch_import(py, &calls);
                round_trips(py, &calls, &data);
            }
        }
    });
    if let Ok(path) = std::env::var("RSDLPACK_BENCH_CSV") {
        std::fs::write(&path, csv).expect("writing the CSV");
        println!("\nimport rows written to {path}");
    }
}
