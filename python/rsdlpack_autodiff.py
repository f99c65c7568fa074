"""Differentiable calls into PyTorch and JAX for RsDLPack's Julia API (the ChainRulesCore rule
and the Lux layer): the Python half, which decides everything the Julia half only maps.

Julia shares each input array zero-copy (`share`: into `torch.Tensor` through torch's DLPack C
exchange API, or as an exporter that `jax.dlpack.from_dlpack` takes), calls `forward`, and
imports each output zero-copy (`from_dlpack`). The forward records the vector-Jacobian product
(torch's autograd on detached leaves of the inputs, or `torch.func.vjp` where an input is an
integer tensor, see `Function`; `jax.vjp`; for a module's functional call, torch's autograd)
in a `Pullback`; Julia shares the cotangents the same way, calls it, and imports the input
cotangents. Nothing here copies a tensor that crosses (but a cotangent that must be moved to
its output's device, or projected onto its output's element type as ChainRules' `ProjectTo`
does), and no tensor that requires grad ever crosses: inputs are detached leaves of their
own, outputs and cotangents are detached before they are returned.

What Julia reads back, as plain ints (`KIND_*`): for each output whether it is differentiable,
and for each input whether its cotangent is a tensor, zero (`ZeroTangent`) or absent
(`NoTangent`: integer and boolean tensors, `None`, non-tensor values). Integer outputs are
computed alongside, never differentiated (`has_aux`).

Index order, stated once: with `order="reversed"` (the default on the Julia side) Julia's
(features, batch) array is torch's and JAX's (batch, features) contiguous tensor, and outputs
come back reversed the same way; `order="producer"` keeps Julia's indices (the tensor then has
column-major strides). The order is applied by `share` and `from_dlpack`; here it only decides
how shapes are written in error messages (in Julia's dims, so a user reads the shapes they
passed).

Lifetimes: a `Pullback` holds the inputs the forward saved (and so, through their DLPack
capsules, Julia's roots of the shared arrays) until it has run or is dropped, whichever comes
first; with `retain=True` until it is dropped (calling it again is then allowed, as
`Zygote.jacobian` does). Julia drops it by releasing its reference; no Python runs in a Julia
finalizer beyond that release, which the front-end already defers to the GIL's thread.
"""

import logging
import weakref

KIND_NO_TANGENT = 0  # input: no cotangent (NoTangent); output: not differentiable
KIND_TANGENT = 1  # input: a cotangent tensor follows; output: differentiable
KIND_ZERO = 2  # input: the cotangent is zero (ZeroTangent)
KIND_NONE = 3  # output: Python returned None (Julia's `nothing`)

SINGLE, TUPLE = 0, 1  # what the function returned: one value, or a tuple of them

# How Julia shares arrays with a callable (its `share_codes`): into its `tensor_type`, or as
# exporters (DLPack objects the backend imports itself).
SHARE_EXPORTER, SHARE_INTO_TYPE = 0, 1

ORDERS = ("reversed", "producer")


class InPlaceMutationError(RuntimeError):
    """The function wrote into an input that Julia shared (that write reached Julia's array)."""


class CotangentMismatchError(ValueError):
    """A cotangent whose shape or element type differs from its output's."""


class PullbackUsedError(RuntimeError):
    """A pullback called again after it released what the forward saved."""


def _check_order(order):
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    return order


def _dims(shape, order):
    """A shape as Julia sees it: reversed under order="reversed", written as Julia writes dims."""
    dims = tuple(reversed(tuple(shape))) if order == "reversed" else tuple(shape)
    if not dims:
        return "0-dimensional"
    return "×".join(str(d) for d in dims)


# ---- backends ------------------------------------------------------------------------------


class _Torch:
    name = "torch"

    def __init__(self):
        import torch

        self.torch = torch
        self.tensor_type = torch.Tensor
        # What torch.autograd.grad ends in: the wrapper `_engine_run_backward` (torch.autograd.graph),
        # and the engine it wraps. The wrapper hands the caller's context to the engine's device
        # threads (torch.compile's backward reads its configuration there), which makes every node
        # of the backward copy it; without an accelerator every node runs on this thread, and the
        # engine is called directly.
        graph = getattr(torch.autograd, "graph", None)
        self._run_backward = getattr(graph, "_engine_run_backward", None)
        self._engine_log = getattr(graph, "log", None)
        engine = getattr(getattr(torch.autograd, "Variable", None), "_execution_engine", None)
        accelerator = getattr(torch, "accelerator", None)
        self._host_engine = engine if accelerator is not None and not accelerator.is_available() else None
        self._has_torch_function = torch._C._has_torch_function

    def grad(self, outputs, leaves, cotangents, retain):
        """`torch.autograd.grad(outputs, leaves, cotangents, retain_graph=retain, allow_unused=True)`
        for cotangents the pullback has already checked against their outputs (shape, element type,
        device): the engine called as `grad` calls it, without `grad`'s argument checks, which cost
        about as much as a small backward itself. `grad` itself where it would hand the call to a
        `__torch_function__` (a tensor subclass, a torch function mode) or torch lacks the wrapper;
        the engine directly where no accelerator exists and autograd's logger does not log (the
        wrapper hooks the graph then)."""
        if self._run_backward is None or self._has_torch_function((*outputs, *leaves)):
            return self.torch.autograd.grad(outputs, leaves, cotangents, retain_graph=retain, allow_unused=True)
        arguments = (tuple(outputs), tuple(cotangents), retain, False, tuple(leaves), True, False)
        if self._host_engine is not None and not self._engine_log.isEnabledFor(logging.DEBUG):
            return self._host_engine.run_backward(*arguments)
        return self._run_backward(*arguments)

    def record(self, fn, *args):
        """`fn(*args)` with autograd recording (the caller may have turned it off)."""
        torch = self.torch
        if torch.is_grad_enabled():
            return fn(*args)
        with torch.enable_grad():
            return fn(*args)

    def conform(self, t, dtype, device):
        """A cotangent made its output's element type (as ChainRules' `ProjectTo` makes it: a
        complex one's real part for a real output) and moved to its device (`None`: where it is),
        in one copy."""
        if t.is_complex() and not dtype.is_complex:
            t = t.real
        return t.to(device=device, dtype=dtype)

    def as_tensor(self, x):
        torch = self.torch
        if isinstance(x, torch.Tensor):
            return x
        return torch.from_dlpack(x)

    def is_tensor(self, x):
        return isinstance(x, self.torch.Tensor)

    def differentiable(self, t):
        return t.is_floating_point() or t.is_complex()

    def version(self, t):
        return t._version

    def zeros_like(self, t):
        return self.torch.zeros_like(t)

    def dtype_name(self, t):
        return str(t.dtype).removeprefix("torch.")

    def detach(self, t):
        # One that does not require grad (what autograd.grad answers) crosses as it is.
        return t.detach() if isinstance(t, self.torch.Tensor) and t.requires_grad else t

    def device(self, t):
        return t.device



class _Jax:
    name = "jax"
    tensor_type = None  # inputs come as exporters: jax.dlpack.from_dlpack takes them

    def __init__(self):
        import jax
        import jax.numpy as jnp

        self.jax = jax
        self.jnp = jnp

    def as_tensor(self, x):
        if isinstance(x, self.jax.Array):
            return x
        return self.jax.dlpack.from_dlpack(x)

    def is_tensor(self, x):
        return isinstance(x, self.jax.Array)

    def differentiable(self, t):
        return bool(self.jnp.issubdtype(t.dtype, self.jnp.inexact))

    def version(self, t):
        return 0  # JAX arrays are immutable

    def zeros_like(self, t):
        return self.jnp.zeros_like(t)

    def dtype_name(self, t):
        return str(t.dtype)

    def detach(self, t):
        return t

    def device(self, t):
        return next(iter(t.devices()))

    def conform(self, t, dtype, device):
        """As `_Torch.conform`."""
        jnp = self.jnp
        if jnp.iscomplexobj(t) and not jnp.issubdtype(dtype, jnp.complexfloating):
            t = jnp.real(t)
        t = t.astype(dtype)
        return t if device is None else self.jax.device_put(t, device)


_BACKENDS = {}


def backend(name):
    """The backend named "torch" or "jax" (imported on first use)."""
    if name not in _BACKENDS:
        if name == "torch":
            _BACKENDS[name] = _Torch()
        elif name == "jax":
            _BACKENDS[name] = _Jax()
        else:
            raise ValueError(f'backend must be "torch" or "jax", got {name!r}')
    return _BACKENDS[name]


def infer_backend(fn):
    """The backend of a callable that says which it is (a torch module, a jitted JAX function),
    or an error that asks for one."""
    for module in (type(fn).__module__, getattr(fn, "__module__", None)):
        module = module if isinstance(module, str) else ""
        if module == "torch" or module.startswith("torch."):
            return "torch"
        if module in ("jax", "jaxlib") or module.startswith(("jax.", "jaxlib.")):
            return "jax"
    raise ValueError(
        f"cannot tell whether {fn!r} is a torch or a JAX function: pass backend=\"torch\" or backend=\"jax\""
    )


# ---- inputs and outputs --------------------------------------------------------------------


class _Inputs:
    """The forward's inputs as the backend's tensors, the positions of the differentiable ones,
    and the version counters of those Julia shared (to find a function that wrote into one)."""

    __slots__ = ("values", "positions", "tensors", "versions", "all_tensors_differentiable")

    def __init__(self, be, objects, never_differentiable=()):
        values = self.values = list(objects)
        positions = self.positions = []
        tensors = self.tensors = []  # (position, tensor) of each tensor Julia shared
        versions = self.versions = []  # their version counters, in the same order
        every = True  # whether every tensor input is differentiable (no integer, boolean or buffer tensor)
        tensor_type = be.tensor_type
        for k, x in enumerate(values):
            if type(x) is tensor_type:  # what Julia shares into torch.Tensor: no method of `be` to call
                diff = (x.is_floating_point() or x.is_complex()) and k not in never_differentiable
                versions.append(x._version)
            elif x is None:
                continue
            elif be.is_tensor(x) or hasattr(x, "__dlpack__"):
                x = values[k] = be.as_tensor(x)
                diff = be.differentiable(x) and k not in never_differentiable
                versions.append(be.version(x))
            else:
                continue  # a plain Python value (a number, a string)
            tensors.append((k, x))
            if diff:
                positions.append(k)
            else:
                every = False
        self.all_tensors_differentiable = every

    def check_unchanged(self, be):
        """Raises InPlaceMutationError if the call wrote into a tensor Julia shared."""
        version = be.version
        if [version(t) for _, t in self.tensors] == self.versions:
            return
        for (k, t), before in zip(self.tensors, self.versions):
            if version(t) != before:
                raise InPlaceMutationError(
                    f"the function wrote into input {k + 1} in place (its version counter went from {before} "
                    f"to {version(t)}), and so into the Julia array shared as that input; differentiating "
                    "through an in-place write is not supported: compute a new tensor instead (e.g. x * 2, "
                    "not x.mul_(2))"
                )


def _split_outputs(be, result):
    """(structure, outputs, kinds) of what a function returned."""
    structure = TUPLE if isinstance(result, (tuple, list)) else SINGLE
    outputs = tuple(result) if structure == TUPLE else (result,)
    kinds = []
    for out in outputs:
        if out is None:
            kinds.append(KIND_NONE)
        elif be.is_tensor(out):
            kinds.append(KIND_TANGENT if be.differentiable(out) else KIND_NO_TANGENT)
        else:
            raise _not_a_tensor(be, out)
    return structure, outputs, kinds


def _not_a_tensor(be, out):
    return TypeError(
        f"the function returned a {type(out).__name__}; a differentiable call returns {be.name} tensors, "
        "a tuple of them, or None"
    )


def _device_type(be, t):
    """DLPack's device type of a tensor (kDLCPU 1, kDLCUDA 2, ...): which Julia array type
    imports it."""
    if t is None:
        return 0
    if be.name == "torch":
        if t.is_cpu:
            return 1
        device = t.device
        if device.type == "cuda" and device.index is not None and not be.torch.version.hip:
            return 2
    return int(t.__dlpack_device__()[0])


class Forward:
    """What `forward` returns: `structure` (SINGLE or TUPLE), `kinds` (per output),
    `outputs` (a tuple, None where the function returned None) and `pullback`. Julia reads
    `codes`, all of it as ints in one tuple: (structure, n, kind_1..kind_n, device_1..device_n),
    a device being DLPack's device type (0 for None)."""

    __slots__ = ("structure", "kinds", "devices", "outputs", "pullback")

    def __init__(self, be, structure, kinds, outputs, pullback):
        self.structure = structure
        self.kinds = tuple(kinds)
        self.outputs = tuple(outputs)
        self.devices = tuple([_device_type(be, o) for o in self.outputs])
        self.pullback = pullback

    @property
    def codes(self):
        return (self.structure, len(self.kinds), *self.kinds, *self.devices)


class Cotangents:
    """What a pullback returns: per input its `kinds` (KIND_TANGENT, KIND_ZERO,
    KIND_NO_TANGENT) and the cotangent `tensors` (None unless KIND_TANGENT). Julia reads
    `codes`: (kind_1..kind_n, device_1..device_n)."""

    __slots__ = ("kinds", "devices", "tensors")

    def __init__(self, be, kinds, tensors):
        self.kinds = tuple(kinds)
        self.tensors = tuple(tensors)
        self.devices = tuple([_device_type(be, t) for t in self.tensors])

    @property
    def codes(self):
        return (*self.kinds, *self.devices)


class Pullback:
    """The vector-Jacobian product a forward recorded. Called with one cotangent per output
    (a shared tensor, or None for zero), returns `Cotangents`: one per input."""

    def __init__(self, be, order, vjp, n_inputs, positions, output_kinds, outputs, retain):
        self._be = be
        self._order = order
        self._vjp = vjp  # (differentiable cotangents) -> cotangents of the differentiable inputs
        self._n_inputs = n_inputs
        self._positions = positions
        self._output_kinds = output_kinds
        # Shapes, dtypes and devices only: the outputs themselves are Julia's now.
        self._expected = [(o.shape, o.dtype, be.device(o)) if kind == KIND_TANGENT else None
                          for o, kind in zip(outputs, output_kinds)]
        self._retain = retain
        self._used = False

    @property
    def holds_inputs(self):
        """Whether this pullback still holds what the forward saved."""
        return self._vjp is not None

    def release(self):
        """Lets go of what the forward saved, now (what dropping the pullback does)."""
        self._vjp = None

    def _cotangent(self, k, x, output_shape, output_dtype, output_device=None):
        be = self._be
        t = be.as_tensor(x)
        if t.shape != output_shape:
            raise CotangentMismatchError(
                f"the cotangent of output {k + 1} is {_dims(t.shape, self._order)}, but output {k + 1} is "
                f"{_dims(output_shape, self._order)} (dims as Julia sees them, order={self._order})"
            )
        # A cotangent Julia had to make on the host (a FillArrays one, collected) for an output on
        # a GPU, or one of another element type (a Float64 loss's cotangent of a Float32 output,
        # projected as ChainRules projects it): the one copy this module makes.
        device = output_device if output_device is not None and be.device(t) != output_device else None
        if device is None and t.dtype == output_dtype:
            return t
        try:
            return be.conform(t, output_dtype, device)
        except Exception as e:
            raise CotangentMismatchError(
                f"the cotangent of output {k + 1} has element type {be.dtype_name(t)} on {be.device(t)}, and "
                f"output {k + 1} has {str(output_dtype).removeprefix('torch.')} on {output_device}: it could not "
                f"be converted ({e}); pass a cotangent of the output's element type"
            ) from e

    def __call__(self, *cotangents):
        if self._vjp is None:
            if self._used:
                raise PullbackUsedError(
                    "this pullback already ran and released the inputs its forward saved; call the wrapped "
                    "function with retain_pullback=true to call its pullback more than once (Zygote.jacobian does)"
                )
            raise PullbackUsedError("this pullback was released (dropped) before it was called")
        if len(cotangents) != len(self._output_kinds):
            raise ValueError(f"the pullback takes {len(self._output_kinds)} cotangents (one per output), got {len(cotangents)}")
        given = []
        any_given = False
        expected = self._expected
        for k, x in enumerate(cotangents):
            if expected[k] is None:
                continue  # no tangent flows back from a non-differentiable output
            if x is None:
                given.append(None)
            else:
                given.append(self._cotangent(k, x, *expected[k]))
                any_given = True
        positions = self._positions
        kinds = [KIND_NO_TANGENT] * self._n_inputs
        tangents = [None] * self._n_inputs
        if any_given and positions:
            detach = self._be.detach
            for k, g in zip(positions, self._vjp(given)):
                if g is None:
                    kinds[k] = KIND_ZERO
                else:
                    kinds[k] = KIND_TANGENT
                    tangents[k] = detach(g)
        else:
            for k in positions:
                kinds[k] = KIND_ZERO
        self._used = True
        if not self._retain:
            self._vjp = None
        return Cotangents(self._be, kinds, tangents)


# ---- the callables Julia wraps -------------------------------------------------------------


class _Callable:
    @property
    def share_codes(self):
        """(SHARE_INTO_TYPE,) when Julia shares inputs into `tensor_type`, else (SHARE_EXPORTER,)."""
        return (SHARE_EXPORTER if self.tensor_type is None else SHARE_INTO_TYPE,)


class Function(_Callable):
    """A Python callable of tensors (a torch function or `nn.Module`, whose parameters are
    constants here; a JAX function, jitted or not) made differentiable from Julia.

    `tensor_type` is what Julia shares inputs into: `torch.Tensor` (its C exchange API makes
    the tensor, no Python call), or None (an exporter, for JAX)."""

    def __init__(self, fn, backend_name=None, order="reversed", retain=False):
        if not callable(fn):
            raise TypeError(f"{fn!r} is not callable")
        self.fn = fn
        self.backend = backend(backend_name or infer_backend(fn))
        self.order = _check_order(order)
        self.retain = bool(retain)
        self.tensor_type = self.backend.tensor_type

    def __repr__(self):
        return f"rsdlpack_autodiff.Function({self.fn!r}, backend={self.backend.name!r}, order={self.order!r})"

    def forward(self, *objects):
        be = self.backend
        inputs = _Inputs(be, objects)
        positions = inputs.positions
        if be.name == "torch":
            result = self._torch_forward(inputs, positions)
        else:
            result = self._jax_forward(inputs, positions)
        return result

    def _closed(self, inputs, positions, meta):
        """The function of the differentiable inputs alone, returning (differentiable outputs,
        the other outputs) so that integer outputs travel as aux; `meta` receives the
        structure and the kinds (aux may hold only tensors)."""
        be = self.backend
        values = list(inputs.values)
        fn = self.fn

        def closed(*diff):
            args = list(values)
            for k, v in zip(positions, diff):
                args[k] = v
            structure, outputs, kinds = _split_outputs(be, fn(*args))
            meta["structure"], meta["kinds"] = structure, kinds
            diff_out = tuple(o for o, kind in zip(outputs, kinds) if kind == KIND_TANGENT)
            aux = tuple(o for o, kind in zip(outputs, kinds) if kind == KIND_NO_TANGENT)
            return diff_out, aux

        return closed

    def _assemble(self, diff_out, aux, meta):
        kinds = meta["kinds"]
        differentiable, other = iter(diff_out), iter(aux)
        detach = self.backend.detach
        outputs = [detach(next(differentiable)) if kind == KIND_TANGENT else
                   detach(next(other)) if kind == KIND_NO_TANGENT else None for kind in kinds]
        return meta["structure"], kinds, outputs

    def _torch_forward(self, inputs, positions):
        if inputs.all_tensors_differentiable:
            return self._torch_autograd_forward(inputs, positions)
        return self._torch_func_forward(inputs, positions)

    def _torch_autograd_forward(self, inputs, positions):
        """Every tensor input is differentiable: torch's autograd on detached leaves of them, which
        records what torch.func.vjp would without its transform's bookkeeping. Same refusals: an
        in-place write into a leaf is refused by autograd before it writes, one under no_grad is
        found by the version counter. With an integer tensor input, torch.func is used instead: it
        refuses an in-place write into a captured tensor before it writes, autograd would not."""
        be = self.backend
        leaves = list(inputs.values)
        for k in positions:
            leaves[k] = leaves[k].detach().requires_grad_()
        try:
            result = be.record(self.fn, *leaves)
        finally:
            inputs.check_unchanged(be)
        structure, outputs, kinds = _split_outputs(be, result)
        # A floating output that does not depend on a leaf (a constant, a frozen parameter) is
        # differentiable all the same, with a zero cotangent for every input, as under torch.func.
        diff_out = [o for o, kind in zip(outputs, kinds) if kind == KIND_TANGENT]
        diff_leaves = [leaves[k] for k in positions]
        retain = self.retain

        def vjp(given):
            pairs = [(o, g) for o, g in zip(diff_out, given) if g is not None and o.requires_grad]
            if not pairs:
                return [None] * len(diff_leaves)
            return be.grad([o for o, _ in pairs], diff_leaves, [g for _, g in pairs], retain)

        detached = [o.detach() if o is not None else None for o in outputs]
        pullback = Pullback(be, self.order, vjp, len(inputs.values), positions, kinds, detached, retain)
        return Forward(be, structure, kinds, detached, pullback)

    def _torch_func_forward(self, inputs, positions):
        torch = self.backend.torch
        meta = {}
        closed = self._closed(inputs, positions, meta)
        diff_primals = [inputs.values[k] for k in positions]
        # no_grad outside: a module's own parameters (leaves that require grad) record nothing,
        # so its outputs never require grad; torch.func.vjp ignores it for its own inputs.
        with torch.no_grad():
            try:
                diff_out, vjp_fn, aux = torch.func.vjp(closed, *diff_primals, has_aux=True)
            finally:
                inputs.check_unchanged(self.backend)
        structure, kinds, outputs = self._assemble(diff_out, aux, meta)

        def vjp(given):
            cot = tuple(self.backend.zeros_like(o) if g is None else g for g, o in zip(given, diff_out))
            with torch.no_grad():
                return vjp_fn(cot)

        pullback = Pullback(self.backend, self.order, vjp, len(inputs.values), positions, kinds, outputs, self.retain)
        return Forward(self.backend, structure, kinds, outputs, pullback)

    def _jax_forward(self, inputs, positions):
        jax = self.backend.jax
        meta = {}
        closed = self._closed(inputs, positions, meta)
        diff_primals = [inputs.values[k] for k in positions]
        diff_out, vjp_fn, aux = jax.vjp(closed, *diff_primals, has_aux=True)
        structure, kinds, outputs = self._assemble(diff_out, aux, meta)

        def vjp(given):
            cot = tuple(self.backend.zeros_like(o) if g is None else g for g, o in zip(given, diff_out))
            return vjp_fn(cot)

        pullback = Pullback(self.backend, self.order, vjp, len(inputs.values), positions, kinds, outputs, self.retain)
        return Forward(self.backend, structure, kinds, outputs, pullback)


def _member_slots(module, table, named, names, first_index=0):
    """Where each named parameter (`table` "_parameters") or buffer ("_buffers") of `module` is
    held, as (owner's table, attribute, index) triples: `index` is the name's place in `names`
    (plus `first_index`), and a tensor held by several submodules (tied weights, which
    `named(remove_duplicate=False)` lists under each of their names) has a triple for each."""
    places = {}
    for name, tensor in named(remove_duplicate=False):
        owner, _, attribute = name.rpartition(".")
        places.setdefault(id(tensor), []).append((getattr(module.get_submodule(owner), table), attribute))
    first = dict(named())
    return [(table, attribute, first_index + k)
            for k, name in enumerate(names) for table, attribute in places[id(first[name])]]


def _functional_call(module, slots, tensors, args):
    """`torch.func.functional_call(module, dict(zip(names, tensors)), args)` with tied weights
    tied, done as torch does it (each tensor set in its owners' `_parameters`/`_buffers` tables
    for the call, the module's own put back after), with the owners found once per module
    (`_member_slots`) rather than on every call."""
    originals = [table[attribute] for table, attribute, _ in slots]
    try:
        for table, attribute, k in slots:
            table[attribute] = tensors[k]
        return module(*args)
    finally:
        for (table, attribute, _), original in zip(slots, originals):
            table[attribute] = original


class _KeptLeaves:
    """A module's parameter leaves, kept from one call to the next as a module keeps its
    parameters: per parameter, the leaf made of the tensor passed at a call, reused while the
    same tensor comes again (Julia's layer passes the same tensors while its parameter arrays
    are the same, `KeptParameters`). An entry goes when its tensor is collected, so no leaf holds
    Julia's memory longer than the tensor Julia passed (but a pullback still holding it)."""

    __slots__ = ("entries", "__weakref__")

    def __init__(self, n):
        self.entries = [None] * n

    def put_leaves(self, arguments, positions):
        """Puts a leaf in place of each differentiable input (`positions` of `arguments`) and
        returns them: a parameter's kept one (the first `len(entries)` inputs) while it is still
        its tensor's (the same memory, still requiring grad: a module may have changed either),
        else a new one, kept for a parameter."""
        entries = self.entries
        n_kept = len(entries)
        leaves = []
        for k in positions:
            tensor = arguments[k]
            entry = entries[k] if k < n_kept else None
            if entry is not None and entry[0]() is tensor and entry[1].requires_grad \
                    and entry[1].data_ptr() == tensor.data_ptr():
                leaf = entry[1]
            else:
                leaf = tensor.detach().requires_grad_()
                if k < n_kept:
                    self._keep(k, tensor, leaf)
            arguments[k] = leaf
            leaves.append(leaf)
        return leaves

    def _keep(self, k, tensor, leaf):
        holder = weakref.ref(self)

        def forget(ref):
            kept = holder()
            if kept is not None and kept.entries[k] is not None and kept.entries[k][0] is ref:
                kept.entries[k] = None

        self.entries[k] = (weakref.ref(tensor, forget), leaf)


class Module(_Callable):
    """A torch `nn.Module` called functionally (as `torch.func.functional_call` calls it, see
    `_functional_call`: where each parameter lives is found once, when wrapped) on parameters and
    buffers Julia owns: the Lux layer's Python half.

    `forward(training, *tensors)` takes the parameters (in `parameter_names` order), then the
    buffers (`buffer_names` order), then the module's arguments, and returns the module's
    outputs followed by the buffers after the call (batch-norm statistics, updated in training
    mode): the layer's new state. Parameters are differentiable; buffers are not, and are
    cloned before the call, so the module's in-place updates of them never reach the buffers
    Julia passed.

    Recorded with torch's autograd on detached leaves of the shared tensors, not torch.func:
    under a torch.func transform a module may not update a captured buffer in place, which
    every batch norm does in training mode. A parameter's leaf is kept while the same tensor
    comes (`_KeptLeaves`), as the module's own parameters persist. The leaves never cross:
    outputs and cotangents are detached before they are returned."""

    def __init__(self, module, order="reversed", retain=False):
        import torch

        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"Module wraps a torch.nn.Module, got {type(module).__name__}")
        self.module = module
        self.backend = backend("torch")
        self.order = _check_order(order)
        self.retain = bool(retain)
        self.tensor_type = torch.Tensor
        self.parameter_names = tuple(name for name, _ in module.named_parameters())
        self.buffer_names = tuple(name for name, _ in module.named_buffers())
        self._slots = (_member_slots(module, "_parameters", module.named_parameters, self.parameter_names)
                       + _member_slots(module, "_buffers", module.named_buffers, self.buffer_names,
                                       len(self.parameter_names)))
        self._kept_leaves = _KeptLeaves(len(self.parameter_names))

    def __repr__(self):
        return f"rsdlpack_autodiff.Module({type(self.module).__name__}, order={self.order!r})"

    def initial_parameters(self):
        """Copies of the module's parameters, detached (Julia's from then on: it copies host
        ones into its own memory and holds device ones as they are)."""
        return tuple(p.detach().clone() for _, p in self.module.named_parameters())

    def initial_buffers(self):
        return tuple(b.detach().clone() for _, b in self.module.named_buffers())

    @property
    def parameter_devices(self):
        """DLPack's device type of each parameter: which Julia array type holds it."""
        return tuple(_device_type(self.backend, p) for _, p in self.module.named_parameters())

    @property
    def buffer_devices(self):
        return tuple(_device_type(self.backend, b) for _, b in self.module.named_buffers())

    def forward(self, training, *objects):
        be = self.backend
        n_params, n_buffers = len(self.parameter_names), len(self.buffer_names)
        n_state = n_params + n_buffers
        if len(objects) < n_state:
            raise ValueError(
                f"the module takes its {n_params} parameters and {n_buffers} buffers before its arguments, "
                f"got {len(objects)} tensors in all"
            )
        inputs = _Inputs(be, objects, never_differentiable=range(n_params, n_state))
        positions = inputs.positions
        arguments = inputs.values  # this call's own list: the leaves go in place
        leaves = self._kept_leaves.put_leaves(arguments, positions)
        buffers = [b.detach().clone() if b is not None else None for b in arguments[n_params:n_state]]
        arguments[n_params:n_state] = buffers
        if self.module.training != bool(training):  # train() walks every submodule: only on a change
            self.module.train(bool(training))
        try:
            result = be.record(_functional_call, self.module, self._slots, arguments, arguments[n_state:])
        finally:
            inputs.check_unchanged(be)
        # What autograd recorded decides: an output differentiates if it requires grad (a floating
        # output that depends on no parameter or argument does not).
        kinds, outputs, diff_out = [], [], []
        tensor_type = be.tensor_type
        for o in (result if isinstance(result, (tuple, list)) else (result,)):
            if o is None:
                kinds.append(KIND_NONE)
            elif type(o) is not tensor_type and not isinstance(o, tensor_type):
                raise _not_a_tensor(be, o)
            elif o.requires_grad:
                kinds.append(KIND_TANGENT)
                diff_out.append(o)
                o = o.detach()
            else:
                kinds.append(KIND_NO_TANGENT)
            outputs.append(o)
        retain = self.retain

        def vjp(given):
            pairs = [(o, g) for o, g in zip(diff_out, given) if g is not None]
            return be.grad([o for o, _ in pairs], leaves, [g for _, g in pairs], retain)

        outputs += buffers
        kinds += [KIND_NO_TANGENT if b is not None else KIND_NONE for b in buffers]
        pullback = Pullback(be, self.order, vjp, len(objects), positions, kinds, outputs, retain)
        return Forward(be, TUPLE, kinds, outputs, pullback)
