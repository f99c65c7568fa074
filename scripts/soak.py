"""Soak test of the C entry points: many import/export cycles through ctypes (loaded as a plain
shared library, so each call releases the GIL and the library takes it back, as under Julia's
ccall), with the process's resident memory sampled after a warm-up, at a few points between
and at the end. Run by scripts/soak.sh (not part of CI: about a minute per million cycles).

Each cycle, with NumPy arrays made once beforehand:
- import: `rsdlpack_py_import_plan` on one of four arrays, then the plan's handle goes
  the way Julia sends it: a view released now (`rsdlpack_imported_release`), a view queued
  by a finalizer (`rsdlpack_imported_release_later`, drained by the next call), or a copy
  (`rsdlpack_imported_copy_into`, for a broadcast array that must be copied);
- export, alternately: `rsdlpack_py_share` of a "Julia array" (column-major over a NumPy buffer,
  rooted by id; the released ids taken back when the answer reports some, as Julia does), or
  `rsdlpack_py_import` + `rsdlpack_py_export` (a DLPack round trip); either way
  `np.from_dlpack` consumes the exporter, and the result is dropped.

Fails (exit 1) when resident memory grows by more than the tolerance (4 MiB: a leak of one
16-byte allocation per cycle would add 15 MiB over a million) between the sample after warm-up
and the end, when a NumPy array's reference count changed (a leaked or over-released
reference), when releases are left pending or roots unreturned, or when a consumer sees wrong
data (checked every 1000 cycles).

    python scripts/soak.py [--cycles N] [--tolerance-mib M] [--loader cdll|pydll] [--leak-exporters]
"""

import argparse
import ctypes
import gc
import os
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "test" / "python"))
from rsdlpack_ctypes import (ELEMENT_CODES, PLAN_COPY, PLAN_VIEW, PYTHON_API, TENSOR_P,  # noqa: E402
                             ArrayExport, Bridge, ImportResult, PlanOptions, ShareResult)

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes():
    """Current resident set size (Linux: /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def reference_counts(objects):
    # Indexed: a loop variable (or a zip's tuple) would hold one more reference to each.
    return [sys.getrefcount(objects[i]) for i in range(len(objects))]


def mib(n):
    return n / (1 << 20)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=1_000_000)
    parser.add_argument("--warmup", type=int, default=20_000)
    parser.add_argument("--samples", type=int, default=10, help="RSS samples after the warm-up")
    parser.add_argument("--tolerance-mib", type=float, default=4.0)
    parser.add_argument("--loader", choices=["cdll", "pydll"], default="cdll")
    parser.add_argument("--leak-exporters", action="store_true",
                        help="self-test: skip the Py_DecRef of each exporter's reference, to see the soak fail")
    args = parser.parse_args(argv)
    path = os.environ.get("RSDLPACK_PYTHON_LIB")
    if not path or not os.path.exists(path):
        sys.exit("RSDLPACK_PYTHON_LIB must name the built bridge (scripts/soak.sh sets it)")
    bridge = Bridge(path, ctypes.CDLL if args.loader == "cdll" else ctypes.PyDLL)
    lib = bridge.lib
    py_decref = PYTHON_API.Py_DecRef

    # The producers' arrays: C order, a permuted and stepped view, a 0-d array (all viewed
    # zero-copy), and a broadcast one (zero strides: planned as a copy).
    arrays = [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.arange(120, dtype=np.int16).reshape(4, 5, 6)[::-1, 1::2, ::3].transpose(2, 0, 1),
        np.array(7.5),
        np.broadcast_to(np.arange(4.0), (3, 4)),
    ]
    copy_buffer = (ctypes.c_double * 12)()
    copy_address = ctypes.cast(copy_buffer, ctypes.c_void_p)
    # The "Julia array" to share: a 3x4 column-major Float64 matrix over NumPy's buffer.
    backing = np.arange(12, dtype=np.float64)
    dims = (ctypes.c_int64 * 2)(3, 4)
    strides = (ctypes.c_int64 * 2)(1, 3)
    roots = (ctypes.c_uint64 * 64)()
    expected_shared = backing.reshape(3, 4, order="F")
    watched = arrays + [backing]
    refcounts = reference_counts(watched)

    plan_options = PlanOptions.of()
    result = ImportResult()
    share_result = ShareResult()
    tensor = TENSOR_P()
    exported = ctypes.py_object()
    error = ctypes.c_void_p()
    counts = {"views released now": 0, "views released later": 0, "copies": 0, "shares": 0,
              "round trips": 0, "roots returned": 0}
    outstanding_roots = set()

    def fail(message):
        if error.value:
            message += ": " + ctypes.string_at(error.value).decode()
        sys.exit(f"soak: FAILED at cycle {cycle}: {message}")

    def take_roots():
        while True:
            n = lib.rsdlpack_py_take_released_roots(roots, len(roots))
            outstanding_roots.difference_update(roots[:n])
            counts["roots returned"] += n
            if n < len(roots):
                return

    def one_cycle(cycle):
        check = cycle % 1000 == 0
        # Import: plan, then release now / later, or copy.
        a = arrays[cycle % len(arrays)]
        if lib.rsdlpack_py_import_plan(a, None, ctypes.byref(plan_options), ctypes.byref(result), ctypes.byref(error)):
            fail("rsdlpack_py_import_plan")
        plan = result.plan
        if plan.kind == PLAN_COPY:
            if lib.rsdlpack_imported_copy_into(plan.tensor, copy_address, ctypes.sizeof(copy_buffer), ctypes.byref(error)):
                fail("rsdlpack_imported_copy_into")
            counts["copies"] += 1
            if check and list(copy_buffer) != list(np.asarray(a).ravel(order="F")):
                fail("the copy differs from the producer's data")
        elif plan.kind == PLAN_VIEW:
            if (cycle // len(arrays)) % 2:
                lib.rsdlpack_imported_release_later(plan.tensor)   # drained by the next call
                counts["views released later"] += 1
            else:
                lib.rsdlpack_imported_release(plan.tensor)
                counts["views released now"] += 1
        else:
            fail(f"unexpected plan kind {plan.kind}")
        if result.released_roots:
            take_roots()

        # Export: share a Julia-style array, or import + export a DLPack tensor.
        if cycle % 2 == 0:
            array = ArrayExport(backing.ctypes.data, dims, strides, 2, cycle, 0, ELEMENT_CODES["float64"], 0, 1, 0, 0, 0)
            if lib.rsdlpack_py_share(ctypes.byref(array), ctypes.byref(share_result), ctypes.byref(error)):
                fail("rsdlpack_py_share")
            outstanding_roots.add(cycle)
            exporter = share_result.exporter
            if not args.leak_exporters:
                py_decref(exporter)   # the entry point's new reference; ours is `exporter`
            if share_result.released_roots:
                take_roots()
            seen = np.from_dlpack(exporter)
            if check and not (seen == expected_shared).all():
                fail("the consumer of a shared array sees other data")
            counts["shares"] += 1
        else:
            if lib.rsdlpack_py_import(backing, None, ctypes.byref(tensor), ctypes.byref(error)):
                fail("rsdlpack_py_import")
            if lib.rsdlpack_py_export_with_stream(tensor, 0, ctypes.byref(exported), ctypes.byref(error)):
                fail("rsdlpack_py_export")
            exporter = exported.value
            if not args.leak_exporters:
                py_decref(exporter)   # as above
            seen = np.from_dlpack(exporter)
            if check and not (seen.ctypes.data == backing.ctypes.data and (seen == backing).all()):
                fail("the round trip changed the data or its address")
            counts["round trips"] += 1
        del seen, exporter

    cycle = 0
    for cycle in range(args.warmup):
        one_cycle(cycle)
    gc.collect()
    start = time.perf_counter()
    samples = [(0, rss_bytes())]
    every = max(1, args.cycles // args.samples)
    print(f"soak: {args.cycles} cycles after {args.warmup} warm-up cycles, library {path} ({args.loader})")
    print(f"  cycle {0:>9}: RSS {mib(samples[0][1]):8.2f} MiB (after warm-up)")
    for i in range(args.cycles):
        cycle = args.warmup + i
        one_cycle(cycle)
        if (i + 1) % every == 0 or i + 1 == args.cycles:
            gc.collect()
            samples.append((i + 1, rss_bytes()))
            n, rss = samples[-1]
            print(f"  cycle {n:>9}: RSS {mib(rss):8.2f} MiB ({mib(rss - samples[0][1]):+.2f} MiB)", flush=True)
    elapsed = time.perf_counter() - start

    gc.collect()
    lib.rsdlpack_py_flush_releases()
    take_roots()
    pending = lib.rsdlpack_py_pending_releases()
    leaked_refs = [after - before for after, before in zip(reference_counts(watched), refcounts)]
    growth = samples[-1][1] - samples[0][1]
    print(f"  {elapsed:.1f} s, {1e6 * elapsed / max(args.cycles, 1):.1f} µs per cycle; warm-up included: " +
          ", ".join(f"{v} {k}" for k, v in counts.items()))
    print(f"  RSS: {mib(samples[0][1]):.2f} MiB after warm-up, {mib(samples[-1][1]):.2f} MiB at the end, "
          f"growth {mib(growth):+.2f} MiB (tolerance {args.tolerance_mib} MiB); peak {mib(max(r for _, r in samples)):.2f} MiB")
    print(f"  pending releases {pending}, roots not returned {len(outstanding_roots)}, "
          f"reference count changes of the arrays {leaked_refs}")
    problems = []
    if growth > args.tolerance_mib * (1 << 20):
        problems.append(f"RSS grew by {mib(growth):.2f} MiB")
    if pending:
        problems.append(f"{pending} releases still pending")
    if outstanding_roots:
        problems.append(f"{len(outstanding_roots)} shared roots never returned")
    if any(leaked_refs):
        problems.append(f"reference counts changed: {leaked_refs}")
    print("soak: " + ("FAILED: " + "; ".join(problems) if problems else "passed"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
