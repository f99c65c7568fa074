//! Planner and copy-engine costs, as ratios measured in one run (the machines are shared and
//! noisy: compare within a run, never across runs).
//!
//!     bash scripts/bench.sh        (or: cargo bench --bench plan_and_copy)
//!
//! - validate + plan (`decide` into a flat plan, as an import does), ns per layout (C, F, permuted, stepped, reversed, sliced, size-1 dims,
//!   (3, 1000003), (4, 2^28), 32 dims): what `from_dlpack` spends deciding before Julia wraps;
//!   then adversarial strides a producer can choose (issue 30's, and up to 32 dims with last
//!   strides rich in divisors, prime or semiprime), and the worst of them beside the worst
//!   common layout;
//! - copies of float32, float64, float16 and uint8 tensors of 1 KiB and 1 GiB (square for
//!   float32 and uint8, twice as many columns as rows otherwise) into a fresh column-major buffer, on 1 and 2
//!   rayon threads, per layout (column-major source = contiguous runs, row-major source = a
//!   transpose, a stepped [::2, ::2] view), as bandwidth relative to a memcpy of the same
//!   output bytes into a fresh buffer (so both pay for first-touch page faults).
//!
//! Knobs for profiling one copy: `RSDLPACK_BENCH_CASE` (part of a case name, e.g. `transpose`),
//! `RSDLPACK_BENCH_SIZE` (`KiB` or `GiB`), `RSDLPACK_BENCH_THREADS` (`1` or `2`),
//! `RSDLPACK_BENCH_ELEMENT` (`f32`, `f64`, `f16` or `u8`).
//! `RSDLPACK_BENCH_REUSE=1` copies into one buffer whose pages are in already (both sides),
//! to time the copy kernels without the kernel's page clearing.
//! `RSDLPACK_BENCH_RUNS` (a number) times that many batches instead, to give a profiler samples
//! (planner and copies alike). `RSDLPACK_BENCH_CALLS` (a number) makes each validate + plan
//! batch that many calls instead of ~2 ms: with `RSDLPACK_BENCH_RUNS=1` and `=2` under
//! callgrind, the difference of the two counts is one batch's instructions alone
//! (`scripts/budgets.sh`).
//! `RSDLPACK_BENCH_ZERO_SOURCE=1` leaves the source unwritten, as benches before it was filled:
//! every read then hits the kernel's shared (huge) zero page, a few MiB at most of physical
//! memory that stays in cache, so the copies read no DRAM at all.

use rsdlpack::copy::{AlignedBuffer, copy_into, materialize};
use rsdlpack::dlpark::DlpackFlags;
use rsdlpack::dlpark::ffi::{DLDataType, DLDevice, DLTensor};
use rsdlpack::layout::{ArrayPlan, ArrayRequest, IndexOrder, Target, decide};
use rsdlpack::{Device, ElementType, TensorDescriptor};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// The best time per call of `runs` timed batches of `batch` calls each (small copies take
/// ~100 ns: timed one by one, the clock's own cost would be half the figure).
fn best_of<F: FnMut()>(runs: usize, batch: u32, mut f: F) -> Duration {
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..batch {
                f();
            }
            start.elapsed() / batch
        })
        .min()
        .expect("at least one run")
}

/// A host tensor at `first_element` (DLPack order, strides in elements).
fn descriptor(
    first_element: usize,
    element: ElementType,
    shape: &[i64],
    strides: &[i64],
) -> TensorDescriptor {
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let strides: Vec<isize> = strides.iter().map(|&s| s as isize).collect();
    *TensorDescriptor::from_julia_layout(
        first_element,
        Device::CPU,
        element,
        &dims,
        &strides,
        IndexOrder::Producer,
    )
    .unwrap()
}

/// Ns per call of validate + plan for a raw tensor (never dereferenced: a fake address).
fn plan_ns(shape: &[i64], strides: &[i64]) -> f64 {
    let mut shape = shape.to_vec();
    let mut strides = strides.to_vec();
    let tensor = DLTensor {
        data: (1usize << 61) as *mut _, // room below for negative strides
        device: DLDevice::CPU,
        ndim: shape.len() as i32,
        dtype: DLDataType::F32,
        shape: shape.as_mut_ptr(),
        strides: strides.as_mut_ptr(),
        byte_offset: 0,
    };
    // What an import plans: a host array in the producer's order, a copy only if needed,
    // written into the caller's flat plan.
    let request = ArrayRequest::new(Target::HostArray);
    let mut out = ArrayPlan::zeroed();
    // Validated where it lies, as an import validates into its tensor's descriptor.
    let mut d = TensorDescriptor::empty();
    // One loop, for the calibration and the batches alike: a second call site would leave
    // `validate_into` out of line here (LLVM inlines a function called once), and the rows
    // would time the call besides the work (BENCHMARKS.md, "Issue 39").
    let mut batch = |calls: u32| {
        let start = Instant::now();
        for _ in 0..calls {
            // SAFETY: shape and strides point into the vectors above, alive for the loop.
            unsafe { d.validate_into(black_box(&tensor), None, DlpackFlags::empty()) }.unwrap();
            black_box(decide(black_box(&d), black_box(&request), &mut out).unwrap());
            black_box(&mut out);
        }
        start.elapsed().as_secs_f64() / f64::from(calls)
    };
    // Batches of ~2 ms: 20000 calls of the common layouts, fewer of the adversarial ones; or
    // `RSDLPACK_BENCH_CALLS` each, a count that does not depend on the clock (callgrind).
    let calls = match knob("RSDLPACK_BENCH_CALLS").parse() {
        Ok(calls) => calls,
        Err(_) => (2e-3 / batch(10)).clamp(1.0, 20_000.0) as u32,
    };
    let batches = knob("RSDLPACK_BENCH_RUNS").parse().unwrap_or(15);
    let mut samples: Vec<f64> = (0..batches).map(|_| batch(calls) * 1e9).collect();
    // The timed loop's last plan is read: LLVM has dropped planner work that no read needed.
    let mut reference = ArrayPlan::zeroed();
    decide(&d, &request, &mut reference).unwrap();
    assert!(
        same_plan(&out, &reference),
        "the timed plan is the planner's answer"
    );
    // The fastest batch: planning is pure computation, and on a shared machine every slower
    // batch is slower only because something else ran.
    samples.sort_by(f64::total_cmp);
    samples[0]
}

/// Whether two flat plans say the same (their entries up to `ndims`).
fn same_plan(a: &ArrayPlan, b: &ArrayPlan) -> bool {
    let n = a.ndims as usize;
    let scalars = |p: &ArrayPlan| {
        let flags = (p.kind, p.needs_view, p.needs_permutation);
        (p.ndims, p.parent_address, flags)
    };
    let entries = |p: &ArrayPlan| {
        [
            p.dims,
            p.parent_dims,
            p.starts,
            p.steps,
            p.lengths,
            p.permutation,
        ]
        .map(|e| e[..n].to_vec())
    };
    scalars(a) == scalars(b) && entries(a) == entries(b)
}

fn planner() {
    println!("== validate + plan (ns per call, best of 15 batches of ~2 ms)");
    let cube = [6i64 * 6, 6, 1];
    let layouts: Vec<(&str, Vec<i64>, Vec<i64>)> = vec![
        ("C-order (3, 4)", vec![3, 4], vec![4, 1]),
        ("F-order (3, 4)", vec![3, 4], vec![1, 3]),
        ("permuted 4-d", vec![2, 3, 4, 5], vec![20, 1, 5, 60]),
        ("stepped a[::2, ::3] of 8×9", vec![4, 3], vec![18, 3]),
        (
            "stepped a[::2, ::2, ::2] of 8³",
            vec![4, 4, 4],
            vec![128, 16, 2],
        ),
        ("reversed a[::-1] of 12", vec![12], vec![-1]),
        (
            "sliced a[:, ::4, ::4] of 6³",
            vec![6, 2, 2],
            vec![cube[0], 4 * cube[1], 4],
        ),
        (
            "size-1 dims (1, 3, 1, 4)",
            vec![1, 3, 1, 4],
            vec![99, 4, -7, 1],
        ),
        (
            "C-order (3, 1000003)",
            vec![3, 1_000_003],
            vec![1_000_003, 1],
        ),
        ("C-order (4, 2^28)", vec![4, 1 << 28], vec![1 << 28, 1]),
        (
            "32 dims of 2, C-order",
            vec![2; 32],
            (0..32).rev().map(|k| 1i64 << k).collect(),
        ),
    ];
    // `RSDLPACK_BENCH_LAYOUT=32` (any part of a name) plans only the matching layouts.
    let wanted = std::env::var("RSDLPACK_BENCH_LAYOUT").unwrap_or_default();
    let mut common_worst = (0.0, String::new());
    for (name, shape, strides) in layouts.into_iter().filter(|l| l.0.contains(&wanted)) {
        let ns = plan_ns(&shape, &strides);
        println!("{name:>32}: {ns:>9.0} ns");
        if ns > common_worst.0 {
            common_worst = (ns, name.to_string());
        }
    }
    println!("== validate + plan of adversarial strides (the least-parent search's worst cases)");
    let mut worst = (0.0, String::new());
    for (name, shape, strides) in adversarial().into_iter().filter(|l| l.0.contains(&wanted)) {
        let ns = plan_ns(&shape, &strides);
        println!("{name:>32}: {ns:>9.0} ns");
        if ns > worst.0 {
            worst = (ns, name);
        }
    }
    println!(
        "worst adversarial {:.0} ns ({}), worst common {:.0} ns ({}): {:.1}x",
        worst.0,
        worst.1,
        common_worst.0,
        common_worst.1,
        worst.0 / common_worst.0
    );
}

/// Layouts a producer can choose to make the least-parent search work hard: the cases of
/// issue 30, and up to 32 dims last strides rich in divisors (the search's lattice), prime
/// (factored by trial division and a primality test) or the product of two 30-bit primes
/// (Pollard's rho), with faster strides that nest (the gcd chain holds) but not tightly.
fn adversarial() -> Vec<(String, Vec<i64>, Vec<i64>)> {
    let mut layouts = vec![
        (
            "issue 30: 8 dims".to_string(),
            vec![3, 2, 3, 3, 2, 3, 2, 2],
            vec![-90, 324000, 18, 2700, -3, 10800, 6, 224403121196654400],
        ),
        (
            "issue 30: 4 dims".to_string(),
            vec![3, 2, 2, 2],
            vec![-2, -14, 32340, 224403121196654400],
        ),
        (
            "issue 30: fuzzed 2×2×2×2".to_string(),
            vec![2, 2, 2, 2],
            vec![-103340120832, 65685564303840000, 486096, -3],
        ),
    ];
    // 103680 divisors (the most of any value below 2⁶³ / 4), 24 prime factors; the second
    // has 38 prime factors, enough for 32 nesting dims.
    let rich: [(i64, &[(i64, u32)]); 2] = [
        (
            897612484786617600,
            &[
                (2, 8),
                (3, 4),
                (5, 2),
                (7, 2),
                (11, 1),
                (13, 1),
                (17, 1),
                (19, 1),
                (23, 1),
                (29, 1),
                (31, 1),
                (37, 1),
            ],
        ),
        (
            10414962832834560,
            &[
                (2, 31),
                (3, 1),
                (5, 1),
                (7, 1),
                (11, 1),
                (13, 1),
                (17, 1),
                (19, 1),
            ],
        ),
    ];
    for ndim in [2usize, 3, 4, 6, 8, 12, 16, 24, 32] {
        let (last, primes) = if ndim <= 24 { rich[0] } else { rich[1] };
        // Faster strides: the running products of the prime factors (each at least twice the
        // one before, so the gcd chain nests; 4 is not a multiple of 3, so no chain is tight).
        let factors: Vec<i64> = primes
            .iter()
            .flat_map(|&(p, e)| std::iter::repeat_n(p, e as usize))
            .collect();
        let mut strides: Vec<i64> = factors
            .iter()
            .scan(1i64, |product, &p| {
                *product *= p;
                Some(*product)
            })
            .take(ndim - 1)
            .collect();
        strides.push(last);
        // Producer order: slowest first, every other stride negative.
        strides.reverse();
        for (k, s) in strides.iter_mut().enumerate() {
            if k % 2 == 1 {
                *s = -*s;
            }
        }
        layouts.push((
            format!("divisor-rich last, {ndim} dims"),
            vec![2; ndim],
            strides,
        ));
    }
    // Lattices the search takes whole: 2162160 = 2⁴·3³·5·7·11·13 has 320 divisors, searched
    // over two and three levels (640 and 960 of the 1024 cells the planner affords).
    layouts.push((
        "320 divisors, 3 dims".to_string(),
        vec![2, 2, 2],
        vec![2162160, 3, 1],
    ));
    layouts.push((
        "320 divisors, 4 dims".to_string(),
        vec![2, 2, 2, 2],
        vec![2162160, 720, 3, 1],
    ));
    // 32 dims: strides 3⁰ … 3³⁰ and 3³², whose 33 divisors over 31 levels are 1023 cells.
    layouts.push((
        "33 divisors, 32 dims".to_string(),
        vec![2; 32],
        (0..32)
            .rev()
            .map(|k| 3i64.pow(k + u32::from(k == 31)))
            .collect(),
    ));
    // 2⁶⁰ - 93 (prime), and 1073741789 · 1073741783.
    let (prime, semiprime, p) = (1152921504606846883i64, 1152921423002469787i64, 1073741789);
    layouts.push(("prime last, 2 dims".to_string(), vec![2, 3], vec![prime, 7]));
    layouts.push((
        "semiprime last, 2 dims".to_string(),
        vec![2, 3],
        vec![semiprime, 7],
    ));
    // [pq, p, 1]: the gcd chain nests through p (a semiprime has no longer chain).
    layouts.push((
        "semiprime last, 3 dims".to_string(),
        vec![2, 3, 2],
        vec![semiprime, p, 1],
    ));
    // Suffix gcds of 1 above the first link: refused as soon as the gcd chain is formed.
    let mut strides: Vec<i64> = (0..31).rev().map(|k| 1i64 << k).collect();
    strides.insert(0, prime);
    layouts.push(("prime last, 32 dims".to_string(), vec![2; 32], strides));
    layouts
}

/// The value of knob `name`, or "" (which every case name contains).
fn knob(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

/// The element types the copies are measured for, with their names in the output.
const ELEMENTS: [(&str, ElementType); 4] = [
    ("f32", ElementType::Float32),
    ("f64", ElementType::Float64),
    ("f16", ElementType::Float16),
    ("u8", ElementType::UInt8),
];

/// Copies of `bytes`-byte tensors of each element type: `rows` × `cols` elements, as square as
/// powers of two allow (rows = cols for 1- and 4-byte elements, cols = 2·rows for 2- and
/// 8-byte).
fn copies(threads: usize, bytes: usize) {
    let size = if bytes >= 1 << 30 { "1 GiB" } else { "1 KiB" };
    if !size.contains(&knob("RSDLPACK_BENCH_SIZE")) {
        return;
    }
    let wanted_element = knob("RSDLPACK_BENCH_ELEMENT");
    for (element_name, element) in ELEMENTS.iter().filter(|e| e.0.contains(&wanted_element)) {
        let count = bytes / element.size();
        let rows = 1i64 << (count.ilog2() / 2);
        let cols = count as i64 / rows;
        copies_of(threads, size, element_name, *element, rows, cols);
    }
}

fn copies_of(
    threads: usize,
    size: &str,
    element_name: &str,
    element: ElementType,
    rows: i64,
    cols: i64,
) {
    let n = element.size();
    let bytes = (rows * cols) as usize * n;
    let mut source = AlignedBuffer::zeroed(bytes);
    if knob("RSDLPACK_BENCH_ZERO_SOURCE") != "1" {
        // Real data: written pages are distinct physical memory, as a producer's tensor is.
        // (Counters in 8-byte words, whatever the element: only bits are moved.)
        for (i, word) in source.as_mut_slice().chunks_exact_mut(8).enumerate() {
            word.copy_from_slice(&(i as u64).to_ne_bytes());
        }
    }
    let address = source.as_ptr() as usize;
    let (runs, batch) = if bytes > 1 << 20 { (3, 1) } else { (51, 500) };
    let runs = knob("RSDLPACK_BENCH_RUNS").parse().unwrap_or(runs);
    let cases = [
        (
            "column-major source",
            descriptor(address, element, &[rows, cols], &[1, rows]),
        ),
        (
            "row-major source (transpose)",
            descriptor(address, element, &[rows, cols], &[cols, 1]),
        ),
        (
            "stepped [::2, ::2]",
            descriptor(address, element, &[rows / 2, cols / 2], &[2 * cols, 2]),
        ),
    ];
    let shape = format!("{element_name} {rows}×{cols}");
    let wanted = knob("RSDLPACK_BENCH_CASE");
    for (name, d) in cases.iter().filter(|c| c.0.contains(&wanted)) {
        let out = d.dense_byte_size();
        let (memcpy, took) = if knob("RSDLPACK_BENCH_REUSE") == "1" {
            // Both into one buffer whose pages are in already: the kernels alone.
            let mut reused = AlignedBuffer::zeroed(out);
            reused.as_mut_slice().fill(1);
            let memcpy = best_of(runs, batch, || {
                // SAFETY: both buffers hold at least `out` bytes and do not overlap.
                unsafe { std::ptr::copy_nonoverlapping(source.as_ptr(), reused.as_ptr(), out) };
                black_box(&mut reused);
            });
            let took = best_of(runs, batch, || {
                // SAFETY: every descriptor addresses elements inside `source`.
                unsafe { copy_into(d, IndexOrder::Producer, reused.as_mut_slice()) }.unwrap();
                black_box(&mut reused);
            });
            (memcpy, took)
        } else {
            // The copy engine writes into a fresh buffer whose pages fault in on first touch:
            // the fair baseline is a memcpy of as many bytes into a fresh buffer too.
            let memcpy = best_of(runs, batch, || {
                let fresh = AlignedBuffer::zeroed(out);
                // SAFETY: both buffers hold at least `out` bytes and do not overlap.
                unsafe { std::ptr::copy_nonoverlapping(source.as_ptr(), fresh.as_ptr(), out) };
                drop(black_box(fresh));
            });
            let took = best_of(runs, batch, || {
                // SAFETY: every descriptor addresses elements inside `source`.
                let copy = unsafe { materialize(d, IndexOrder::Producer) };
                drop(black_box(copy.unwrap()));
            });
            (memcpy, took)
        };
        println!(
            "{size:>7} {shape:>15} {threads:>2} thread(s) {name:>28}: {:>10.3} µs, memcpy {:>10.3} µs: {:.2}x memcpy bandwidth",
            took.as_secs_f64() * 1e6,
            memcpy.as_secs_f64() * 1e6,
            memcpy.as_secs_f64() / took.as_secs_f64()
        );
    }
}

/// `RSDLPACK_BENCH_ONLY=plan` or `=copy` runs one half (for profiling); unset runs both.
fn main() {
    let only = std::env::var("RSDLPACK_BENCH_ONLY").unwrap_or_default();
    if only != "copy" {
        planner();
    }
    if only == "plan" {
        return;
    }
    println!("\n== copies into a fresh column-major buffer (best of several)");
    let wanted = knob("RSDLPACK_BENCH_THREADS");
    for threads in [1, 2]
        .into_iter()
        .filter(|t| t.to_string().contains(&wanted))
    {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a thread pool");
        pool.install(|| {
            copies(threads, 1 << 10);
            copies(threads, 1 << 30);
        });
    }
}
