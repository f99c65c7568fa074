"""Python-side helpers for test/runtests.jl: everything the Julia tests ask of Python goes
through these functions, so that the PyCall and PythonCall runs execute the same code."""

import gc
import importlib
import sys

import numpy as np


def has(module):
    try:
        importlib.import_module(module)
        return True
    except Exception:
        return False


def make(expression):
    scope = {"np": np}
    if "jnp" in expression or "jax" in expression:
        import jax

        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp

        scope.update(jax=jax, jnp=jnp)
    if "torch" in expression:
        import torch

        scope["torch"] = torch
    return eval(expression, scope)


def address(a):
    if hasattr(a, "data_ptr"):
        return a.data_ptr()
    if hasattr(a, "unsafe_buffer_pointer"):
        return a.unsafe_buffer_pointer()
    return a.ctypes.data


def shape(a):
    return list(a.shape)


def flat(a):
    """Row-major values, as complex numbers (so every dtype compares in Julia)."""
    if hasattr(a, "cpu"):
        a = a.cpu().numpy()
    return [complex(x) for x in np.asarray(a).astype(np.complex128).ravel().tolist()]


def getitem(a, index):
    return complex(a[tuple(index)])


def writeable(a):
    return bool(a.flags.writeable)


def read_only(a):
    a.flags.writeable = False
    return a


def capsule(a):
    return a.__dlpack__()


def refcount(o):
    return sys.getrefcount(o)


def collect():
    gc.collect()


def np_from_dlpack(x):
    return np.from_dlpack(x)


def jax_from_dlpack(x):
    import jax.dlpack

    return jax.dlpack.from_dlpack(x)


def torch_tensor_type():
    import torch

    return torch.Tensor


def has_exchange_api(tp):
    """Whether a type offers the DLPack C exchange API (torch from the release that has it)."""
    return getattr(tp, "__dlpack_c_exchange_api__", None) is not None


def torch_read_only(a):
    """A torch tensor over a NumPy array, exported read-only, or None where torch cannot."""
    import torch
    import torch.utils.dlpack as dlpack

    wrapper = getattr(dlpack, "ReadOnlyTensorWrapper", None)
    return None if wrapper is None else wrapper(torch.from_numpy(a))


def is_none(x):
    return x is None


def plain_type():
    """A Python type without the DLPack C exchange API, whose constructor must not be called."""

    class Consumer:
        def __init__(self, *args):
            raise AssertionError("share must not call the type")

    return Consumer


def collect_garbage():
    import gc

    gc.collect()


def torch_from_dlpack(x):
    import torch

    return torch.from_dlpack(x)


def dlpack_device(x):
    return list(x.__dlpack_device__())


def dtype_name(x):
    return str(x.dtype)


def raw_bytes(x):
    """The elements' bytes, in index order (for dtypes Julia has no type for, like fp8)."""
    import numpy as np

    return list(np.asarray(x).view(np.uint8).reshape(-1).tobytes())


def misaligned(rows, columns):
    """A float64 array whose first element is one byte past an 8-byte boundary, holding 0, 1, …"""
    a = np.frombuffer(bytearray(8 * rows * columns + 1), dtype=np.float64, offset=1, count=rows * columns)
    a[...] = np.arange(rows * columns)
    return a.reshape(rows, columns)


def element_strides(a):
    """The strides in elements."""
    return [s // a.itemsize for s in a.strides]
