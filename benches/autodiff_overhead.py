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
functional style asks of torch). The step is made two ways. From C ("from C": the CPython
extension benches/autodiff_step.c, which this script builds into target/bench with the
interpreter's headers wherever there is a C compiler), the calls julia/autodiff.jl makes through
ccall, with nothing between them and the bridge: what the step costs Julia, less Julia's own
wrapping of the results. Through ctypes (as the pytest suite calls the bridge), which costs per
call what Julia's ccall does not; its glue is also priced apart, on the same calls of a C function
that ignores its arguments (`CtypesGlue`). A difference to a baseline is the median of the
round-by-round differences (each path runs once a round), with its quartiles.

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
Then the same 4-wide step with cold caches (`cold_cost`): caches swept as a 64 MiB activation
sweeps them, each path timed less its sweeps, which reads at batch 2 what the step costs beyond
torch at batch 4096, where torch alone's own spread hides it.

`--callgrind-count` runs the step scripts/budgets.py counts under callgrind instead.
"""

import ctypes
import functools
import importlib.util
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import sysconfig
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

    def from_c(self, steps, params, x, cotangent, floor=False):
        """This step made in C by `steps` (build_c_step's module) on these arrays, as Julia's
        ccall makes it: `.step()` runs one, `.timed_step()` also adds the time in the bridge's
        calls to `.bridge_seconds`. With `floor`, over torch's exchange table called directly
        instead of the bridge (nothing checked: how close to free a bridge can be)."""
        return steps.Stepper(None if floor else self.bridge.path, self.call.forward, self.prefix, torch.Tensor,
                             () if self.function else tuple(params), x, cotangent)

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
        forward.codes  # read, as Julia reads the kinds and devices
        t2 = clock()
        (y,) = self.import_all(forward.outputs)
        shared_cotangent = self.share(cotangent)
        t3 = clock()
        grads = forward.pullback(shared_cotangent, *([None] * (len(forward.outputs) - 1)))
        del shared_cotangent
        grads.codes  # read, as Julia reads them
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
        forward.codes  # read, as Julia reads them
        if glue:
            glue["rsdlpack_py_import_plans"]()
            glue["rsdlpack_py_share_into"]()
        shared_cotangent = torch.from_numpy(cotangent)
        if glue:
            glue["Py_DecRef"]()
        grads = forward.pullback(shared_cotangent, *([None] * (len(forward.outputs) - 1)))
        del shared_cotangent
        grads.codes  # read, as Julia reads them
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
        forward.codes  # read, as Julia reads them
        t2 = clock()
        y = np.from_dlpack(forward.outputs[0])
        shared_cotangent = torch.from_dlpack(cotangent)
        t3 = clock()
        grads = forward.pullback(shared_cotangent, *([None] * (len(forward.outputs) - 1)))
        del shared_cotangent
        grads.codes  # read, as Julia reads them
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


def build_c_step():
    """benches/autodiff_step.c built with the venv interpreter's headers into target/bench and
    loaded (the step as Julia makes it, with no ctypes), or None where there is no C compiler."""
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        return None
    out = REPO / "target" / "bench" / ("rsdlpack_autodiff_step" + sysconfig.get_config_var("EXT_SUFFIX"))
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([compiler, "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-std=c11", "-D_GNU_SOURCE",
                    "-I", str(REPO / "include"), "-I", sysconfig.get_config_var("INCLUDEPY"),
                    "-I", str(pathlib.Path(torch.__file__).parent / "include"),
                    str(REPO / "benches" / "autodiff_step.c"), "-o", str(out), "-ldl"], check=True)
    spec = importlib.util.spec_from_file_location("rsdlpack_autodiff_step", out)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def paired(samples, baseline):
    """Round by round, `samples` less `baseline` (each path runs once a round, so a slow stretch
    of the machine hits both): the median and quartiles of the differences, in µs, as text."""
    differences = [(a - b) * 1e6 for a, b in zip(samples, baseline)]
    quartiles = statistics.quantiles(differences, n=4) if len(differences) > 1 else differences * 3
    return f"{statistics.median(differences):.1f} µs (quartiles {quartiles[0]:.1f} to {quartiles[2]:.1f})"


def main():
    library = os.environ.get("RSDLPACK_PYTHON_LIB")
    if not library:
        sys.exit("RSDLPACK_PYTHON_LIB must name the built bridge (source scripts/env.sh; build_python_bridge)")
    bridge = Bridge(library, ctypes.PyDLL)  # the GIL held across each call, as under Julia
    before = load_before()
    steps = build_c_step()
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, FEATURES))
    names = [n for n, _ in module.named_parameters()]
    params_np = [julia_array(p.detach().numpy()) for p in module.parameters()]
    params_t = [torch.from_numpy(p) for p in params_np]
    # A path of its own for each way of making the step: a Module keeps the leaves of the
    # parameter tensors it was last given, so paths that shared one would make new leaves at
    # every turn, which no Julia layer does.
    rsdlpack, rsdlpack_c, rsdlpack_floor, rsdlpack_peers = (Rsdlpack(bridge, module) for _ in range(4))
    rsdlpack_before = Rsdlpack(bridge, module, before) if before else None
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); MLP Linear({FEATURES} => {HIDDEN}), "
          f"Tanh, Linear({HIDDEN} => {FEATURES}), float32, forward + backward (parameters and input)")
    if steps is None:
        print("NOT RUN: the step from C (benches/autodiff_step.c) needs a C compiler; the ctypes rows stand alone")
    for batch, rounds in ((64, 201), (4096, 15)) if not QUICK else ((4, 2), (8, 2)):
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
        timers = {name: Timer() for name in ("ctypes", "copies", "peers")}
        paths = {
            "torch alone": lambda: torch_idiomatic(module, x_t, ct_t),
            "functional_call": lambda: torch_alone(module, names, params_t, x_t, ct_t),
            "through ctypes": lambda: rsdlpack.step(params_np, x_np, ct_np, timers["ctypes"]),
            "copies": lambda: numpy_copies(module, names, params_np, x_np, ct_np, timers["copies"]),
            "peers": lambda: rsdlpack_peers.step_through_peers(params_np, x_np, ct_np, timers["peers"]),
        }
        if steps is not None:
            from_c = rsdlpack_c.from_c(steps, params_np, x_np, ct_np)
            paths["from C"] = from_c.timed_step
            floor = rsdlpack_floor.from_c(steps, params_np, x_np, ct_np, floor=True)
            paths["floor"] = floor.timed_step
        if rsdlpack_before:
            paths["before"] = (rsdlpack_before.from_c(steps, params_np, x_np, ct_np).step if steps is not None else
                               lambda: rsdlpack_before.step(params_np, x_np, ct_np))
        for run in paths.values():  # warm-up: first calls, the argument structs built
            run()
        times = {name: [] for name in paths}
        parts = {name: [] for name in ("ctypes", "copies", "peers", "from C", "floor")}
        for k in range(rounds):
            for timer in timers.values():
                timer.parts.clear()
            bridge_seconds = from_c.bridge_seconds if steps is not None else 0.0
            floor_seconds = floor.bridge_seconds if steps is not None else 0.0
            order = list(paths) if k % 2 == 0 else list(reversed(paths))
            for name in order:
                t0 = time.perf_counter()
                paths[name]()
                times[name].append(time.perf_counter() - t0)
            parts["ctypes"].append(timers["ctypes"].parts["bridge calls"])
            parts["copies"].append(timers["copies"].parts["copies"])
            parts["peers"].append(timers["peers"].parts["crossings"])
            if steps is not None:
                parts["from C"].append(from_c.bridge_seconds - bridge_seconds)
                parts["floor"].append(floor.bridge_seconds - floor_seconds)
        us = {name: statistics.median(samples) * 1e6 if samples else float("nan") for name, samples in parts.items()}
        print(f"batch {batch}, {x_np.nbytes / 2**20:g} MiB crossing each way (medians of {rounds} rounds): "
              f"torch alone {median_ms(times['torch alone']):.3f} ms, functional_call "
              f"{median_ms(times['functional_call']):.3f} ms, NumPy copies {median_ms(times['copies']):.3f} ms")
        rows = [("from C", "RsDLPack from C (Julia's calls)", "from C"), ("floor", "the floor from C", "floor"),
                ("through ctypes", "RsDLPack through ctypes", "ctypes")]
        if "before" in paths:
            rows.append(("before", "RsDLPack before" + (" from C" if steps is not None else " through ctypes"), None))
        for name, label, part in rows:
            if name not in paths:
                continue
            calls = f"; its {'floor' if part == 'floor' else 'bridge'} calls {us[part]:.1f} µs" if part else ""
            print(f"  {label:<34} {median_ms(times[name]):7.3f} ms: beyond torch alone "
                  f"{paired(times[name], times['torch alone'])}, beyond functional_call "
                  f"{paired(times[name], times['functional_call'])}{calls}")
        bridge_us = us["from C"] if steps is not None else us["ctypes"]
        print(f"  the same crossings by the peers' own from_dlpack {us['peers']:.1f} µs; NumPy's copies "
              f"{us['copies'] / 1e3:.2f} ms, {us['copies'] / bridge_us:.0f}× the bridge's calls "
              f"({'from C' if steps is not None else 'through ctypes'})")
        sys.stdout.flush()
    fixed_cost(bridge, before, steps, per_round=500 if not QUICK else 5)
    fixed_cost(bridge, before, steps, FEATURES, HIDDEN, 64 if not QUICK else 4, per_round=5 if not QUICK else 2,
               rounds=201 if not QUICK else 3)
    cold_cost(bridge, steps, mib=64 if not QUICK else 1, rounds=101 if not QUICK else 3)


def fixed_cost(bridge, before, steps, features=4, hidden=4, batch=2, per_round=500, rounds=41):
    """The per-call cost, read apart: the whole sequence on an MLP (by default 4-wide at batch 2,
    where torch's own work is smallest) against torch alone on the same, from C and through ctypes,
    and the Python half alone and with ctypes' glue. In each of `rounds` rounds, every path runs
    `per_round` calls in turn (alternating order); a path's figure is the median over rounds of
    its mean per call, and its difference to a baseline the median of the round-by-round
    differences."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, features))
    names = [n for n, _ in module.named_parameters()]
    params_np = [julia_array(p.detach().numpy()) for p in module.parameters()]
    params_t = [torch.from_numpy(p) for p in params_np]
    rng = np.random.default_rng(batch)
    x_np, ct_np = julia_array(rng.standard_normal((batch, features))), julia_array(rng.standard_normal((batch, features)))
    x_t, ct_t = torch.from_numpy(x_np), torch.from_numpy(ct_np)
    calls, steps_by_name, from_c = {}, {}, {}
    paths = {"torch alone": lambda: torch_idiomatic(module, x_t, ct_t),
             "torch alone, input only": lambda: torch_idiomatic(module, x_t, ct_t, inputs_only=True),
             "functional_call": lambda: torch_alone(module, names, params_t, x_t, ct_t)}
    for label, ad_module in (("", ad), (" before", before)):
        if ad_module is None:
            continue
        for kind, function in (("Module", False), ("Function", True)):
            name = kind + label
            rs = steps_by_name[name] = Rsdlpack(bridge, module, ad_module, function=function)
            calls[name] = rs.calls_per_step(params_np, x_np, ct_np)
            paths[name] = (lambda rs: lambda: rs.step(params_np, x_np, ct_np))(rs)
            if steps is not None:  # each path its own Module: see main
                from_c[name] = Rsdlpack(bridge, module, ad_module, function=function).from_c(steps, params_np, x_np,
                                                                                             ct_np)
                paths[name + ", from C"] = from_c[name].step
    floor = Rsdlpack(bridge, module).from_c(steps, params_np, x_np, ct_np, floor=True) if steps is not None else None
    if floor is not None:
        paths["Module over the floor, from C"] = floor.step
    glue = CtypesGlue(steps_by_name["Module"], x_t)
    peers = {}
    for kind, function in (("Module", False), ("Function", True)):
        half = Rsdlpack(bridge, module, function=function)  # both Python half paths pass the same tensors
        peers[kind] = Rsdlpack(bridge, module, function=function)
        paths[kind + ": Python half"] = (lambda rs: lambda: rs.step_without_bridge(params_np, x_np, ct_np))(half)
        paths[kind + ": Python half + glue"] = (lambda rs: lambda: rs.step_without_bridge(params_np, x_np, ct_np,
                                                                                          glue.calls))(half)
        paths[kind + ": peers' from_dlpack"] = (lambda rs: lambda: rs.step_through_peers(params_np, x_np,
                                                                                         ct_np))(peers[kind])
    for run in paths.values():
        for _ in range(max(per_round // 2, 5)):
            run()
    per_call = {name: [] for name in paths}
    for k in range(rounds):
        order = list(paths) if k % 2 == 0 else list(reversed(paths))
        for name in order:
            run = paths[name]
            t0 = time.perf_counter()
            for _ in range(per_round):
                run()
            per_call[name].append((time.perf_counter() - t0) / per_round)
    median = {name: statistics.median(samples) * 1e6 for name, samples in per_call.items()}
    # Where a step's time goes, timed apart (the timer's own clock reads would inflate the above).
    parts = {}
    n = max(rounds * per_round // 5, 1)
    for name, rs in steps_by_name.items():
        timer = Timer()
        for _ in range(n):
            rs.step(params_np, x_np, ct_np, timer)
        parts[name] = {part: seconds / n * 1e6 for part, seconds in timer.parts.items()}
        if name in from_c:
            stepper, bridge_seconds = from_c[name], from_c[name].bridge_seconds
            for _ in range(n):
                stepper.timed_step()
            parts[name]["from C"] = (stepper.bridge_seconds - bridge_seconds) / n * 1e6
        if name in peers:
            timer = Timer()
            for _ in range(n):
                peers[name].step_through_peers(params_np, x_np, ct_np, timer)
            parts[name]["peers' crossings"] = timer.parts["crossings"] / n * 1e6
    if floor is not None:
        floor_seconds = floor.bridge_seconds
        for _ in range(n):
            floor.timed_step()
        floor_us = (floor.bridge_seconds - floor_seconds) / n * 1e6
    print(f"per call, Linear({features} => {hidden}), Tanh, Linear({hidden} => {features}) at batch {batch} "
          f"(medians of {rounds} rounds of {per_round} calls): "
          f"torch alone {median['torch alone']:.1f} µs, input only {median['torch alone, input only']:.1f} µs, "
          f"functional_call {median['functional_call']:.1f} µs; ctypes glue per call "
          + ", ".join(f"{name} {seconds * 1e6:.2f} µs" for name, seconds in glue.seconds.items()))
    # ctypes' cost as the step runs, priced apart: the Python half with the step's calls of a C
    # function that ignores its arguments, less the Python half alone, round by round. The rows
    # from C need no such estimate; through ctypes less from C is what ctypes costs, measured.
    glue_us = {}
    for kind in ("Module", "Function"):
        glue_us[kind] = paired(per_call[kind + ": Python half + glue"], per_call[kind + ": Python half"])
    for name in steps_by_name:
        kind = name.split()[0]
        baselines = ["torch alone, input only"] if kind == "Function" else ["torch alone", "functional_call"]
        if name in from_c:
            beyond = "; ".join(f"{paired(per_call[name + ', from C'], per_call[b])} beyond {b!r}" for b in baselines)
            print(f"  {name + ', from C':<31} {median[name + ', from C']:7.1f} µs: {beyond}; bridge calls "
                  f"{parts[name]['from C']:.1f} µs (timed in C)")
        beyond = "; ".join(f"{paired(per_call[name], per_call[b])} beyond {b!r}" for b in baselines)
        measured = (f"; through ctypes less from C {paired(per_call[name], per_call[name + ', from C'])}"
                    if name in from_c else "")
        print(f"  {name + ', through ctypes':<31} {median[name]:7.1f} µs: {beyond}; bridge calls "
              f"{parts[name]['bridge calls']:.1f} µs, Python half {parts[name]['forward + pullback (Python)']:.1f} µs; "
              f"ctypes' glue of its {sum(calls[name].values())} calls, priced apart: {glue_us[kind]} in the step, "
              f"{glue.of(calls[name]) * 1e6:.1f} µs in a loop of their own{measured}")
    if floor is not None:
        name = "Module over the floor, from C"
        print(f"  {name:<31} {median[name]:7.1f} µs: {paired(per_call[name], per_call['torch alone'])} beyond "
              f"'torch alone'; floor calls {floor_us:.1f} µs (timed in C); the Module from C "
              f"{paired(per_call['Module, from C'], per_call[name])} beyond it")
    for kind in ("Module", "Function"):
        baseline = "torch alone, input only" if kind == "Function" else "torch alone"
        half = median[kind + ": Python half"]
        print(f"  {kind}'s Python half alone (torch.from_numpy inputs, no bridge): {half:.1f} µs, "
              f"{paired(per_call[kind + ': Python half'], per_call[baseline])} beyond {baseline!r}")
        peers_name = kind + ": peers' from_dlpack"
        ours, route = (kind + ", from C", "from C") if kind in from_c else (kind, "through ctypes")
        peers_calls = parts[kind]["peers' crossings"]
        print(f"  {kind} with the same crossings through the peers' own from_dlpack (torch.from_dlpack of "
              f"NumPy arrays, np.from_dlpack of torch's): {median[peers_name]:.1f} µs, "
              f"{paired(per_call[peers_name], per_call[baseline])} beyond {baseline!r}; RsDLPack's step ({route}) "
              f"{paired(per_call[ours], per_call[peers_name])} beyond it; timed in the step, the peers' calls "
              f"{peers_calls:.1f} µs")


class CacheSweep(torch.nn.Module):
    """A layer that evicts the caches, as a large activation does, in its forward and in its
    backward (a copy of `mib` MiB), and adds the time that took to `self.seconds`, so that a step
    can be timed without it."""

    def __init__(self, mib):
        super().__init__()
        self.source = np.ones(mib * 2**20 // 4, dtype=np.float32)
        self.target = np.empty_like(self.source)
        self.seconds = 0.0
        sweep = self.sweep

        class Sweep(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                sweep()
                return x.clone()

            @staticmethod
            def backward(ctx, grad):
                sweep()
                return grad

        self.function = Sweep

    def sweep(self):
        t0 = time.perf_counter()
        np.copyto(self.target, self.source)
        self.seconds += time.perf_counter() - t0

    def forward(self, x):
        return self.function.apply(x)


def cold_cost(bridge, steps, mib=64, rounds=101):
    """The per-call cost where a large activation has just left the caches cold, read apart: the
    4-wide MLP at batch 2 between two CacheSweep layers (the caches swept as the first and last
    layer's forward and backward run, and before each step), each path timed less its sweeps. What
    the step costs beyond torch alone at batch 4096, where torch alone's own spread (milliseconds)
    hides it."""
    if steps is None:
        print("NOT RUN: the step with cold caches needs the step from C (a C compiler)")
        return
    sweeps = CacheSweep(mib)
    torch.manual_seed(0)
    module = torch.nn.Sequential(sweeps, torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 4), sweeps)
    params_np = [julia_array(p.detach().numpy()) for p in module.parameters()]
    x_np, ct_np = julia_array(np.ones((2, 4))), julia_array(np.ones((2, 4)))
    x_t, ct_t = torch.from_numpy(x_np), torch.from_numpy(ct_np)
    half, peers = Rsdlpack(bridge, module), Rsdlpack(bridge, module)  # each path its own Module: see main
    module_c = Rsdlpack(bridge, module).from_c(steps, params_np, x_np, ct_np)
    floor_c = Rsdlpack(bridge, module).from_c(steps, params_np, x_np, ct_np, floor=True)
    paths = {"torch alone": lambda: torch_idiomatic(module, x_t, ct_t),
             "torch alone, input only": lambda: torch_idiomatic(module, x_t, ct_t, inputs_only=True),
             "Module, from C": module_c.timed_step,
             "Module over the floor, from C": floor_c.timed_step,
             "Function, from C": Rsdlpack(bridge, module, function=True).from_c(steps, params_np, x_np, ct_np).step,
             "Module's Python half alone": lambda: half.step_without_bridge(params_np, x_np, ct_np),
             "Module, peers' from_dlpack": lambda: peers.step_through_peers(params_np, x_np, ct_np)}
    for run in paths.values():  # warm-up: first calls, the kept parameters shared
        run()
    times = {name: [] for name in paths}
    timed_calls = {"Module, from C": module_c, "Module over the floor, from C": floor_c}
    calls = {name: [] for name in timed_calls}
    for k in range(rounds):
        order = list(paths) if k % 2 == 0 else list(reversed(paths))
        for name in order:
            sweeps.sweep()
            sweeps.seconds = 0.0
            stepper = timed_calls.get(name)
            bridge_seconds = stepper.bridge_seconds if stepper else 0.0
            t0 = time.perf_counter()
            paths[name]()
            times[name].append(time.perf_counter() - t0 - sweeps.seconds)
            if stepper:
                calls[name].append(stepper.bridge_seconds - bridge_seconds)
    print(f"per call with cold caches ({mib} MiB swept before each step and in the first and last layer's "
          f"forward and backward; each path timed less its sweeps; medians of {rounds} rounds), Linear(4 => 4), "
          f"Tanh, Linear(4 => 4) at batch 2: torch alone {median_ms(times['torch alone']) * 1e3:.1f} µs, input "
          f"only {median_ms(times['torch alone, input only']) * 1e3:.1f} µs")
    for name in ("Module, from C", "Module over the floor, from C", "Function, from C", "Module's Python half alone",
                 "Module, peers' from_dlpack"):
        baseline = "torch alone, input only" if name.startswith("Function") else "torch alone"
        timed = (f"; its {'bridge' if name == 'Module, from C' else 'floor'} calls "
                 f"{statistics.median(calls[name]) * 1e6:.1f} µs (timed in C)" if name in calls else "")
        print(f"  {name:<31} {median_ms(times[name]) * 1e3:7.1f} µs: {paired(times[name], times[baseline])} beyond "
              f"{baseline!r}{timed}")


# The step scripts/budgets.py counts under callgrind: small enough to run there in seconds, its
# largest batch crossing 1 MiB each way.
COUNT_FEATURES, COUNT_BATCHES, COUNT_STEPS = 64, (2, 4096), 20


def callgrind_count():
    """For scripts/budgets.py, run under callgrind collecting in the bridge's entry points alone:
    at each of COUNT_BATCHES, a Module step from C on Linear(64 => 16), Tanh, Linear(16 => 64),
    warmed up, then COUNT_STEPS steps counted and dumped as 'autodiff step at batch B xN'. Python's
    cyclic collector is off, so that no collection lands in a count."""
    import gc

    gc.disable()
    steps = build_c_step()
    if steps is None:
        sys.exit("callgrind_count: the step from C needs a C compiler")
    bridge = Bridge(os.environ["RSDLPACK_PYTHON_LIB"], ctypes.PyDLL)
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(COUNT_FEATURES, 16), torch.nn.Tanh(),
                                 torch.nn.Linear(16, COUNT_FEATURES))
    params = [julia_array(p.detach().numpy()) for p in module.parameters()]
    rng = np.random.default_rng(0)
    for batch in COUNT_BATCHES:
        x, cotangent = (julia_array(rng.standard_normal((batch, COUNT_FEATURES))) for _ in range(2))
        stepper = Rsdlpack(bridge, module).from_c(steps, params, x, cotangent)
        for _ in range(3):  # first-call work (the parameters shared, caches filled) not counted
            stepper.step()
        steps.zero_stats()
        for _ in range(COUNT_STEPS):
            stepper.step()
        steps.dump_stats(f"autodiff step at batch {batch} x{COUNT_STEPS}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--callgrind-count"]:
        callgrind_count()
    else:
        main()
