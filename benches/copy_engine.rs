//! Copy-engine and planner costs, as ratios measured in one run (the machines are shared and
//! noisy: compare within a run, not across runs).
//!
//!     cargo bench --bench copy_engine
//!
//! Reports, for a 4096×4096 Float32 tensor (64 MiB): a plain `memcpy` of the bytes, and the
//! copy engine (output column-major, indices as the producer's) on a row-major source (a
//! transpose), a column-major source (contiguous runs) and a stepped view; and how long
//! planning a view takes for a sliced 6-d tensor.

use rsdlpack::copy::{AlignedBuffer, materialize};
use rsdlpack::layout::{CopyPolicy, IndexOrder, plan};
use rsdlpack::{Device, ElementType, TensorDescriptor};
use std::hint::black_box;
use std::time::{Duration, Instant};

fn best_of<F: FnMut()>(runs: usize, mut f: F) -> Duration {
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .min()
        .expect("at least one run")
}

fn descriptor(first_element: usize, shape: &[i64], strides: &[i64]) -> TensorDescriptor {
    TensorDescriptor {
        first_element,
        device: Device::CPU,
        element: ElementType::Float32,
        shape: rsdlpack::DimVec::from_slice(shape).unwrap(),
        strides: rsdlpack::DimVec::from_slice(strides).unwrap(),
        read_only: false,
        is_copied: false,
        version: None,
    }
}

fn main() {
    let n: i64 = 4096;
    let source = AlignedBuffer::zeroed((n * n) as usize * 4);
    let address = source.as_ptr() as usize;
    let mut target = AlignedBuffer::zeroed(source.len());

    let memcpy = best_of(5, || {
        // SAFETY: both buffers hold source.len() bytes and do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                source.as_ptr(),
                target.as_mut_slice().as_mut_ptr(),
                source.len(),
            )
        };
        black_box(&target);
    });
    let cases = [
        (
            "row-major source (a transpose into column-major)",
            descriptor(address, &[n, n], &[n, 1]),
        ),
        (
            "column-major source (contiguous runs)",
            descriptor(address, &[n, n], &[1, n]),
        ),
        (
            "stepped [::2, ::2]",
            descriptor(address, &[n / 2, n / 2], &[2 * n, 2]),
        ),
    ];
    // The copy engine writes into a fresh buffer, whose pages fault in on first touch: the
    // fair baseline is a memcpy into a fresh buffer too.
    let fresh_memcpy = best_of(5, || {
        let fresh = AlignedBuffer::zeroed(source.len());
        // SAFETY: both buffers hold source.len() bytes and do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(source.as_ptr(), fresh.as_ptr(), source.len()) };
        drop(black_box(fresh));
    });
    println!(
        "memcpy of 64 MiB: {:.2} ms into a warm buffer, {:.2} ms into a fresh one",
        memcpy.as_secs_f64() * 1e3,
        fresh_memcpy.as_secs_f64() * 1e3
    );
    let memcpy = fresh_memcpy;
    for (name, d) in &cases {
        let bytes = d.dense_byte_size() as f64;
        let took = best_of(5, || {
            // SAFETY: every descriptor addresses elements inside `source`.
            let copy = unsafe { materialize(d, IndexOrder::Producer) };
            drop(black_box(copy.unwrap()));
        });
        let per_byte_vs_memcpy =
            (took.as_secs_f64() / bytes) / (memcpy.as_secs_f64() / source.len() as f64);
        println!(
            "copy engine, {name}: {:.2} ms, {per_byte_vs_memcpy:.2}x a fresh memcpy's time per byte ({} rayon threads)",
            took.as_secs_f64() * 1e3,
            rayon::current_num_threads()
        );
    }

    let sliced = descriptor(address, &[3, 2, 5, 2, 4, 3], &[-4320, 720, 36, 18, 3, 1]);
    let runs = 10_000;
    let start = Instant::now();
    for _ in 0..runs {
        black_box(plan(black_box(&sliced), IndexOrder::Producer, CopyPolicy::Never).unwrap());
    }
    println!(
        "planning a sliced 6-d view: {:.2} µs each",
        start.elapsed().as_secs_f64() * 1e6 / runs as f64
    );
}
