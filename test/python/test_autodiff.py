"""python/rsdlpack_autodiff.py, the Python half of RsDLPack's differentiable calls into PyTorch
and JAX, driven as Julia drives it: every input and cotangent is a "Julia array" (column-major
memory of NumPy's, Julia's dims and strides) shared through the C entry points exactly as
`share` shares it (`rsdlpack_py_share_into` into `torch.Tensor` for torch, an exporter for JAX),
and every output and input cotangent is read back through `rsdlpack_py_import_plan`, as
`from_dlpack` reads it. Values and gradients are compared with torch's and JAX's own, on the
same numbers.
"""

import gc
import itertools
import logging
import pathlib
import re
import resource
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is in scripts/requirements.txt")
jax = pytest.importorskip("jax", reason="jax is in scripts/requirements.txt")
import jax.numpy as jnp  # noqa: E402

from rsdlpack_ctypes import (  # noqa: E402
    ACCESS_READ_ONLY,
    ELEMENT_CODES,
    INDEX_ORDER_PRODUCER,
    INDEX_ORDER_REVERSED,
    PLAN_VIEW,
    PlanOptions,
    forget_earlier_roots,
)

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
import rsdlpack_autodiff as ad  # noqa: E402

ROOT_IDS = itertools.count(70_000)
ORDERS = {"reversed": INDEX_ORDER_REVERSED, "producer": INDEX_ORDER_PRODUCER}


class Julia:
    """The Julia side of one test: arrays it owns (NumPy memory laid out column-major), shared
    and imported through the bridge as RsDLPack's Julia code does, with the roots it would hold."""

    def __init__(self, bridge, order="reversed"):
        self.bridge = bridge
        self.order = order
        self.arrays = {}  # root id -> the memory it keeps alive
        forget_earlier_roots(bridge)

    def array(self, torch_shape, dtype, rng=None, values=None):
        """New Julia memory, as the tensor the consumer will see (`torch_shape`): C order under
        order="reversed" (Julia's array has the reversed dims), Fortran order under
        order="producer" (Julia's array has these dims). Always a copy of `values`."""
        if values is None:
            rng = rng or np.random.default_rng(0)
            values = rng.standard_normal(torch_shape) if np.dtype(dtype).kind == "f" else rng.integers(0, 9, torch_shape)
        return np.array(values, dtype=dtype, order="C" if self.order == "reversed" else "F", copy=True)

    def share(self, memory, into):
        """`share(A, into)`, A being Julia's array over `memory` (see `array`)."""
        if self.order == "reversed":
            assert memory.flags.c_contiguous
            dims = list(reversed(memory.shape))
        else:
            assert memory.flags.f_contiguous
            dims = list(memory.shape)
        strides, step = [], 1
        for d in dims:
            strides.append(step)
            step *= d
        root = next(ROOT_IDS)
        self.arrays[root] = memory
        (obj, _), error = self.bridge.share(memory.ctypes.data, dims, strides, ELEMENT_CODES[str(memory.dtype)],
                                            root_id=root, order=ORDERS[self.order], into=into)
        assert error is None, error
        return obj

    def import_(self, obj):
        """`from_dlpack(Array, obj; order)`: asserts a view in place, returns (address, handle)."""
        result, error = self.bridge.import_plan(obj, PlanOptions.of(order=ORDERS[self.order]))
        assert error is None, error
        assert result.plan.kind == PLAN_VIEW
        return result.plan.parent_address, result.plan.tensor

    def import_all(self, objects):
        """Julia's import of a differentiable call's results (`import_results`, julia/autodiff.jl):
        every tensor of the tuple `objects` in one call (rsdlpack_py_import_plans), each asserted a
        view in place; (address, handle) per item, None where the item is None."""
        results, error = self.bridge.import_plans(objects, PlanOptions.of(order=ORDERS[self.order]))
        assert error is None, error
        imported = []
        for obj, result in zip(objects, results):
            if obj is None:
                imported.append(None)
                continue
            assert result.plan.kind == PLAN_VIEW
            imported.append((result.plan.parent_address, result.plan.tensor))
        return imported

    def released(self):
        gc.collect()
        self.bridge.lib.rsdlpack_py_flush_releases()
        return set(self.bridge.take_released_roots())


def torch_into(function):
    return function.tensor_type  # torch.Tensor for torch, None (an exporter) for JAX


def run(julia, function, memories, cotangent_for=None, prefix=()):
    """One forward (after the arguments in `prefix`: a module call's `training`) and (with `cotangent_for`) one pullback, through the bridge; returns the
    Forward, the outputs as NumPy arrays read in place, and the input cotangents likewise."""
    into = torch_into(function)
    shared = [None if m is None else julia.share(m, into) for m in memories]
    forward = function.forward(*prefix, *shared)
    del shared
    # What Julia's import_results relies on: None exactly where the kinds say so.
    assert all((o is None) == (kind == ad.KIND_NONE) for kind, o in zip(forward.kinds, forward.outputs))
    outputs = read_all_in_place(julia, forward.outputs)
    if cotangent_for is None:
        return forward, outputs, None
    cotangents = cotangent_for(forward)
    shared = [None if c is None else julia.share(c, into) for c in cotangents]
    result = forward.pullback(*shared)
    del shared
    assert result.codes == (*result.kinds, *(1 if t is not None else 0 for t in result.tensors))
    assert all((t is not None) == (kind == ad.KIND_TANGENT) for kind, t in zip(result.kinds, result.tensors))
    read = [value if kind == ad.KIND_TANGENT else kind
            for kind, value in zip(result.kinds, read_all_in_place(julia, result.tensors))]
    return forward, outputs, read


def read_in_place(julia, tensor):
    """The tensor imported as Julia imports it, asserting the view is at the tensor's own address."""
    address, handle = julia.import_(tensor)
    assert address == data_address(tensor), "imported somewhere else than the tensor's memory: a copy"
    julia.bridge.release_handle(handle)
    return values_of(tensor)


def read_all_in_place(julia, objects):
    """The tensors of the tuple `objects` imported as Julia imports a call's results (all in one
    call), each asserted a view at the tensor's own address; None where the item is None."""
    values = []
    for tensor, imported in zip(objects, julia.import_all(objects)):
        if imported is None:
            values.append(None)
            continue
        address, handle = imported
        assert address == data_address(tensor), "imported somewhere else than the tensor's memory: a copy"
        values.append(values_of(tensor))
        julia.bridge.release_handle(handle)
    return values


def values_of(tensor):
    """A copy of a torch or JAX tensor's values, as NumPy."""
    return (tensor.numpy() if isinstance(tensor, torch.Tensor) else np.asarray(tensor)).copy()


def data_address(t):
    if isinstance(t, torch.Tensor):
        return t.data_ptr()  # a view: its first element, where its parent starts
    return t.unsafe_buffer_pointer()


def ones_like_outputs(forward, rng=None, order="C"):
    """A random cotangent for each differentiable output (memory laid out as `Julia.array` lays it)."""
    rng = rng or np.random.default_rng(1)
    return [None if kind != ad.KIND_TANGENT else np.array(rng.standard_normal(tuple(o.shape)),
                                                          dtype=str(o.dtype).removeprefix("torch."), order=order)
            for kind, o in zip(forward.kinds, forward.outputs)]


# ---- torch: values and gradients equal to torch's -------------------------------------------


def several(a, b, idx):
    """Several inputs (one integer) and outputs: differentiable, integer, None, a view of an input."""
    y = torch.tanh(a @ b)
    return y, y.argmax(dim=1), None, a[:, 1:3], (a * a).sum()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_values_and_gradients_equal_torchs(bridge, dtype):
    julia = Julia(bridge)
    a, b = julia.array((5, 4), dtype), julia.array((4, 3), dtype, np.random.default_rng(2))
    idx = julia.array((5,), "int64")
    f = ad.Function(several, "torch")
    forward, outputs, grads = run(julia, f, [a, b, idx], ones_like_outputs)
    assert forward.structure == ad.TUPLE
    assert forward.kinds == (ad.KIND_TANGENT, ad.KIND_NO_TANGENT, ad.KIND_NONE, ad.KIND_TANGENT, ad.KIND_TANGENT)
    # What Julia reads: structure, count, kinds, then DLPack device types (None: 0).
    assert forward.codes == (ad.TUPLE, 5, *forward.kinds, 1, 1, 0, 1, 1)

    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    expected = several(ta, tb, torch.tensor(idx))
    for got, want in zip(outputs, expected):
        if want is None:
            assert got is None
        else:
            np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-6)
    cot = ones_like_outputs(forward)
    diff = [(o, torch.tensor(c)) for o, c in zip(expected, cot) if c is not None]
    want_a, want_b = torch.autograd.grad([o for o, _ in diff], [ta, tb], [c for _, c in diff])
    np.testing.assert_allclose(grads[0], want_a.numpy(), rtol=1e-5)
    np.testing.assert_allclose(grads[1], want_b.numpy(), rtol=1e-5)
    assert grads[2] == ad.KIND_NO_TANGENT  # the integer input


class Subclass(torch.Tensor):
    """A tensor subclass: its outputs are differentiated by torch.autograd.grad itself."""


class Counting:
    """Counts the calls of `name` on `inner`, and passes them on."""

    def __init__(self, inner, name, calls):
        setattr(self, name, lambda *a, **k: calls.append(name) or getattr(inner, name)(*a, **k))


@pytest.mark.parametrize("route", ["engine", "engine, logging", "engine, accelerator", "autograd.grad",
                                   "subclass output"])
def test_the_backward_equals_torchs_by_every_route(bridge, monkeypatch, route):
    """The pullback calls torch's engine as torch.autograd.grad does, without grad's argument
    checks (its own are done first): the engine itself where no accelerator exists, through the
    wrapper that hands device threads their context where one does or where autograd's logger
    logs; torch.autograd.grad where the wrapper is missing or an output is a tensor subclass.
    Each route gives torch's own gradients."""
    be = ad.backend("torch")
    calls = []
    if be._host_engine is not None:
        monkeypatch.setattr(be, "_host_engine", Counting(be._host_engine, "run_backward", calls))
    wrapper = be._run_backward
    monkeypatch.setattr(be, "_run_backward", lambda *a, **k: calls.append("wrapper") or wrapper(*a, **k))
    if route == "autograd.grad":
        monkeypatch.setattr(be, "_run_backward", None)
    if route == "engine, accelerator":
        monkeypatch.setattr(be, "_host_engine", None)
    grad = torch.autograd.grad
    monkeypatch.setattr(torch.autograd, "grad", lambda *a, **k: calls.append("grad") or grad(*a, **k))
    julia = Julia(bridge)
    a, b = julia.array((5, 4), "float64"), julia.array((4, 3), "float64", np.random.default_rng(2))
    wrap = (lambda t: t.as_subclass(Subclass)) if route == "subclass output" else (lambda t: t)
    f = ad.Function(lambda x, y: (wrap(torch.tanh(x @ y)), (x * x).sum()), "torch")
    level = be._engine_log.level
    try:
        if route == "engine, logging":
            be._engine_log.setLevel(logging.DEBUG)
        forward, _, grads = run(julia, f, [a, b], ones_like_outputs)
    finally:
        be._engine_log.setLevel(level)
    on_host = ["wrapper"] if torch.accelerator.is_available() else ["run_backward"]
    expected = {"engine": on_host, "engine, logging": ["wrapper"], "engine, accelerator": ["wrapper"]}.get(route)
    if expected is not None:
        assert calls == expected
    else:
        assert calls and calls[0] == "grad"
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    cot = [torch.tensor(c) for c in ones_like_outputs(forward)]
    want = grad([torch.tanh(ta @ tb), (ta * ta).sum()], [ta, tb], cot)
    np.testing.assert_allclose(grads[0], want[0].numpy(), rtol=1e-12)
    np.testing.assert_allclose(grads[1], want[1].numpy(), rtol=1e-12)


def test_a_module_with_frozen_parameters_is_a_function_of_its_inputs(bridge):
    julia = Julia(bridge)
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    x = julia.array((16, 4), "float32")
    forward, outputs, grads = run(julia, ad.Function(mlp), [x], ones_like_outputs)
    tx = torch.tensor(x, requires_grad=True)
    y = mlp(tx)
    np.testing.assert_allclose(outputs[0], y.detach().numpy(), rtol=1e-6)
    (want,) = torch.autograd.grad(y, tx, torch.tensor(ones_like_outputs(forward)[0]))
    np.testing.assert_allclose(grads[0], want.numpy(), rtol=1e-5)
    assert all(p.grad is None for p in mlp.parameters())  # frozen: nothing accumulated


def test_a_single_output_is_single_and_zero_cotangents_give_zero(bridge):
    julia = Julia(bridge)
    f = ad.Function(lambda a, b: a * b, "torch")
    x, y = julia.array((3,), "float64"), julia.array((3,), "float64")
    forward, _, grads = run(julia, f, [x, y], lambda fw: [None])
    assert forward.structure == ad.SINGLE and forward.kinds == (ad.KIND_TANGENT,)
    assert grads == [ad.KIND_ZERO, ad.KIND_ZERO]
    # A non-tensor input is passed as it is, and has no tangent.
    f = ad.Function(lambda a, k: a * k, "torch")
    forward = f.forward(julia.share(x, torch.Tensor), 3.0)
    result = forward.pullback(julia.share(julia.array((3,), "float64", values=np.ones(3)), torch.Tensor))
    assert result.kinds == (ad.KIND_TANGENT, ad.KIND_NO_TANGENT)
    assert torch.equal(result.tensors[0], torch.full((3,), 3.0, dtype=torch.float64))


def test_an_input_the_function_does_not_use_has_a_zero_cotangent(bridge):
    julia = Julia(bridge)
    f = ad.Function(lambda a, b: a.sin(), "torch")
    _, _, grads = run(julia, f, [julia.array((3,), "float32"), julia.array((2,), "float32")], ones_like_outputs)
    # torch.func answers zeros (a tensor) where JAX and autograd may answer nothing: either is zero.
    assert (isinstance(grads[1], np.ndarray) and not grads[1].any()) or grads[1] == ad.KIND_ZERO


def test_an_output_that_depends_on_no_input_is_differentiable_with_zero_cotangents(bridge):
    """A constant floating output is differentiable (as under torch.func), and a cotangent given
    for it alone reaches no input: every input's cotangent is zero."""
    julia = Julia(bridge)
    f = ad.Function(lambda a: (a * 2, torch.ones(3, dtype=torch.float64)), "torch")
    x = julia.array((3,), "float64")
    forward = f.forward(julia.share(x, torch.Tensor))
    assert forward.kinds == (ad.KIND_TANGENT, ad.KIND_TANGENT)
    ones = julia.array((3,), "float64", values=np.ones(3))
    assert forward.pullback(None, julia.share(ones, torch.Tensor)).kinds == (ad.KIND_ZERO,)
    forward = f.forward(julia.share(x, torch.Tensor))
    result = forward.pullback(julia.share(ones, torch.Tensor), julia.share(ones, torch.Tensor))
    assert result.kinds == (ad.KIND_TANGENT,)
    assert torch.equal(result.tensors[0], torch.full((3,), 2.0, dtype=torch.float64))


def test_producer_order_keeps_julias_dims(bridge):
    julia = Julia(bridge, order="producer")
    memory = julia.array((3, 2), "float64")  # Julia's 3×2 array, column-major
    seen = []
    f = ad.Function(lambda a: (seen.append((tuple(a.shape), a.stride())), a * 2)[1], "torch", order="producer")
    forward, outputs, grads = run(julia, f, [memory], lambda fw: ones_like_outputs(fw, order="F"))
    assert seen == [((3, 2), (1, 3))]  # Julia's dims, column-major strides
    np.testing.assert_allclose(outputs[0], memory * 2)
    np.testing.assert_allclose(grads[0], 2 * ones_like_outputs(forward, order="F")[0])
    forward = f.forward(julia.share(memory, torch.Tensor))
    with pytest.raises(ad.CotangentMismatchError, match=r"output 1 is 2×3, but output 1 is 3×2 .*order=producer"):
        forward.pullback(torch.ones(2, 3, dtype=torch.float64))


# ---- zero-copy -----------------------------------------------------------------------------


def test_inputs_are_julias_memory_and_outputs_and_cotangents_are_read_in_place(bridge):
    julia = Julia(bridge)
    a, b = julia.array((64, 32), "float32"), julia.array((32, 8), "float32")
    f = ad.Function(lambda x, w: torch.relu(x @ w), "torch")
    shared = [julia.share(m, torch.Tensor) for m in (a, b)]
    # What the function is differentiated at: Julia's memory itself (torch.func wraps these).
    inputs = ad._Inputs(f.backend, shared)
    assert [t.data_ptr() for t in inputs.values] == [a.ctypes.data, b.ctypes.data]
    # run() asserts each output and cotangent imports as a view at its own address.
    run(julia, f, [a, b], ones_like_outputs)
    # The cotangent reaches the VJP as the shared memory itself.
    forward = ad.Function(lambda x: x * 3, "torch").forward(julia.share(a, torch.Tensor))
    cot = julia.array((64, 32), "float32", values=np.ones((64, 32)))
    shared = julia.share(cot, torch.Tensor)
    assert shared.data_ptr() == cot.ctypes.data
    assert forward.pullback._cotangent(0, shared, (64, 32), torch.float32) is shared
    result = forward.pullback(shared)
    (g,) = result.tensors
    assert result.kinds == (ad.KIND_TANGENT,) and not g.requires_grad and torch.all(g == 3)


def test_jax_inputs_are_julias_memory_when_aligned(bridge):
    julia = Julia(bridge)
    # 64-byte aligned memory (JAX copies anything less aligned on import).
    raw = np.zeros(64 * 64 + 16, dtype=np.float32)
    start = (-raw.ctypes.data % 64) // 4
    memory = raw[start:start + 64 * 64].reshape(64, 64)
    memory[:] = 1.5
    assert memory.ctypes.data % 64 == 0
    f = ad.Function(lambda x: x * 2, "jax")
    inputs = ad._Inputs(f.backend, [julia.share(memory, None)])
    assert inputs.values[0].unsafe_buffer_pointer() == memory.ctypes.data
    _, outputs, grads = run(julia, f, [memory], ones_like_outputs)
    np.testing.assert_array_equal(outputs[0], 3.0)


# ---- JAX: values and gradients equal to JAX's ----------------------------------------------


def jax_several(a, b, idx):
    y = jnp.tanh(a @ b)
    return y, jnp.argmax(y, axis=1), a[:, 1:3] * 1.0, jnp.sum(a * a) + jnp.sum(idx)


@pytest.mark.parametrize("jitted", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_jax_values_and_gradients_equal_jaxs(bridge, jitted, dtype):
    with jax.enable_x64(dtype == "float64"):
        julia = Julia(bridge)
        a, b = julia.array((5, 4), dtype), julia.array((4, 3), dtype, np.random.default_rng(2))
        idx = julia.array((5,), "int32")
        fn = jax.jit(jax_several) if jitted else jax_several
        forward, outputs, grads = run(julia, ad.Function(fn, "jax"), [a, b, idx], ones_like_outputs)
        assert forward.kinds == (ad.KIND_TANGENT, ad.KIND_NO_TANGENT, ad.KIND_TANGENT, ad.KIND_TANGENT)
        assert str(forward.outputs[0].dtype) == dtype
        expected = jax_several(jnp.asarray(a), jnp.asarray(b), jnp.asarray(idx))
        tol = 1e-5 if dtype == "float32" else 1e-12
        for got, want in zip(outputs, expected):
            np.testing.assert_allclose(got, np.asarray(want), rtol=tol)
        cot = ones_like_outputs(forward)

        def loss(x, w):
            outs = jax_several(x, w, jnp.asarray(idx))
            return sum(jnp.sum(o * c) for o, c in zip(outs, cot) if c is not None)

        want_a, want_b = jax.grad(loss, argnums=(0, 1))(jnp.asarray(a), jnp.asarray(b))
        np.testing.assert_allclose(grads[0], np.asarray(want_a), rtol=tol * 10)
        np.testing.assert_allclose(grads[1], np.asarray(want_b), rtol=tol * 10)
        assert grads[2] == ad.KIND_NO_TANGENT


def test_the_backend_is_inferred_or_asked_for():
    assert ad.Function(torch.nn.Linear(2, 2)).backend.name == "torch"
    assert ad.Function(jax.jit(jnp.sin)).backend.name == "jax"
    assert ad.Function(torch.sin).backend.name == "torch"
    with pytest.raises(ValueError, match='pass backend="torch" or backend="jax"'):
        ad.Function(lambda x: x)
    with pytest.raises(ValueError, match="order must be one of"):
        ad.Function(torch.sin, order="rowmajor")


# ---- finite differences (float64) ----------------------------------------------------------


FINITE_DIFFERENCE_CASES = {
    "torch: matmul, tanh, softmax": ("torch", lambda a, b: torch.softmax(torch.tanh(a @ b), dim=1)),
    "torch: two outputs": ("torch", lambda a, b: (a.exp() * b[0, 0], (a @ b).pow(3).sum())),
    "torch: a view and a reduction": ("torch", lambda a, b: (a[:, ::2], torch.logsumexp(a @ b, 0))),
    "jax: jitted sin and log": ("jax", jax.jit(lambda a, b: jnp.log1p(jnp.sin(a @ b) ** 2))),
}


@pytest.mark.parametrize("case", sorted(FINITE_DIFFERENCE_CASES))
def test_gradients_match_central_finite_differences(bridge, case):
    """gradcheck's test, through the bridge: for a random cotangent v, <v, f(x + h e) - f(x - h e)>/2h
    equals the pullback's cotangent at e, for every element e of every input."""
    name, fn = FINITE_DIFFERENCE_CASES[case]
    with jax.enable_x64(True):
        julia = Julia(bridge)
        rng = np.random.default_rng(3)
        a, b = julia.array((3, 4), "float64", rng), julia.array((4, 2), "float64", rng)
        f = ad.Function(fn, name)
        forward, _, grads = run(julia, f, [a, b], lambda fw: ones_like_outputs(fw, np.random.default_rng(4)))
        cot = ones_like_outputs(forward, np.random.default_rng(4))

        def projected(x, w):
            _, outs, _ = run(julia, f, [x, w])
            return sum(float(np.sum(o * c)) for o, c in zip(outs, cot) if c is not None)

        h = 1e-6
        for k, base in enumerate((a, b)):
            numeric = np.zeros_like(base)
            for index in np.ndindex(base.shape):
                plus, minus = base.copy(), base.copy()
                plus[index] += h
                minus[index] -= h
                args_plus = [plus if j == k else m for j, m in enumerate((a, b))]
                args_minus = [minus if j == k else m for j, m in enumerate((a, b))]
                numeric[index] = (projected(*args_plus) - projected(*args_minus)) / (2 * h)
            np.testing.assert_allclose(grads[k], numeric, rtol=1e-6, atol=1e-7)


# ---- errors decided in Python --------------------------------------------------------------


def test_a_cotangent_of_the_wrong_shape_names_the_output_and_both(bridge):
    julia = Julia(bridge)
    f = ad.Function(lambda a: (a.sum(0), a * 2), "torch")
    forward = f.forward(julia.share(julia.array((4, 3), "float32"), torch.Tensor))
    good = julia.share(julia.array((3,), "float32"), torch.Tensor)
    wrong = julia.share(julia.array((3, 4), "float32"), torch.Tensor)
    with pytest.raises(ad.CotangentMismatchError,
                       match=r"the cotangent of output 2 is 4×3, but output 2 is 3×4 \(dims as Julia sees them"):
        forward.pullback(good, wrong)
    with pytest.raises(ValueError, match="takes 2 cotangents"):
        forward.pullback(good)


@pytest.mark.filterwarnings("error")  # torch and JAX only warn where a complex one's real part is not taken
@pytest.mark.parametrize("backend", ["torch", "jax"])
@pytest.mark.parametrize("given", ["float64", "float16", "complex64", "int32"])
def test_a_cotangent_of_another_element_type_is_projected_to_its_outputs(bridge, backend, given):
    """As ChainRules' ProjectTo does it (a Float64 loss's cotangent of a Float32 output): converted,
    a complex one's real part taken; the input cotangent has the input's element type."""
    julia = Julia(bridge)
    f = ad.Function(lambda a: a * 3, backend)
    x = julia.array((2, 3), "float32")
    forward = f.forward(julia.share(x, torch_into(f)))
    values = np.arange(6).reshape(2, 3) + (0.5j if given.startswith("complex") else 0)
    cotangent = julia.array((2, 3), given, values=values)
    result = forward.pullback(julia.share(cotangent, torch_into(f)))
    assert result.kinds == (ad.KIND_TANGENT,)
    got = read_in_place(julia, result.tensors[0])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, 3 * np.arange(6, dtype=np.float32).reshape(2, 3))


def test_a_cotangent_that_cannot_be_converted_names_its_output(bridge, monkeypatch):
    julia = Julia(bridge)
    f = ad.Function(lambda a: a * 3, "torch")
    forward = f.forward(julia.share(julia.array((2, 3), "float32"), torch.Tensor))

    def refuse(t, dtype, device):
        raise RuntimeError("no such conversion")

    monkeypatch.setattr(f.backend, "conform", refuse)
    cotangent = julia.share(julia.array((2, 3), "float64"), torch.Tensor)
    with pytest.raises(ad.CotangentMismatchError, match=r"the cotangent of output 1 has element type float64 on cpu, "
                       r"and output 1 has float32 on cpu: it could not be converted \(no such conversion\)"):
        forward.pullback(cotangent)


@pytest.mark.filterwarnings("error")
def test_a_complex_output_takes_a_real_cotangent_as_complex(bridge):
    julia = Julia(bridge)
    f = ad.Function(lambda a: a * (1 + 2j), "torch")
    forward = f.forward(julia.share(julia.array((3,), "complex64", values=[1, 2, 3]), torch.Tensor))
    result = forward.pullback(julia.share(julia.array((3,), "float32", values=[1, 1, 1]), torch.Tensor))
    got = read_in_place(julia, result.tensors[0])
    assert got.dtype == np.complex64
    leaf = torch.tensor([1, 2, 3], dtype=torch.complex64, requires_grad=True)
    (want,) = torch.autograd.grad(leaf * (1 + 2j), [leaf], torch.ones(3, dtype=torch.complex64))
    np.testing.assert_allclose(got, want.numpy())


def test_a_pullback_runs_once_unless_retained(bridge):
    julia = Julia(bridge)
    x = julia.array((3,), "float64")
    forward = ad.Function(torch.sin, "torch").forward(julia.share(x, torch.Tensor))
    cot = julia.share(julia.array((3,), "float64", values=np.ones(3)), torch.Tensor)
    forward.pullback(cot)
    with pytest.raises(ad.PullbackUsedError, match="retain_pullback=true"):
        forward.pullback(cot)
    forward = ad.Function(torch.sin, "torch", retain=True).forward(julia.share(x, torch.Tensor))
    first, second = forward.pullback(cot).tensors[0], forward.pullback(cot).tensors[0]
    assert torch.equal(first, second) and torch.allclose(first, torch.cos(torch.tensor(x)))


def writes_through_no_grad(a, i):
    with torch.no_grad():
        a.mul_(2)
    return a * 1.0


class WritesItsIndex(torch.nn.Module):
    def forward(self, a, i):
        i.add_(1)
        return a * 1.0


def test_an_input_written_in_place_is_reported(bridge):
    julia = Julia(bridge)
    a, i = julia.array((3,), "float32"), julia.array((3,), "int64")
    with pytest.raises(ad.InPlaceMutationError, match="wrote into input 1 in place"):
        ad.Function(writes_through_no_grad, "torch").forward(julia.share(a, torch.Tensor), julia.share(i, torch.Tensor))
    # A module call: its integer argument (input 2: the module has no parameters or buffers).
    with pytest.raises(ad.InPlaceMutationError, match="wrote into input 2 in place"):
        ad.Module(WritesItsIndex()).forward(True, julia.share(a, torch.Tensor), julia.share(i, torch.Tensor))


def test_an_in_place_write_of_a_captured_input_is_refused_by_torch_func(bridge):
    """torch.func refuses before writing: an integer input (captured, not differentiated)."""
    julia = Julia(bridge)
    a, i = julia.array((3,), "float32"), julia.array((3,), "int64")
    before = i.copy()
    with pytest.raises(RuntimeError, match="in-place operation"):
        ad.Function(lambda x, k: (k.add_(1), x * 1.0)[1], "torch").forward(
            julia.share(a, torch.Tensor), julia.share(i, torch.Tensor))
    np.testing.assert_array_equal(i, before)


def test_an_in_place_write_torch_func_sees_is_refused_by_torch(bridge):
    """Written in place with autograd watching, torch refuses before anything is written."""
    julia = Julia(bridge)
    a = julia.array((3,), "float32")
    before = a.copy()
    with pytest.raises(RuntimeError, match="in-place operation"):
        ad.Function(lambda x: x.mul_(2), "torch").forward(julia.share(a, torch.Tensor))
    np.testing.assert_array_equal(a, before)


# ---- lifetimes -----------------------------------------------------------------------------


def test_saved_inputs_stay_rooted_until_the_pullback_runs(bridge):
    julia = Julia(bridge)
    a, b = julia.array((8, 4), "float32"), julia.array((4, 2), "float32")
    forward = ad.Function(lambda x, w: torch.tanh(x @ w), "torch").forward(
        julia.share(a, torch.Tensor), julia.share(b, torch.Tensor))
    input_roots = set(julia.arrays)
    outputs = forward.outputs
    assert julia.released() == set(), "an input was let go while the pullback may still need it"
    assert forward.pullback.holds_inputs
    cot = julia.share(julia.array((8, 2), "float32"), torch.Tensor)
    forward.pullback(cot)
    del cot
    assert not forward.pullback.holds_inputs
    assert julia.released() == set(julia.arrays), "the inputs and the cotangent come back once the pullback ran"
    assert input_roots <= set(julia.arrays)
    del outputs


def test_saved_inputs_come_back_when_the_pullback_is_dropped_uncalled(bridge):
    julia = Julia(bridge)
    forward = ad.Function(lambda x: x.exp(), "torch").forward(julia.share(julia.array((16,), "float64"), torch.Tensor))
    assert julia.released() == set()
    pullback = forward.pullback
    del forward
    assert julia.released() == set()
    del pullback
    assert julia.released() == set(julia.arrays)


def test_an_output_that_is_a_view_keeps_its_input_rooted_while_julia_holds_it(bridge):
    julia = Julia(bridge)
    forward = ad.Function(lambda x: x[1:], "torch").forward(julia.share(julia.array((4,), "float64"), torch.Tensor))
    view = forward.outputs[0]
    address, handle = julia.import_(view)  # Julia's array over the output
    forward.pullback.release()
    del forward, view
    assert julia.released() == set(), "Julia's output array still reads that memory"
    bridge.release_handle(handle)
    assert julia.released() == set(julia.arrays)


def rss_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def test_forwards_whose_pullback_is_never_called_leave_nothing_behind(bridge):
    """10^5 tiny forwards through the same C calls Julia makes (share, forward, import, release),
    each pullback dropped uncalled: every root comes back, nothing stays pending, the peak
    resident memory does not grow after the warm-up."""
    julia = Julia(bridge)
    f = ad.Function(lambda x: x * 2.0, "torch")
    memory = julia.array((4,), "float32")
    address = memory.ctypes.data
    dims, strides = [4], [1]
    code = ELEMENT_CODES["float32"]

    def one(root):
        (x, _), error = bridge.share(address, dims, strides, code, root_id=root, into=torch.Tensor)
        assert error is None
        forward = f.forward(x)
        del x
        _, handle = julia.import_(forward.outputs[0])
        bridge.release_handle(handle)

    roots = itertools.count(1_000_000)
    for _ in range(2_000):
        one(next(roots))
    gc.collect()
    bridge.lib.rsdlpack_py_flush_releases()
    bridge.take_released_roots()
    peak_after_warmup = rss_kib()
    n = 100_000
    first = next(roots)
    one(first)
    for _ in range(n - 1):
        one(next(roots))
    gc.collect()
    bridge.lib.rsdlpack_py_flush_releases()
    returned = bridge.take_released_roots()
    assert len(returned) == n and min(returned) == first
    assert bridge.lib.rsdlpack_py_pending_releases() == 0
    assert rss_kib() - peak_after_warmup < 8 * 1024, "resident memory grew by more than 8 MiB"


# ---- the Lux layer's half: torch.func.functional_call on Julia's parameters -----------------


def test_a_module_called_on_julias_parameters_matches_the_module(bridge):
    julia = Julia(bridge)
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.BatchNorm1d(5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    m = ad.Module(net)
    assert m.parameter_names == ("0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias")
    assert m.buffer_names == ("1.running_mean", "1.running_var", "1.num_batches_tracked")
    # Copies, on the module's device (Julia copies host ones into its own memory, holds device ones).
    assert m.parameter_devices == (1,) * 6 and m.buffer_devices == (1,) * 3
    assert all(c.data_ptr() != p.data_ptr() and torch.equal(c, p.detach())
               for c, p in zip(m.initial_parameters(), net.parameters()))
    # Julia's copies of the initial parameters and buffers, which it owns from now on.
    params = [julia.array(tuple(p.shape), "float32", values=p.numpy()) for p in m.initial_parameters()]
    buffers = [julia.array(tuple(b.shape), str(b.dtype).removeprefix("torch."), values=b.numpy())
               for b in m.initial_buffers()]
    x = julia.array((8, 3), "float32")
    reference = [b.copy() for b in buffers]
    forward, outputs, grads = run(julia, m, [*params, *buffers, x], ones_like_outputs, prefix=(True,))
    y, new_mean, new_var, batches = outputs
    net.train()
    tx = torch.tensor(x, requires_grad=True)
    want = net(tx)
    np.testing.assert_allclose(y, want.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(new_mean, net[1].running_mean.numpy(), rtol=1e-5)
    np.testing.assert_allclose(new_var, net[1].running_var.numpy(), rtol=1e-5)
    assert batches == 1
    for got, before in zip(buffers, reference):
        np.testing.assert_array_equal(got, before)  # Julia's state arrays untouched
    cot = ones_like_outputs(forward)[0]
    want_grads = torch.autograd.grad(want, [*net.parameters(), tx], torch.tensor(cot))
    for got, expected in zip([*grads[:6], grads[-1]], want_grads):
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-6)
    assert grads[6:9] == [ad.KIND_NO_TANGENT] * 3  # buffers


def test_eval_mode_uses_the_running_statistics_and_keeps_them(bridge):
    julia = Julia(bridge)
    net = torch.nn.BatchNorm1d(3)
    with torch.no_grad():
        net.running_mean.fill_(1.0)
    m = ad.Module(net)
    params = [julia.array(tuple(p.shape), "float32", values=p.numpy()) for p in m.initial_parameters()]
    buffers = [julia.array(tuple(b.shape), str(b.dtype).removeprefix("torch."), values=b.numpy())
               for b in m.initial_buffers()]
    x = julia.array((4, 3), "float32")
    shared = [julia.share(a, torch.Tensor) for a in (*params, *buffers, x)]
    forward = m.forward(False, *shared)
    net.eval()
    np.testing.assert_allclose(forward.outputs[0].numpy(), net(torch.tensor(x)).detach().numpy(), rtol=1e-6)
    assert torch.equal(forward.outputs[1], torch.ones(3)) and int(forward.outputs[3]) == 0


def test_a_linear_layer_whose_weights_julia_set_computes_w_x_plus_b_in_julias_dims(bridge):
    """order="reversed": Julia's W is in×out and x features×batch; y comes back out×batch."""
    julia = Julia(bridge)
    m = ad.Module(torch.nn.Linear(3, 2))
    w_julia = np.arange(6.0, dtype=np.float32).reshape(3, 2, order="F")  # Julia's 3×2 W
    b_julia = np.array([10.0, 20.0], dtype=np.float32)
    x_julia = np.arange(12.0, dtype=np.float32).reshape(3, 4, order="F")  # 3 features × 4 samples
    # The memory of each Julia array, seen C-ordered with reversed dims.
    w_mem, x_mem = np.ascontiguousarray(w_julia.T), np.ascontiguousarray(x_julia.T)
    forward = m.forward(True, *(julia.share(a, torch.Tensor) for a in (w_mem, b_julia, x_mem)))
    y_julia = forward.outputs[0].numpy().T  # Julia's out×batch array over the output's memory
    np.testing.assert_allclose(y_julia, w_julia.T @ x_julia + b_julia[:, None])


class Tied(torch.nn.Module):
    """An encoder and decoder sharing one weight (the decoder's is the encoder's)."""

    def __init__(self):
        super().__init__()
        self.encode = torch.nn.Linear(3, 3, bias=False)
        self.decode = torch.nn.Linear(3, 3)
        self.decode.weight = self.encode.weight

    def forward(self, x):
        if x.shape[0] == 0:
            raise ValueError("empty batch")
        return self.decode(torch.tanh(self.encode(x)))


def test_a_module_call_matches_functional_call_with_tied_weights_and_puts_the_modules_own_back(bridge):
    """The module is called as torch.func.functional_call calls it: a tied weight takes the one
    tensor Julia passed under every name it has, and the module's own parameters are back after
    the call, also after one that raised."""
    julia = Julia(bridge)
    torch.manual_seed(3)
    net = Tied()
    m = ad.Module(net)
    assert m.parameter_names == ("encode.weight", "decode.bias")
    own = [p for p in net.parameters()]
    params = [julia.array(tuple(p.shape), "float32", values=p.numpy() + 0.5) for p in m.initial_parameters()]
    x = julia.array((4, 3), "float32")
    forward, outputs, grads = run(julia, m, [*params, x], ones_like_outputs, prefix=(True,))
    leaves = [torch.tensor(p, requires_grad=True) for p in params]
    tx = torch.tensor(x, requires_grad=True)
    want = torch.func.functional_call(net, dict(zip(m.parameter_names, leaves)), (tx,))
    np.testing.assert_allclose(outputs[0], want.detach().numpy(), rtol=1e-6)
    want_grads = torch.autograd.grad(want, [*leaves, tx], torch.tensor(ones_like_outputs(forward)[0]))
    for got, expected in zip(grads, want_grads):
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-6)
    assert [p for p in net.parameters()] == own and net.decode.weight is net.encode.weight
    with pytest.raises(ValueError, match="empty batch"):
        m.forward(True, *(julia.share(a, torch.Tensor) for a in (*params, julia.array((0, 3), "float32"))))
    assert net.encode.weight is own[0] and net.decode.weight is own[0] and net.decode.bias is own[1]


def test_a_training_loop_through_the_bridge_lowers_the_loss(bridge):
    """test/lux.jl's loop, as Julia runs it: the parameters are Julia's arrays, shared into torch
    at every step; the gradients come back through the pullback and are read in place; the update
    (plain gradient descent here) happens on Julia's side."""
    julia = Julia(bridge)
    sys.path.insert(0, str(REPO / "test"))
    import autodiff_helpers

    m = ad.Module(autodiff_helpers.mlp(0))
    params = [julia.array(tuple(p.shape), "float32", values=p.numpy()) for p in m.initial_parameters()]
    rng = np.random.default_rng(5)
    x = julia.array((64, 4), "float32", rng)
    target = np.array(x @ (np.array([[1, -1, 0, 2], [0, 1, -1, 0], [1, 1, 1, 1]], dtype=np.float32).T / 2), order="C")
    losses = []
    for _ in range(100):
        forward, outputs, grads = run(julia, m, [*params, x],
                                      lambda fw: [np.array(fw.outputs[0].numpy() - target, order="C")], prefix=(True,))
        losses.append(float(np.sum((outputs[0] - target) ** 2) / 2))
        params = [julia.array(p.shape, "float32", values=p - 0.01 * g) for p, g in zip(params, grads[:4])]
    assert losses[-1] < 0.2 * losses[0], losses[::10]


def test_parameters_shared_once_are_read_at_every_step_as_julia_updates_them_in_place(bridge):
    """The Lux layer's kept parameters (KeptParameters, julia/autodiff.jl): each parameter is
    shared once, and its tensor is passed to every later call while Julia's optimiser updates
    the same array in place (Optimisers.update!). Every step reads the values Julia wrote since
    the last: its gradients equal torch's own on the current weights, and the loss falls. The
    kept tensors hold their arrays' roots until Julia lets them go, and nothing else stays
    rooted between steps."""
    julia = Julia(bridge)
    sys.path.insert(0, str(REPO / "test"))
    import autodiff_helpers

    net = autodiff_helpers.mlp(0)
    m = ad.Module(net)
    params = [julia.array(tuple(p.shape), "float32", values=p.numpy()) for p in m.initial_parameters()]
    kept = [julia.share(p, torch.Tensor) for p in params]
    parameter_roots = set(julia.arrays)
    x = julia.array((64, 4), "float32", np.random.default_rng(5))
    target = np.array(x @ (np.array([[1, -1, 0, 2], [0, 1, -1, 0], [1, 1, 1, 1]], dtype=np.float32).T / 2), order="C")
    losses = []
    for step in range(100):
        before = set(julia.arrays)
        forward = m.forward(True, *kept, julia.share(x, torch.Tensor))
        y = read_in_place(julia, forward.outputs[0])
        cotangent = np.array(y - target, order="C")
        result = forward.pullback(julia.share(cotangent, torch.Tensor))
        grads = [read_in_place(julia, t) for t in result.tensors[:4]]
        del forward, result
        losses.append(float(np.sum((y - target) ** 2) / 2))
        if step % 25 == 0:
            with torch.no_grad():
                for mine, p in zip(net.parameters(), params):
                    mine.copy_(torch.from_numpy(p))
            want = torch.autograd.grad(net(torch.from_numpy(x)), list(net.parameters()), torch.from_numpy(cotangent))
            for got, expected in zip(grads, want):
                np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-6)
        for p, g in zip(params, grads):
            p -= 0.01 * g  # in place: the kept tensors read it at the next step
        assert julia.released() == set(julia.arrays) - before, \
            "the step's input and cotangent come back after it, and nothing else: the parameters stay kept"
    assert losses[-1] < 0.2 * losses[0], losses[::10]
    assert all(k.data_ptr() == p.ctypes.data for k, p in zip(kept, params)), "a kept tensor is not Julia's memory"
    del kept
    assert julia.released() == parameter_roots, "the kept tensors let their arrays go once Julia drops them"


def test_the_same_tensor_as_two_parameters_gets_each_place_its_own_gradient(bridge):
    """A tensor passed as two parameters (Julia's one array for both weights of a two-layer
    chain) gets a leaf per place: each place's gradient is the one torch gives two separate
    weights of the same values, not their sum, at every call (Julia's layer passes the same
    kept tensor again)."""
    julia = Julia(bridge)
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(3, 3, bias=False), torch.nn.Tanh(), torch.nn.Linear(3, 3, bias=False))
    m = ad.Module(net)
    w = julia.array((3, 3), "float32")
    shared = julia.share(w, torch.Tensor)
    x = julia.array((5, 3), "float32")
    with torch.no_grad():
        net[0].weight.copy_(torch.from_numpy(w))
        net[2].weight.copy_(torch.from_numpy(w))
    cotangent = julia.array((5, 3), "float32", np.random.default_rng(4))
    want = torch.autograd.grad(net(torch.from_numpy(x)), [net[0].weight, net[2].weight], torch.from_numpy(cotangent))
    assert not torch.allclose(want[0], want[1])
    for _ in range(2):
        forward = m.forward(True, shared, shared, julia.share(x, torch.Tensor))
        grads = forward.pullback(julia.share(cotangent, torch.Tensor)).tensors
        for got, expected in zip(grads[:2], want):
            np.testing.assert_allclose(read_in_place(julia, got), expected.numpy(), rtol=1e-5, atol=1e-6)


class _RebindsItsWeight(torch.nn.Module):
    """A linear map whose forward, when told to, points its weight at new memory (`.data =`) and
    then computes with it, as a module that re-initialises a parameter would."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(2, 2))
        self.rebind = False

    def forward(self, x):
        if self.rebind:
            self.weight.data = self.weight.data.clone()
        return x @ self.weight


def test_a_parameters_leaf_is_kept_while_its_tensor_comes_and_made_anew_when_it_cannot_stand_for_it(bridge):
    """The Python half keeps each parameter's leaf while the same tensor comes (as Julia's layer
    keeps the tensor): the same leaf at the next call. A leaf is made anew where the tensor is
    another, where the module pointed the leaf at other memory (every later call then reads
    Julia's array again, not that memory) or turned its grad off; and a replaced tensor's leaf
    lets go of its array once Julia drops the tensor."""
    julia = Julia(bridge)
    net = _RebindsItsWeight()
    m = ad.Module(net)
    w = julia.array((2, 2), "float32", values=np.eye(2))
    x = julia.array((3, 2), "float32", np.random.default_rng(6))

    def share(memory):
        before = set(julia.arrays)
        tensor = julia.share(memory, torch.Tensor)
        (root,) = set(julia.arrays) - before
        return tensor, root

    kept, kept_root = share(w)
    shared_x, x_root = share(x)

    def call(weight):
        forward = m.forward(True, weight, shared_x)
        y = forward.outputs[0].numpy().copy()
        (g, _) = forward.pullback(torch.ones(3, 2)).tensors
        return y, m._kept_leaves.entries[0][1], g

    _, first, _ = call(kept)
    _, again, _ = call(kept)
    assert again is first, "the same tensor, the same leaf"
    net.rebind = True
    y, rebound, _ = call(kept)
    net.rebind = False
    np.testing.assert_allclose(y, x)  # computed with the module's new memory, which held the same values
    assert rebound is first and rebound.data_ptr() != w.ctypes.data
    w[:] = 2 * np.eye(2)  # Julia's optimiser writes in place
    y, after, _ = call(kept)
    assert after is not rebound and after.data_ptr() == w.ctypes.data
    np.testing.assert_allclose(y, 2 * x)
    after.requires_grad_(False)  # as a module that froze its parameter in a call would leave it
    _, unfrozen, g = call(kept)
    assert unfrozen is not after and unfrozen.requires_grad
    np.testing.assert_allclose(g.numpy(), x.sum(axis=0)[:, None] * np.ones((1, 2)), rtol=1e-6)
    # Julia shares the array anew (another array came, or its memory moved): a new leaf, and the
    # old tensor's root comes back once Julia drops that tensor.
    replacement, replacement_root = share(w)
    _, replaced, _ = call(replacement)
    assert replaced is not unfrozen and replaced.data_ptr() == w.ctypes.data
    assert julia.released() == set()
    del kept, first, again, rebound, after, unfrozen
    assert julia.released() == {kept_root}
    del replacement, replaced, shared_x
    assert julia.released() == {replacement_root, x_root}, "a kept leaf goes with its tensor"


def test_the_julia_half_reads_the_same_codes():
    """julia/autodiff.jl's constants are this module's (Julia maps them, Python decides them)."""
    text = (REPO / "julia" / "autodiff.jl").read_text()
    constants = dict(re.findall(r"^const (\w+) = (\d+)", text, re.M))
    assert {name: int(v) for name, v in constants.items()} == {
        "KIND_NO_TANGENT": ad.KIND_NO_TANGENT, "KIND_TANGENT": ad.KIND_TANGENT, "KIND_ZERO": ad.KIND_ZERO,
        "KIND_NONE": ad.KIND_NONE, "STRUCTURE_SINGLE": ad.SINGLE, "SHARE_INTO_TYPE": ad.SHARE_INTO_TYPE}
    # Julia finds the module in the package's python/ directory, by this name.
    assert 'autodiff_python_dir() = something(pkgdir(@__MODULE__, "python"), joinpath(PACKAGE_DIR, "python"))' in text
    assert f'const AUTODIFF_MODULE = "{ad.__name__}"' in text
    assert pathlib.Path(ad.__file__).resolve() == REPO / "python" / "rsdlpack_autodiff.py"


def test_the_python_half_ships_with_the_package():
    """Pkg installs the tracked files (test_install.py copies exactly those): the module must be one."""
    listing = subprocess.run(["git", "ls-files", "python/rsdlpack_autodiff.py"], cwd=REPO, capture_output=True,
                             text=True)
    if listing.returncode != 0:
        pytest.skip("not a git checkout: the tracked files are unknown")
    assert listing.stdout.strip() == "python/rsdlpack_autodiff.py"


def test_a_read_only_array_goes_as_an_exporter_and_torch_reads_it_in_place(bridge):
    """What Julia does with a ReadOnlyArray: an exporter (READ_ONLY set), which torch.from_dlpack
    takes zero-copy; the gradient is as for any input."""
    julia = Julia(bridge)
    memory = julia.array((3,), "float64")
    root = next(ROOT_IDS)
    julia.arrays[root] = memory
    (exporter, _), error = bridge.share(memory.ctypes.data, [3], [1], ELEMENT_CODES["float64"], root_id=root,
                                        order=INDEX_ORDER_REVERSED, read_only=ACCESS_READ_ONLY)
    assert error is None, error
    f = ad.Function(torch.sin, "torch")
    inputs = ad._Inputs(f.backend, [exporter])
    assert inputs.values[0].data_ptr() == memory.ctypes.data
    forward = f.forward(exporter)
    result = forward.pullback(julia.share(julia.array((3,), "float64", values=np.ones(3)), torch.Tensor))
    assert torch.allclose(result.tensors[0], torch.cos(torch.tensor(memory)))
