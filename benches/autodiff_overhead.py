"""What a differentiable call into torch costs beyond torch: forward + backward of an MLP through
the same C-ABI sequence Julia's PyFunction/torch_layer makes (share each input into torch.Tensor,
rsdlpack_autodiff's forward, import each output, share the cotangent, the pullback, import each
input cotangent), against the same computation in Python torch alone, and against a bridge that
copies every array through NumPy. A benchmark, not a test: it prints, asserts nothing.

    RSDLPACK_PYTHON_LIB=target/ext/release/librsdlpack_python.so .venv/bin/python benches/autodiff_overhead.py

The C calls go through ctypes (as the pytest suite calls them), which adds about a microsecond
per call that Julia's ccall does not: the "bridge calls" column is an upper bound for Julia.

The MLP is Linear(4096 => 16), Tanh, Linear(16 => 4096), called as the Lux layer calls it
(torch.func.functional_call on parameters the caller owns, gradients for the parameters and the
input): its input, output and their cotangents are 64 × 4096 float32 (1 MiB) at batch 64 and
4096 × 4096 (64 MiB) at batch 4096 — the arrays that cross. Each path runs in turn, round after
round (in alternating order, after one warm-up call each), so that a slow stretch of the machine
hits all three alike; medians are printed. "bridge calls" is the time spent in RsDLPack's C calls
within a step, "copies" the NumPy bridge's copies: the two overheads that scale, or do not, with
the size of the arrays that cross.
"""

import ctypes
import os
import pathlib
import statistics
import sys
import time

import numpy as np
import torch

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "test" / "python"))
import rsdlpack_autodiff as ad  # noqa: E402
from rsdlpack_ctypes import (  # noqa: E402
    ELEMENT_CODES,
    INDEX_ORDER_REVERSED,
    ArrayExport,
    Bridge,
    ImportResult,
    PlanOptions,
    ShareResult,
    adopt,
)

FEATURES, HIDDEN = 4096, 16
torch.set_num_threads(int(os.environ.get("RSDLPACK_BENCH_THREADS", "1")))


class Timer:
    def __init__(self):
        self.parts = {}

    def add(self, name, seconds):
        self.parts[name] = self.parts.get(name, 0.0) + seconds


def julia_array(values):
    """Memory laid out as Julia's (features, batch) array: C order (batch, features)."""
    return np.ascontiguousarray(values, dtype=np.float32)


class Rsdlpack:
    """Julia's sequence, call for call. The C calls are made with their argument structs built
    once per array (as Julia's ccall passes its isbits structs), so that ctypes adds no more
    than its own call overhead."""

    def __init__(self, bridge, module):
        self.bridge = bridge
        self.lib = bridge.lib
        self.call = ad.Module(module)
        self.root = 0
        self.exports = {}
        self.result = ShareResult()
        self.error = ctypes.c_void_p()
        self.plan_options = PlanOptions.of(order=INDEX_ORDER_REVERSED)
        self.imported = ImportResult()
        self.roots = (ctypes.c_uint64 * 64)()

    def export_of(self, memory):
        key = (memory.ctypes.data, memory.shape)
        if key not in self.exports:
            dims = list(reversed(memory.shape))
            strides, step = [], 1
            for d in dims:
                strides.append(step)
                step *= d
            dims_c = (ctypes.c_int64 * len(dims))(*dims)
            strides_c = (ctypes.c_int64 * len(dims))(*strides)
            array = ArrayExport(memory.ctypes.data, dims_c, strides_c, len(dims), 0, 0, ELEMENT_CODES["float32"],
                                INDEX_ORDER_REVERSED, 1, 0, 0, 0)
            self.exports[key] = (array, dims_c, strides_c, memory)
        return self.exports[key][0]

    def share(self, memory):
        array = self.export_of(memory)
        self.root += 1
        array.root_id = self.root
        code = self.lib.rsdlpack_py_share_into(ctypes.byref(array), torch.Tensor, ctypes.byref(self.result),
                                               ctypes.byref(self.error))
        assert code == 0
        return adopt(self.result.exporter)

    def import_(self, tensor):
        code = self.lib.rsdlpack_py_import_plan(tensor, None, ctypes.byref(self.plan_options),
                                                ctypes.byref(self.imported), ctypes.byref(self.error))
        assert code == 0
        return self.imported.plan.tensor

    def step(self, params, x, cotangent, timer):
        t0 = time.perf_counter()
        shared = [self.share(m) for m in (*params, x)]
        t1 = time.perf_counter()
        forward = self.call.forward(True, *shared)
        del shared
        t2 = time.perf_counter()
        y = self.import_(forward.outputs[0])
        shared_cotangent = self.share(cotangent)
        t3 = time.perf_counter()
        grads = forward.pullback(shared_cotangent, *([None] * (len(forward.outputs) - 1)))
        del shared_cotangent
        t4 = time.perf_counter()
        handles = [self.import_(g) for g in grads.tensors]
        for handle in (y, *handles):  # what Julia's arrays do when they are collected
            self.lib.rsdlpack_imported_release(handle)
        while self.lib.rsdlpack_py_take_released_roots(self.roots, 64) == 64:  # Julia's unroot_released!
            pass
        t5 = time.perf_counter()
        timer.add("bridge calls", (t1 - t0) + (t3 - t2) + (t5 - t4))
        timer.add("forward + pullback (Python)", (t2 - t1) + (t4 - t3))
        return y


def torch_alone(module, names, params, x, cotangent):
    """The same computation in Python torch: functional_call on leaves that require grad, then
    torch.autograd.grad for the parameters and the input."""
    leaves = [p.detach().requires_grad_() for p in params]
    leaf = x.detach().requires_grad_()
    y = torch.func.functional_call(module, dict(zip(names, leaves)), (leaf,))
    return torch.autograd.grad(y, [*leaves, leaf], cotangent)


def numpy_copies(module, names, params, x, cotangent, timer):
    """A bridge that copies every array through NumPy each way (what a Julia user without DLPack
    does: Array -> numpy.ndarray copy -> torch.from_numpy, and .numpy() copies back)."""
    t0 = time.perf_counter()
    tensors = [torch.from_numpy(np.array(a, copy=True)) for a in (*params, x)]
    t1 = time.perf_counter()
    leaves = [t.requires_grad_() for t in tensors]
    y = torch.func.functional_call(module, dict(zip(names, leaves[:-1])), (leaves[-1],))
    t2 = time.perf_counter()
    out = np.array(y.detach().numpy(), copy=True)
    ct = torch.from_numpy(np.array(cotangent, copy=True))
    t3 = time.perf_counter()
    grads = torch.autograd.grad(y, leaves, ct)
    t4 = time.perf_counter()
    back = [np.array(g.numpy(), copy=True) for g in grads]
    t5 = time.perf_counter()
    timer.add("copies", (t1 - t0) + (t3 - t2) + (t5 - t4))
    return out, back


def median_ms(samples):
    return statistics.median(samples) * 1e3


def main():
    library = os.environ.get("RSDLPACK_PYTHON_LIB")
    if not library:
        sys.exit("RSDLPACK_PYTHON_LIB must name the built bridge (source scripts/env.sh; build_python_bridge)")
    bridge = Bridge(library, ctypes.PyDLL)  # the GIL held across each call, as under Julia
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, FEATURES))
    names = [n for n, _ in module.named_parameters()]
    params_np = [julia_array(p.detach().numpy()) for p in module.parameters()]
    params_t = [torch.from_numpy(p) for p in params_np]
    rsdlpack = Rsdlpack(bridge, module)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); MLP Linear({FEATURES} => {HIDDEN}), "
          f"Tanh, Linear({HIDDEN} => {FEATURES}), float32, forward + backward (parameters and input)")
    print(f"{'batch':>6} {'crossing':>9} {'torch alone':>12} {'RsDLPack':>10} {'NumPy copies':>13} "
          f"{'RsDLPack - torch':>17} {'bridge calls':>13} {'copies':>9} {'copies / bridge calls':>22}")
    for batch, rounds in ((64, 41), (4096, 9)):
        rng = np.random.default_rng(batch)
        x_np = julia_array(rng.standard_normal((batch, FEATURES)))
        ct_np = julia_array(rng.standard_normal((batch, FEATURES)))
        x_t, ct_t = torch.from_numpy(x_np), torch.from_numpy(ct_np)
        # Same numbers through every path.
        want = torch_alone(module, names, params_t, x_t, ct_t)
        _, back = numpy_copies(module, names, params_np, x_np, ct_np, Timer())
        assert all(np.allclose(b, w.numpy(), rtol=1e-4, atol=1e-5) for b, w in zip(back, want))
        times = {"torch": [], "rsdlpack": [], "numpy": [], "bridge": [], "copies": []}
        paths = {
            "torch": lambda: torch_alone(module, names, params_t, x_t, ct_t),
            "rsdlpack": lambda: rsdlpack.step(params_np, x_np, ct_np, rs_timer),
            "numpy": lambda: numpy_copies(module, names, params_np, x_np, ct_np, np_timer),
        }
        for run in paths.values():  # warm-up: first calls, the argument structs built
            rs_timer, np_timer = Timer(), Timer()
            run()
        for k in range(rounds):
            rs_timer, np_timer = Timer(), Timer()
            order = list(paths) if k % 2 == 0 else list(reversed(paths))
            for name in order:
                t0 = time.perf_counter()
                paths[name]()
                times[name].append(time.perf_counter() - t0)
            times["bridge"].append(rs_timer.parts["bridge calls"])
            times["copies"].append(np_timer.parts["copies"])
        bridge_us = statistics.median(times["bridge"]) * 1e6
        copies_us = statistics.median(times["copies"]) * 1e6
        crossing = f"{x_np.nbytes / 2**20:g} MiB"
        print(f"{batch:>6} {crossing:>9} {median_ms(times['torch']):>9.3f} ms {median_ms(times['rsdlpack']):>7.3f} ms "
              f"{median_ms(times['numpy']):>10.3f} ms "
              f"{(median_ms(times['rsdlpack']) - median_ms(times['torch'])) * 1e3:>14.1f} µs "
              f"{bridge_us:>10.1f} µs {copies_us / 1e3:>6.2f} ms {copies_us / bridge_us:>21.0f}×")
        sys.stdout.flush()
    fixed_cost(bridge)


def fixed_cost(bridge):
    """The per-call cost alone: the whole sequence on a 4-wide MLP at batch 2, where torch's own
    work is smallest, against torch alone on the same; best of five runs of 2000 calls each."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 4))
    names = [n for n, _ in module.named_parameters()]
    params_np = [julia_array(p.detach().numpy()) for p in module.parameters()]
    params_t = [torch.from_numpy(p) for p in params_np]
    x_np, ct_np = julia_array(np.ones((2, 4))), julia_array(np.ones((2, 4)))
    x_t, ct_t = torch.from_numpy(x_np), torch.from_numpy(ct_np)
    rsdlpack, timer = Rsdlpack(bridge, module), Timer()
    paths = {"torch alone": lambda: torch_alone(module, names, params_t, x_t, ct_t),
             "RsDLPack": lambda: rsdlpack.step(params_np, x_np, ct_np, timer)}
    best = {}
    for name, run in paths.items():
        for _ in range(200):
            run()
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(2000):
                run()
            runs.append((time.perf_counter() - t0) / 2000)
        best[name] = min(runs) * 1e6
    timer = Timer()
    for _ in range(2000):
        rsdlpack.step(params_np, x_np, ct_np, timer)
    calls = timer.parts["bridge calls"] / 2000 * 1e6
    print(f"per call, Linear(4 => 4), Tanh, Linear(4 => 4) at batch 2: torch alone {best['torch alone']:.1f} µs, "
          f"RsDLPack {best['RsDLPack']:.1f} µs, difference {best['RsDLPack'] - best['torch alone']:.1f} µs "
          f"(bridge calls {calls:.1f} µs for 6 shares, 6 imports, 6 releases)")


if __name__ == "__main__":
    main()
