"""What a differentiable call into torch costs beyond torch: forward + backward of an MLP through
the same C-ABI sequence Julia's PyFunction/torch_layer makes (share each input into torch.Tensor,
a Module's parameters once and then kept, as the Lux layer keeps them while the optimiser updates
the same arrays in place; rsdlpack_autodiff's forward, import its outputs in one call, share the
cotangent, the pullback, import the input cotangents in one call), against the same computation in
Python torch alone, and against a bridge that copies every array through NumPy. A benchmark, not
a test: it prints, asserts nothing.

    RSDLPACK_PYTHON_LIB=target/ext/release/librsdlpack_python.so .venv/bin/python benches/autodiff_overhead.py

To compare with an earlier Python half side by side in the same run, name a copy of it:

    git show main:python/rsdlpack_autodiff.py > /tmp/rsdlpack_autodiff_before.py
    RSDLPACK_AUTODIFF_BEFORE=/tmp/rsdlpack_autodiff_before.py \
      RSDLPACK_PYTHON_LIB=target/ext/release/librsdlpack_python.so .venv/bin/python benches/autodiff_overhead.py

"torch alone" is the idiomatic Python way: the module called on the input (its parameters
requiring grad), then torch.autograd.grad for the parameters and the input; "functional_call"
is the same through torch.func.functional_call on leaves the caller owns (what the Lux layer's
functional style asks of torch). The C calls go through ctypes (as the pytest suite calls them),
which costs per call what Julia's ccall does not: each call's ctypes glue is priced on the same
call of a C function that ignores its arguments (`CtypesGlue`), and the overhead is printed with
and without it.

The MLP is Linear(4096 => 16), Tanh, Linear(16 => 4096), called as the Lux layer calls it
(parameters the caller owns and keeps, gradients for the parameters and the input): its input, output and
their cotangents are 64 × 4096 float32 (1 MiB) at batch 64 and 4096 × 4096 (64 MiB) at batch
4096 — the arrays that cross. Each path runs in turn, round after round (in alternating order,
after one warm-up call each), so that a slow stretch of the machine hits all alike; medians are
printed. "bridge calls" is the time spent in RsDLPack's C calls within a step, "peers
from_dlpack" the same crossings made in the same places by torch's and NumPy's own from_dlpack
(a path of its own in the rotation), "copies" the NumPy bridge's copies: the overheads that scale,
or do not, with the size of what crosses.
The last lines read the cost per call apart, on a 4-wide MLP at batch 2 (where torch's own work
is smallest: the fixed cost) and on the MLP above at batch 64, for the Lux layer's call (`Module`,
against torch alone and against functional_call) and for a frozen module as a function of its
input (`Function`, against torch alone differentiating the input only): the Python half alone,
ctypes' cost as the step runs, the bridge's C calls, and the same crossings made by the peers'
own from_dlpack (torch's and NumPy's) in the same step, the floor any DLPack bridge reads against.
"""

import ctypes
import functools
import importlib.util
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
    ArrayPlan,
    Bridge,
    ImportResult,
    PlanOptions,
    ShareResult,
    adopt,
)

FEATURES, HIDDEN = 4096, 16
# RSDLPACK_BENCH_QUICK=1: every path once or twice on small arrays, for the test that keeps this
# script running (test/python/test_benches.py); its figures mean nothing.
QUICK = os.environ.get("RSDLPACK_BENCH_QUICK") == "1"
if QUICK:
    FEATURES = 32
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
    """Julia's sequence, call for call, through the Python half `ad` (this tree's or an earlier
    one's), for a `Module` call (parameters, then the input; `function=False`) or a `Function`
    over a frozen module (the input alone). The C calls are made with their argument objects
    built once (as Julia's ccall passes its isbits structs and the Refs it holds), so that ctypes
    adds no more than its own call overhead, which `CtypesGlue` prices per call."""

    def __init__(self, bridge, module, ad=ad, function=False):
        self.bridge = bridge
        self.lib = bridge.lib
        self.function = function
        self.call = ad.Function(module) if function else ad.Module(module)
        self.prefix = () if function else (True,)
        self.root = 0
        self.exports = {}
        self.result = ShareResult()
        self.error = ctypes.c_void_p()
        self.plan_options = PlanOptions.of(order=INDEX_ORDER_REVERSED)
        self.results = {}  # per count of results: the ImportResult array and views of its handles, made once
        self.roots = (ctypes.c_uint64 * 64)()
        self.kept = {}  # a Module's parameters shared at an earlier step: position -> (array, tensor)
        self.made = {}  # the paths without the bridge: their kept parameter tensors, by the call that made them
        # Pointers made once, as Julia's ccall passes Refs it holds.
        self.result_p, self.error_p = ctypes.byref(self.result), ctypes.byref(self.error)
        self.plan_options_p = ctypes.byref(self.plan_options)

    def export_of(self, memory):
        """The ArrayExport of an array (built on first sight, by the array's identity: the bench's
        arrays live as long as it runs) and a pointer to it."""
        entry = self.exports.get(id(memory))
        if entry is None:
            dims = list(reversed(memory.shape))
            strides, step = [], 1
            for d in dims:
                strides.append(step)
                step *= d
            dims_c = (ctypes.c_int64 * len(dims))(*dims)
            strides_c = (ctypes.c_int64 * len(dims))(*strides)
            array = ArrayExport(memory.ctypes.data, dims_c, strides_c, len(dims), 0, 0, ELEMENT_CODES["float32"],
                                INDEX_ORDER_REVERSED, 1, 0, 0, 0)
            entry = self.exports[id(memory)] = (array, ctypes.byref(array), dims_c, strides_c, memory)
        return entry

    def share(self, memory):
        array, array_p = self.export_of(memory)[:2]
        self.root += 1
        array.root_id = self.root
        code = self.lib.rsdlpack_py_share_into(array_p, torch.Tensor, self.result_p, self.error_p)
        assert code == 0
        return adopt(self.result.exporter)

    def kept_parameter(self, k, memory):
        """Parameter `k` as Julia's layer passes it (KeptParameters, julia/autodiff.jl): the tensor
        shared at an earlier step while the same array comes again, else shared anew and kept."""
        entry = self.kept.get(k)
        if entry is None or entry[0] is not memory:
            entry = self.kept[k] = (memory, self.share(memory))
        return entry[1]

    def results_for(self, count):
        """An array of `count` ImportResults and views of each one's handle (built on first use, as
        Julia's results vector is; reading a handle is then one field read, as in Julia)."""
        entry = self.results.get(count)
        if entry is None:
            results = (ImportResult * count)()
            offset = ImportResult.plan.offset + ArrayPlan.tensor.offset
            handles = [ctypes.c_void_p.from_buffer(results, k * ctypes.sizeof(ImportResult) + offset)
                       for k in range(count)]
            entry = self.results[count] = (results, handles)
        return entry

    def import_all(self, objects):
        """Julia's import of a call's results (`import_results`): every tensor of the tuple in one
        call; the handles, one per item that is not None."""
        results, handles = self.results_for(len(objects))
        code = self.lib.rsdlpack_py_import_plans(objects, None, self.plan_options_p, 0, results, len(objects),
                                                 self.error_p)
        assert code == 0
        return [h.value for h, o in zip(handles, objects) if o is not None]

    def parameters(self, params, made):
        """A Module step's parameter tensors, made by `made` at the first step and kept, as
        Julia's layer keeps them while the optimiser updates the same arrays in place."""
        if self.function:
            return []
        tensors = self.made.get(made)
        if tensors is None:
            tensors = self.made[made] = [made(p) for p in params]
        return tensors

    def step(self, params, x, cotangent, timer=None):
        """One forward + pullback as Julia makes it. With a `timer`, the time in the bridge's C
        calls and in the Python half is added to it; the lean path, without, is what is timed."""
        clock = time.perf_counter if timer is not None else int
        t0 = clock()
        shared = [] if self.function else [self.kept_parameter(k, m) for k, m in enumerate(params)]
        shared.append(self.share(x))
        t1 = clock()
        forward = self.call.forward(*self.prefix, *shared)
        del shared
        t2 = clock()
        (y,) = self.import_all(forward.outputs)
        shared_cotangent = self.share(cotangent)
        t3 = clock()
        grads = forward.pullback(shared_cotangent, *([None] * (len(forward.outputs) - 1)))
        del shared_cotangent
        t4 = clock()
        handles = self.import_all(grads.tensors)
        release = self.lib.rsdlpack_imported_release
        release(y)  # what Julia's arrays do when they are collected
        for handle in handles:
            release(handle)
        while self.lib.rsdlpack_py_take_released_roots(self.roots, 64) == 64:  # Julia's unroot_released!
            pass
        t5 = clock()
        if timer is not None:
            timer.add("bridge calls", (t1 - t0) + (t3 - t2) + (t5 - t4))
            timer.add("forward + pullback (Python)", (t2 - t1) + (t4 - t3))
        return y

    def step_without_bridge(self, params, x, cotangent, glue=None):
        """The step's Python half alone, on tensors torch.from_numpy makes and with no imports; with
        `glue` (CtypesGlue.calls), also the step's ctypes calls, in the same places, of the C
        function that ignores its arguments: the difference between the two is what ctypes costs in
        the step as it runs (more there than in a loop of its own, its code being cold)."""
        shared = list(self.parameters(params, torch.from_numpy))
        if glue:
            glue["rsdlpack_py_share_into"]()
        shared.append(torch.from_numpy(x))
        if glue:
            glue["Py_DecRef"]()
        forward = self.call.forward(*self.prefix, *shared)
        del shared
        if glue:
            glue["rsdlpack_py_import_plans"]()
            glue["rsdlpack_py_share_into"]()
        shared_cotangent = torch.from_numpy(cotangent)
        if glue:
            glue["Py_DecRef"]()
        grads = forward.pullback(shared_cotangent, *([None] * (len(forward.outputs) - 1)))
        del shared_cotangent
        if glue:
            glue["rsdlpack_py_import_plans"]()
            for _ in range(1 + len(grads.tensors)):
                glue["rsdlpack_imported_release"]()
            glue["rsdlpack_py_take_released_roots"]()
        return forward.outputs[0]

    def step_through_peers(self, params, x, cotangent, timer=None):
        """The step's Python half with the same crossings made by the peers' own DLPack calls:
        each array into torch by `torch.from_dlpack` of the NumPy array, each output and input
        cotangent out by `np.from_dlpack` of torch's tensor, all dropped at the end of the step
        (as Julia's releases are). What any DLPack bridge pays for these crossings in torch and
        NumPy, in the same places of the same step: the floor the bridge's calls are read against.
        With a `timer`, the time in those calls is added to it, as `step` adds the bridge's."""
        clock = time.perf_counter if timer is not None else int
        t0 = clock()
        shared = [*self.parameters(params, torch.from_dlpack), torch.from_dlpack(x)]
        t1 = clock()
        forward = self.call.forward(*self.prefix, *shared)
        del shared
        t2 = clock()
        y = np.from_dlpack(forward.outputs[0])
        shared_cotangent = torch.from_dlpack(cotangent)
        t3 = clock()
        grads = forward.pullback(shared_cotangent, *([None] * (len(forward.outputs) - 1)))
        del shared_cotangent
        t4 = clock()
        handles = [np.from_dlpack(g) for g in grads.tensors]
        del y, handles
        t5 = clock()
        if timer is not None:
            timer.add("crossings", (t1 - t0) + (t3 - t2) + (t5 - t4))
        return forward.outputs[0]

    def calls_per_step(self, params, x, cotangent):
        """The C calls of one step, by function ({name: count}), `adopt`'s decref included (Julia's
        PyObject takes the reference in Julia)."""
        parameters = [] if self.function else [self.kept_parameter(k, m) for k, m in enumerate(params)]
        shared = 2  # the input and the cotangent; the parameters are kept from the step before
        forward = self.call.forward(*self.prefix, *parameters, self.share(x))
        cotangent = self.share(cotangent)
        imported = 1 + len(forward.pullback(cotangent, *([None] * (len(forward.outputs) - 1))).tensors)
        # The output and the input cotangents: each tuple in one call.
        return {"rsdlpack_py_share_into": shared, "Py_DecRef": shared, "rsdlpack_py_import_plans": 2,
                "rsdlpack_imported_release": imported, "rsdlpack_py_take_released_roots": 1}


class CtypesGlue:
    """What each of a step's ctypes calls costs beyond its C function, in seconds: the same call
    (the same argument types, the same argument objects, through a PYFUNCTYPE as the bridge's
    PyDLL calls it) of a C function that ignores them (libc's `labs`: it reads its first argument
    register only, and the x86-64 and AArch64 C calling conventions let a callee ignore arguments
    it is passed). The median of 21 runs of 20000 calls each. Julia's ccall costs a few
    nanoseconds instead; the per-call figures print the overhead with and without this."""

    def __init__(self, rs, tensor):
        labs = ctypes.cast(ctypes.PyDLL(None).labs, ctypes.c_void_p).value
        handle = ctypes.c_void_p(0)
        lib = rs.lib
        calls = {
            "rsdlpack_py_share_into": (lib.rsdlpack_py_share_into.argtypes, ctypes.c_int32,
                                       (rs.export_of(julia_array(np.ones((2, 4))))[1], torch.Tensor, rs.result_p,
                                        rs.error_p)),
            "Py_DecRef": ([ctypes.py_object], None, (tensor,)),
            "rsdlpack_py_import_plans": (lib.rsdlpack_py_import_plans.argtypes, ctypes.c_int32,
                                         ((tensor,), None, rs.plan_options_p, 0, rs.results_for(1)[0], 1, rs.error_p)),
            "rsdlpack_imported_release": (lib.rsdlpack_imported_release.argtypes, None, (handle,)),
            "rsdlpack_py_take_released_roots": (lib.rsdlpack_py_take_released_roots.argtypes, ctypes.c_size_t,
                                                (rs.roots, 64)),
        }
        self.seconds, self.calls = {}, {}
        for name, (argtypes, restype, args) in calls.items():
            fn = ctypes.PYFUNCTYPE(restype, *argtypes)(labs)
            self.calls[name] = functools.partial(fn, *args)  # no more Python around it than the step has
            runs = []
            n = 20000 if not QUICK else 10
            for _ in range(21 if not QUICK else 1):
                t0 = time.perf_counter()
                for _ in range(n):
                    fn(*args)
                runs.append((time.perf_counter() - t0) / n)
            self.seconds[name] = statistics.median(runs)

    def of(self, calls):
        """The glue of a step's calls ({name: count}), in seconds."""
        return sum(self.seconds[name] * n for name, n in calls.items())


def load_before():
    """The Python half named by RSDLPACK_AUTODIFF_BEFORE (a copy of an earlier one), or None."""
    path = os.environ.get("RSDLPACK_AUTODIFF_BEFORE")
    if not path:
        return None
    spec = importlib.util.spec_from_file_location("rsdlpack_autodiff_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torch_idiomatic(module, x, cotangent, inputs_only=False):
    """The computation as Python torch users write it: the module called on an input that
    requires grad, torch.autograd.grad for its parameters (unless `inputs_only`) and the input."""
    leaf = x.detach().requires_grad_()
    y = module(leaf)
    return torch.autograd.grad(y, [leaf] if inputs_only else [*module.parameters(), leaf], cotangent)


def torch_alone(module, names, params, x, cotangent):
    """The same computation through torch.func.functional_call on leaves that require grad, then
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
    before = load_before()
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, FEATURES))
    names = [n for n, _ in module.named_parameters()]
    params_np = [julia_array(p.detach().numpy()) for p in module.parameters()]
    params_t = [torch.from_numpy(p) for p in params_np]
    rsdlpack = Rsdlpack(bridge, module)
    rsdlpack_before = Rsdlpack(bridge, module, before) if before else None
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); MLP Linear({FEATURES} => {HIDDEN}), "
          f"Tanh, Linear({HIDDEN} => {FEATURES}), float32, forward + backward (parameters and input)")
    print(f"{'batch':>6} {'crossing':>9} {'torch alone':>12} {'functional_call':>16} "
          f"{'RsDLPack before':>16} {'RsDLPack':>10} {'NumPy copies':>13} {'RsDLPack - torch':>17} "
          f"{'- functional_call':>18} "
          f"{'bridge calls':>13} {'peers from_dlpack':>18} {'copies':>9} {'copies / bridge calls':>22}")
    for batch, rounds in ((64, 41), (4096, 9)) if not QUICK else ((4, 2), (8, 2)):
        rng = np.random.default_rng(batch)
        x_np = julia_array(rng.standard_normal((batch, FEATURES)))
        ct_np = julia_array(rng.standard_normal((batch, FEATURES)))
        x_t, ct_t = torch.from_numpy(x_np), torch.from_numpy(ct_np)
        # Same numbers through every path.
        want = torch_alone(module, names, params_t, x_t, ct_t)
        _, back = numpy_copies(module, names, params_np, x_np, ct_np, Timer())
        assert all(np.allclose(b, w.numpy(), rtol=1e-4, atol=1e-5) for b, w in zip(back, want))
        idiomatic = torch_idiomatic(module, x_t, ct_t)
        assert all(torch.allclose(i, w, rtol=1e-4, atol=1e-5) for i, w in zip(idiomatic, want))
        times = {"torch": [], "functional_call": [], "before": [], "rsdlpack": [], "numpy": [], "bridge": [],
                 "copies": [], "peers": [], "peers' crossings": []}
        paths = {
            "torch": lambda: torch_idiomatic(module, x_t, ct_t),
            "functional_call": lambda: torch_alone(module, names, params_t, x_t, ct_t),
            "rsdlpack": lambda: rsdlpack.step(params_np, x_np, ct_np, rs_timer),
            "numpy": lambda: numpy_copies(module, names, params_np, x_np, ct_np, np_timer),
            "peers": lambda: rsdlpack.step_through_peers(params_np, x_np, ct_np, peers_timer),
        }
        if rsdlpack_before:
            paths["before"] = lambda: rsdlpack_before.step(params_np, x_np, ct_np, Timer())
        for run in paths.values():  # warm-up: first calls, the argument structs built
            rs_timer, np_timer, peers_timer = Timer(), Timer(), Timer()
            run()
        for k in range(rounds):
            rs_timer, np_timer, peers_timer = Timer(), Timer(), Timer()
            order = list(paths) if k % 2 == 0 else list(reversed(paths))
            for name in order:
                t0 = time.perf_counter()
                paths[name]()
                times[name].append(time.perf_counter() - t0)
            times["bridge"].append(rs_timer.parts["bridge calls"])
            times["copies"].append(np_timer.parts["copies"])
            times["peers' crossings"].append(peers_timer.parts["crossings"])
        bridge_us = statistics.median(times["bridge"]) * 1e6
        copies_us = statistics.median(times["copies"]) * 1e6
        peers_us = statistics.median(times["peers' crossings"]) * 1e6
        crossing = f"{x_np.nbytes / 2**20:g} MiB"
        before_ms = f"{median_ms(times['before']):>13.3f} ms" if times["before"] else f"{'-':>16}"
        print(f"{batch:>6} {crossing:>9} {median_ms(times['torch']):>9.3f} ms "
              f"{median_ms(times['functional_call']):>13.3f} ms {before_ms} {median_ms(times['rsdlpack']):>7.3f} ms "
              f"{median_ms(times['numpy']):>10.3f} ms "
              f"{(median_ms(times['rsdlpack']) - median_ms(times['torch'])) * 1e3:>14.1f} µs "
              f"{(median_ms(times['rsdlpack']) - median_ms(times['functional_call'])) * 1e3:>15.1f} µs "
              f"{bridge_us:>10.1f} µs {peers_us:>15.1f} µs {copies_us / 1e3:>6.2f} ms "
              f"{copies_us / bridge_us:>21.0f}×")
        sys.stdout.flush()
    fixed_cost(bridge, before, per_round=500 if not QUICK else 5)
    fixed_cost(bridge, before, FEATURES, HIDDEN, 64 if not QUICK else 4, per_round=20 if not QUICK else 2)


def fixed_cost(bridge, before, features=4, hidden=4, batch=2, per_round=500):
    """The per-call cost, read apart: the whole sequence on an MLP (by default 4-wide at batch 2,
    where torch's own work is smallest) against torch alone on the same, and the Python half alone
    and with ctypes' glue. 41 rounds; in each, every path runs `per_round` calls in turn (alternating
    order); the median over rounds of each path's mean per call."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, features))
    names = [n for n, _ in module.named_parameters()]
    params_np = [julia_array(p.detach().numpy()) for p in module.parameters()]
    params_t = [torch.from_numpy(p) for p in params_np]
    rng = np.random.default_rng(batch)
    x_np, ct_np = julia_array(rng.standard_normal((batch, features))), julia_array(rng.standard_normal((batch, features)))
    x_t, ct_t = torch.from_numpy(x_np), torch.from_numpy(ct_np)
    calls, steps = {}, {}
    paths = {"torch alone": lambda: torch_idiomatic(module, x_t, ct_t),
             "torch alone, input only": lambda: torch_idiomatic(module, x_t, ct_t, inputs_only=True),
             "functional_call": lambda: torch_alone(module, names, params_t, x_t, ct_t)}
    for label, ad_module in (("", ad), (" before", before)):
        if ad_module is None:
            continue
        for kind, function in (("Module", False), ("Function", True)):
            name = kind + label
            rs = steps[name] = Rsdlpack(bridge, module, ad_module, function=function)
            calls[name] = rs.calls_per_step(params_np, x_np, ct_np)
            paths[name] = (lambda rs: lambda: rs.step(params_np, x_np, ct_np))(rs)
    glue = CtypesGlue(steps["Module"], x_t)
    for kind in ("Module", "Function"):
        rs = steps[kind]
        paths[kind + ": Python half"] = (lambda rs: lambda: rs.step_without_bridge(params_np, x_np, ct_np))(rs)
        paths[kind + ": Python half + glue"] = (lambda rs: lambda: rs.step_without_bridge(params_np, x_np, ct_np,
                                                                                          glue.calls))(rs)
        paths[kind + ": peers' from_dlpack"] = (lambda rs: lambda: rs.step_through_peers(params_np, x_np, ct_np))(rs)
    for run in paths.values():
        for _ in range(max(per_round // 2, 5)):
            run()
    per_call = {name: [] for name in paths}
    rounds = 41 if not QUICK else 3
    for k in range(rounds):
        order = list(paths) if k % 2 == 0 else list(reversed(paths))
        for name in order:
            run = paths[name]
            t0 = time.perf_counter()
            for _ in range(per_round):
                run()
            per_call[name].append((time.perf_counter() - t0) / per_round * 1e6)
    median = {name: statistics.median(samples) for name, samples in per_call.items()}
    # Where a step's time goes, timed apart (the timer's own clock reads would inflate the above).
    parts = {}
    for name, rs in steps.items():
        timer = Timer()
        n = max(rounds * per_round // 5, 1)
        for _ in range(n):
            rs.step(params_np, x_np, ct_np, timer)
        parts[name] = {part: seconds / n * 1e6 for part, seconds in timer.parts.items()}
        if name in ("Module", "Function"):
            timer = Timer()
            for _ in range(n):
                rs.step_through_peers(params_np, x_np, ct_np, timer)
            parts[name]["peers' crossings"] = timer.parts["crossings"] / n * 1e6
    print(f"per call, Linear({features} => {hidden}), Tanh, Linear({hidden} => {features}) at batch {batch} "
          f"(medians of {rounds} rounds of {per_round} calls): "
          f"torch alone {median['torch alone']:.1f} µs, input only {median['torch alone, input only']:.1f} µs, "
          f"functional_call {median['functional_call']:.1f} µs; ctypes glue per call "
          + ", ".join(f"{name} {seconds * 1e6:.2f} µs" for name, seconds in glue.seconds.items()))
    # ctypes' cost as the step runs: the Python half with the step's calls of a C function that
    # ignores its arguments, less the Python half alone, round by round (its median and quartiles:
    # a difference of two paths of ~100 µs each, so noisy). It is this tree's Python half's, also
    # where an earlier Python half's rows subtract it: the calls are the same.
    glue_us, glue_spread = {}, {}
    for kind in ("Module", "Function"):
        rounds_us = [g - h for g, h in zip(per_call[kind + ": Python half + glue"], per_call[kind + ": Python half"])]
        glue_us[kind] = statistics.median(rounds_us)
        quartiles = statistics.quantiles(rounds_us, n=4) if len(rounds_us) > 1 else [rounds_us[0]] * 3
        glue_spread[kind] = f"quartiles {quartiles[0]:.1f} to {quartiles[2]:.1f}"
    for name in steps:
        kind = name.split()[0]
        baselines = ["torch alone, input only"] if kind == "Function" else ["torch alone", "functional_call"]
        beyond = "; ".join(f"{median[name] - median[b]:6.1f} µs beyond {b!r} "
                           f"({median[name] - median[b] - glue_us[kind]:5.1f} without ctypes)" for b in baselines)
        print(f"  {name:<16} {median[name]:7.1f} µs: {beyond}; ctypes glue of its {sum(calls[name].values())} calls "
              f"{glue_us[kind]:.1f} µs in the step ({glue_spread[kind]}; {glue.of(calls[name]) * 1e6:.1f} µs in a loop "
              f"of their own); bridge calls {parts[name]['bridge calls']:.1f} µs, Python half "
              f"{parts[name]['forward + pullback (Python)']:.1f} µs")
    for kind in ("Module", "Function"):
        baseline = "torch alone, input only" if kind == "Function" else "torch alone"
        half = median[kind + ": Python half"]
        print(f"  {kind}'s Python half alone (torch.from_numpy inputs, no bridge): {half:.1f} µs, "
              f"{half - median[baseline]:.1f} µs beyond {baseline!r}; the bridge (its C calls and the lines that "
              f"make them), ctypes' glue less: {median[kind] - median[kind + ': Python half + glue']:.1f} µs")
        peers = median[kind + ": peers' from_dlpack"]
        peers_calls = parts[kind]["peers' crossings"]
        print(f"  {kind} with the same crossings through the peers' own from_dlpack (torch.from_dlpack of "
              f"NumPy arrays, np.from_dlpack of torch's): {peers:.1f} µs, {peers - median[baseline]:.1f} µs beyond "
              f"{baseline!r}, {peers - half:.1f} µs of them the crossings; RsDLPack's step "
              f"{median[kind] - peers:.1f} µs beyond it ({median[kind] - peers - glue_us[kind]:.1f} without ctypes); "
              f"timed in the step, the peers' calls {peers_calls:.1f} µs against the bridge's "
              f"{parts[kind]['bridge calls']:.1f} µs (ctypes' glue included)")


if __name__ == "__main__":
    main()
