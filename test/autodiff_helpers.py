"""The Python side of test/autodiff.jl and test/lux.jl (and docs/src/autodiff.md's example):
the functions, modules and data the Julia tests differentiate, and torch's and JAX's own
gradients on the same numbers. Imported by the Julia tests from test/ (on sys.path there)."""


def torch_function():
    """Two inputs, one output: tanh(a @ b)."""
    import torch

    return lambda a, b: torch.tanh(a @ b)


def torch_several():
    """Several outputs: a differentiable one, an integer one, None, and a view of the input."""
    import torch

    def several(a):
        y = torch.sin(a)
        return y, y.argmax(dim=1), None, a[:, :2]

    return several


def jax_function():
    """A jitted JAX function of two inputs: sin(a @ b) * 2."""
    import jax
    import jax.numpy as jnp

    return jax.jit(lambda a, b: jnp.sin(a @ b) * 2)


def data(seed, rows, columns, dtype="float32"):
    """A (rows, columns) torch tensor of normal numbers: Julia's (columns, rows) array."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, columns, generator=g, dtype=getattr(torch, dtype))


def half_sum_of_squares_grads_torch(fn, *tensors):
    """torch.autograd.grad of sum(fn(tensors...) ** 2) / 2 with respect to every tensor."""
    import torch

    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    loss = (fn(*leaves) ** 2).sum() / 2
    return tuple(torch.autograd.grad(loss, leaves))


def half_sum_of_squares_grads_jax(fn, *arrays):
    """jax.grad of sum(fn(arrays...) ** 2) / 2 with respect to every array."""
    import jax
    import jax.numpy as jnp

    loss = lambda *xs: jnp.sum(fn(*xs) ** 2) / 2  # noqa: E731
    return tuple(jax.grad(loss, argnums=tuple(range(len(arrays))))(*(jnp.asarray(a) for a in arrays)))


def numpy_of(t):
    """A torch tensor as a JAX-independent NumPy array (what Julia imports for JAX inputs)."""
    return t.detach().numpy()


def mlp(seed=0, inputs=4, hidden=16, outputs=3):
    """A torch MLP, its parameters drawn from `seed`."""
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(inputs, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, outputs))


def batch_norm_net(seed=0):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.BatchNorm1d(5))


def linear(inputs, outputs):
    import torch

    return torch.nn.Linear(inputs, outputs)


def module_grads(module, x, target):
    """torch's own gradients of sum((module(x) - target) ** 2) / 2 with respect to the module's
    parameters (in named_parameters order) and x, in training mode."""
    import torch

    module.train()
    for p in module.parameters():
        p.grad = None
    leaf = x.detach().clone().requires_grad_()
    loss = ((module(leaf) - target) ** 2).sum() / 2
    grads = torch.autograd.grad(loss, [*module.parameters(), leaf])
    return tuple(g.detach() for g in grads)
