"""The transposing copy as shipped, against torch, NumPy and memcpy, side by side in one process.

    python bridges/python/benches/copies.py THREADS

RsDLPack is what `from_dlpack(Matrix{T}, a)` does for a row-major n×n array (the typed form,
`order=:producer`): `rsdlpack_py_import_plan` with `DENSE_REQUIRED`, then
`rsdlpack_imported_copy_into` into a column-major buffer, through `librsdlpack_python.so`
(`RSDLPACK_PYTHON_LIB`) loaded with the GIL held. torch is `dst.copy_(src.T)`, NumPy
`np.copyto` into a Fortran-ordered array, memcpy `np.copyto` of the same bytes (on two threads,
the faster of one `np.copyto` and one per thread, each copying its share: NumPy releases the
GIL while it copies). Every side
writes into one destination whose pages are in already: the copies alone are timed.

The caller sets the thread count before this process starts (`RAYON_NUM_THREADS` for
RsDLPack's pool, which is built once); torch gets `torch.set_num_threads(THREADS)`. Each row
is the best of several rounds, the sides taking turns within each round, as bandwidth relative
to memcpy on the same number of threads; at 1 GiB torch and NumPy are timed once (each of
their transposes takes seconds there). `RSDLPACK_BENCH_SIZE` (`1 MiB`, `64`, `GiB`: part of a
size) and `RSDLPACK_BENCH_ELEMENT` (part of a NumPy type name) pick rows;
`RSDLPACK_BENCH_PEERS=0` leaves torch and NumPy out (to compare two builds of RsDLPack).
"""

import concurrent.futures
import ctypes
import os
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "test" / "python"))
from rsdlpack_ctypes import (  # noqa: E402
    DENSE_REQUIRED,
    ELEMENT_CODE_COMPLEX_F64,
    ELEMENT_CODE_FLOAT32,
    ELEMENT_CODE_UINT8,
    PLAN_KIND_COPY,
    Bridge,
    PlanOptions,
)

try:
    import torch
except ImportError:
    torch = None

ELEMENTS = [
    ("float32", np.float32, ELEMENT_CODE_FLOAT32),
    ("uint8", np.uint8, ELEMENT_CODE_UINT8),
    ("complex128", np.complex128, ELEMENT_CODE_COMPLEX_F64),
]
SIZES = [("1 MiB", 1 << 20), ("64 MiB", 64 << 20), ("1 GiB", 1 << 30)]


def best_of(sides, rounds, calls, slow=()):
    """Seconds per call of each side, the best over `rounds`, the sides taking turns; the
    sides in `slow` in the first round alone."""
    best = {name: float("inf") for name in sides}
    for round in range(rounds):
        for name, call in sides.items():
            if round > 0 and name in slow:
                continue
            start = time.perf_counter()
            for _ in range(calls):
                call()
            best[name] = min(best[name], (time.perf_counter() - start) / calls)
    return best


def main():
    threads = int(sys.argv[1])
    wanted = os.environ.get("RSDLPACK_BENCH_SIZE", "")
    wanted_element = os.environ.get("RSDLPACK_BENCH_ELEMENT", "")
    peers = os.environ.get("RSDLPACK_BENCH_PEERS", "1") != "0"
    bridge = Bridge(os.environ["RSDLPACK_PYTHON_LIB"], ctypes.PyDLL)
    if torch is not None:
        torch.set_num_threads(threads)
    pool = concurrent.futures.ThreadPoolExecutor(threads)
    rng = np.random.default_rng(0)
    for size_name, nbytes in SIZES:
        if wanted not in size_name:
            continue
        for name, dtype, code in (e for e in ELEMENTS if wanted_element in e[0]):
            n = int((nbytes // np.dtype(dtype).itemsize) ** 0.5)
            # Real data: distinct pages, none of them the kernel's shared zero page.
            src = np.frombuffer(rng.bytes(n * n * np.dtype(dtype).itemsize), dtype).reshape(n, n).copy()
            dst = np.ones((n, n), dtype, order="F")
            flat_src, flat_dst = src.reshape(-1), dst.T.reshape(-1)
            assert np.shares_memory(flat_dst, dst)
            options = PlanOptions.of(element_code=code, ndims=2, dense=DENSE_REQUIRED)
            address, size = dst.ctypes.data, dst.nbytes
            halves = [slice(k * (n * n) // threads, (k + 1) * (n * n) // threads) for k in range(threads)]

            def ours():
                result, error = bridge.import_plan(src, options)
                assert error is None and result.plan.kind == PLAN_KIND_COPY, error
                code = bridge.lib.rsdlpack_imported_copy_into(result.plan.tensor, address, size, None)
                assert code == 0

            def memcpy():
                np.copyto(flat_dst, flat_src)

            def memcpy_threads():
                list(pool.map(lambda s: np.copyto(flat_dst[s], flat_src[s]), halves))

            sides = {"memcpy": memcpy, "RsDLPack": ours}
            if threads > 1:
                sides["memcpy on threads"] = memcpy_threads
            if peers:
                sides["NumPy"] = lambda: np.copyto(dst, src)
            if peers and torch is not None:
                t_src, t_dst = torch.from_numpy(src), torch.from_numpy(dst.T)
                sides["torch"] = lambda: t_dst.copy_(t_src.T)
            # Every side writes the same bytes: check them once before timing.
            for side, call in sides.items():
                if nbytes >= 1 << 30 and side in ("torch", "NumPy"):
                    continue  # checked at the smaller sizes: the same calls
                dst.fill(0)
                call()
                expected = (flat_dst, flat_src) if side.startswith("memcpy") else (dst, src)
                assert np.array_equal(*expected, equal_nan=True), f"{side} copied wrongly"
            # Short batches, many of them: on a busy machine a long one is rarely left to run whole.
            rounds, calls = (3, 1) if nbytes >= 1 << 30 else (7, 1) if nbytes >= 64 << 20 else (201, 5)
            # A peer's 1 GiB transpose takes seconds to a minute: timed once.
            best = best_of(sides, rounds, calls, slow=("torch", "NumPy") if nbytes >= 1 << 30 else ())
            # On several threads, memcpy is the faster of one np.copyto and one per thread: a
            # small copy is quicker on one thread than handed to a pool.
            memcpy_s = min(best.pop("memcpy"), best.pop("memcpy on threads", float("inf")))
            ratio = {side: memcpy_s / t for side, t in best.items()}
            cells = " ".join(f"{side} {ratio[side]:.2f}×" for side in ("RsDLPack", "torch", "NumPy") if side in ratio)
            print(f"{size_name:>6} {name:>10} {n:>5}², {threads} thread{'s' if threads > 1 else ' '}: {cells}"
                  f"   (memcpy {nbytes / memcpy_s / 1e9:.1f} GB/s)", flush=True)


if __name__ == "__main__":
    main()
