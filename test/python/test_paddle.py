"""PaddlePaddle (CPU wheel) as a peer, through the shipped C entry points (ctypes, as Julia's ccall
calls them): a consumer of our exports (`paddle.from_dlpack`), a producer through its DLPack 1.3
C exchange API (the second beside torch) and through `__dlpack__`, and a maker of its own
objects for share_into.

Facts about paddle 3.3.1 these tests pin down (so that a change in paddle shows up here):
- `paddle.from_dlpack` asks `__dlpack__(max_version=(1, 2))` and never calls the deleter of a
  tensor whose `manager_ctx` is NULL (dlpack.h allows NULL): RsDLPack's exports carry the
  owner's address there, so each is released exactly once;
- it ignores DLPack's READ_ONLY flag: the tensor it makes over a read-only export is writable;
- `__dlpack_device__` answers `(kDLCPU, None)`, a device id of None;
- its C exchange API's managed tensors hold paddle's storage, not the Python object.
"""

import ctypes
import gc
import sys

import numpy as np
import pytest

paddle = pytest.importorskip("paddle", reason="paddlepaddle is in scripts/requirements.txt")

from rsdlpack_ctypes import (  # noqa: E402
    ACCESS_READ_ONLY,
    DLPACK_DTYPES,
    ELEMENT_CODES,
    INDEX_ORDER_REVERSED,
    INVALID,
    ImportOptions,
    exchange_api_of,
    first_element,
    flush,
    forget_earlier_roots,
    imported,
    shape_of,
)
from rsdlpack_ctypes import share_numpy as share  # noqa: E402

KDLCPU = 1
# (DLPack type code, bits) of every paddle dtype with a DLPack and Julia counterpart.
DTYPES = {name: DLPACK_DTYPES[name] for name in ["bool", "int8", "int16", "int32", "int64", "uint8", "float16",
                                                  "bfloat16", "float32", "float64", "complex64", "complex128"]}


def read_back(tensor, itemsize, dtype):
    """The imported tensor's elements, read through its address, shape and strides."""
    shape, strides = shape_of(tensor)
    if 0 in shape:
        return np.empty(shape, dtype)
    span = 1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides))
    low = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    base = first_element(tensor) + low * itemsize
    buffer = (ctypes.c_char * (span * itemsize)).from_address(base)
    return np.ndarray(shape, dtype, buffer=buffer, offset=-low * itemsize, strides=[s * itemsize for s in strides])


class OnlyThePythonProtocol:
    """A paddle tensor behind `__dlpack__` and `__dlpack_device__` alone: its type has no C
    exchange API, so importing it goes through paddle's own Python protocol."""

    def __init__(self, tensor):
        self.tensor = tensor
        self.calls = []

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        return self.tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


# ---- RsDLPack → paddle ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "label, dims, strides, order",
    [
        ("column-major (Julia's Array)", [3, 4], [1, 3], 0),
        ("stepped view", [2, 2], [2, 6], 0),
        ("reversed dims", [3, 4], [1, 3], INDEX_ORDER_REVERSED),
        ("0-d", [], [], 0),
    ],
)
def test_paddle_consumes_shared_arrays_and_releases_each_root_once(bridge, label, dims, strides, order):
    """Fails when an export's manager_ctx is NULL: paddle then never calls the deleter, and the
    Julia array stays rooted for good."""
    forget_earlier_roots(bridge)
    backing = np.arange(12, dtype=np.float64)
    exporter = share(bridge, backing, dims, strides, 7, order=order)
    p = paddle.from_dlpack(exporter)
    assert p.data_ptr() == backing.__array_interface__["data"][0], label
    expected = np.lib.stride_tricks.as_strided(backing, dims, [s * 8 for s in strides])
    if order == INDEX_ORDER_REVERSED:
        expected = expected.T
    assert list(p.shape) == list(expected.shape) and p.numpy().tolist() == expected.tolist(), label
    del exporter
    gc.collect()
    assert bridge.take_released_roots() == [], "paddle's tensor keeps the array"
    del p
    gc.collect()
    assert bridge.take_released_roots() == [7], label
    assert bridge.take_released_roots() == []


@pytest.mark.parametrize("name", ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32",
                                  "float64", "complex64", "complex128"])
def test_every_element_type_arrives_as_paddles_dtype_and_is_released(bridge, name):
    forget_earlier_roots(bridge)
    backing = np.arange(6).astype(name)
    p = paddle.from_dlpack(share(bridge, backing, [2, 3], [1, 2], 11))
    assert p.dtype == getattr(paddle, name) and p.data_ptr() == backing.ctypes.data
    assert p.numpy().tolist() == backing.reshape(2, 3, order="F").tolist()
    del p
    gc.collect()
    assert bridge.take_released_roots() == [11]


@pytest.mark.parametrize("hand_over", ["exporter", "legacy capsule", "versioned capsule"])
def test_exports_of_imported_tensors_and_capsules_are_released_once(bridge, hand_over):
    """An exporter over another producer's tensor (NumPy's), and bare capsules, legacy and
    versioned: each released once by paddle."""
    a = np.arange(12.0).reshape(3, 4)[:, 1:]
    before = sys.getrefcount(a)
    exporter, error = bridge.export(imported(bridge, a))
    assert error is None, error
    given = {"exporter": lambda: exporter, "legacy capsule": lambda: exporter.__dlpack__(),
             "versioned capsule": lambda: exporter.__dlpack__(max_version=(1, 3))}[hand_over]()
    p = paddle.from_dlpack(given)
    assert p.data_ptr() == a.__array_interface__["data"][0] and p.strides == [4, 1]
    assert p.numpy().tolist() == a.tolist()
    del exporter, given, p
    flush(bridge)
    assert sys.getrefcount(a) == before, "NumPy's array released exactly once"


def test_paddle_releases_only_one_of_two_tensors_over_one_address_whoever_made_them(bridge):
    """paddle's own bug, pinned with NumPy as the control: of two paddle tensors over the same
    address, only one deleter is ever called. So `share(A, paddle.from_dlpack)` twice on one
    array leaves it rooted; nothing on our side can call a deleter paddle keeps."""
    a = np.arange(6.0)
    before = sys.getrefcount(a)
    twice = [paddle.from_dlpack(a), paddle.from_dlpack(a)]
    del twice
    gc.collect()
    assert sys.getrefcount(a) == before + 1, "paddle now releases both: revisit the docstring"
    forget_earlier_roots(bridge)
    backing = np.arange(4.0)
    twice = [paddle.from_dlpack(share(bridge, backing, [4], [1], root_id)) for root_id in (31, 32)]
    del twice
    gc.collect()
    assert len(bridge.take_released_roots()) == 1, "as for NumPy's: one of the two"


def test_paddle_ignores_read_only_and_still_releases(bridge):
    forget_earlier_roots(bridge)
    backing = np.arange(4.0)
    p = paddle.from_dlpack(share(bridge, backing, [4], [1], 12, read_only=ACCESS_READ_ONLY))
    p[0] = -1.0
    assert backing[0] == -1.0, "paddle now honours READ_ONLY: revisit the docstring"
    del p
    gc.collect()
    assert bridge.take_released_roots() == [12]


def test_share_into_paddle_tensor_through_its_c_api(bridge):
    forget_earlier_roots(bridge)
    backing = np.arange(12, dtype=np.float32)
    (p, _), error = bridge.share(backing.ctypes.data, [3, 4], [1, 3], ELEMENT_CODES["float32"], root_id=13,
                                 into=paddle.Tensor)
    assert error is None, error
    assert type(p) is paddle.Tensor and p.data_ptr() == backing.ctypes.data
    assert p.numpy().tolist() == backing.reshape(3, 4, order="F").tolist()
    del p
    gc.collect()
    assert bridge.take_released_roots() == [13]


# ---- paddle → RsDLPack ----------------------------------------------------------------------


def test_paddles_table_is_a_dlpack_1_3_capsule_with_five_functions():
    api = exchange_api_of(paddle.Tensor)
    assert (api.header.version.major, api.header.version.minor) == (1, 3)
    for field in ["managed_tensor_allocator", "managed_tensor_from_py_object_no_sync",
                  "managed_tensor_to_py_object_no_sync", "dltensor_from_py_object_no_sync", "current_work_stream"]:
        assert ctypes.cast(getattr(api, field), ctypes.c_void_p).value, field


@pytest.fixture
def no_python_protocol(monkeypatch):
    """paddle.Tensor.__dlpack__ made to fail: an import that succeeds was served by the C API."""

    def refuse(self, *args, **kwargs):
        raise AssertionError("__dlpack__ was called; the C exchange API should have been used")

    monkeypatch.setattr(paddle.Tensor, "__dlpack__", refuse)


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_every_paddle_dtype_imports_zero_copy_through_the_c_api(bridge, no_python_protocol, name):
    t = paddle.arange(24).reshape([4, 6]).astype(name)
    tensor = imported(bridge, t)
    c = tensor.contents
    assert (c.dl_tensor.dtype.code, c.dl_tensor.dtype.bits, c.dl_tensor.dtype.lanes) == (*DTYPES[name], 1)
    assert first_element(tensor) == t.data_ptr()
    assert shape_of(tensor) == ([4, 6], [6, 1])
    assert (c.version.major, c.version.minor, c.flags) == (1, 3, 0)
    bridge.release(tensor)


@pytest.mark.parametrize(
    "label, make",
    [
        ("0-d", lambda: paddle.to_tensor(3.5, dtype="float32")),
        ("transposed", lambda: paddle.arange(12, dtype="float32").reshape([3, 4]).T),
        ("permuted", lambda: paddle.arange(24, dtype="float32").reshape([2, 3, 4]).transpose([2, 0, 1])),
        ("sliced", lambda: paddle.arange(30, dtype="float32").reshape([5, 6])[1:4, 2:5]),
        ("stepped", lambda: paddle.arange(30, dtype="float32").reshape([5, 6])[::2, ::3]),
        ("empty", lambda: paddle.empty([0, 3], dtype="float32")),
    ],
)
def test_paddle_views_import_with_paddles_strides_and_values(bridge, no_python_protocol, label, make):
    t = make()
    tensor = imported(bridge, t)
    assert shape_of(tensor) == (list(t.shape), list(t.strides)), label
    if t.numel() > 0:
        assert first_element(tensor) == t.data_ptr(), label
    assert read_back(tensor, 4, np.float32).tolist() == t.numpy().tolist(), label
    bridge.release(tensor)


def test_the_c_api_import_holds_paddles_storage_until_released_once(bridge, no_python_protocol):
    """A Julia array shared into paddle, imported back through paddle's C API: paddle's deleter
    (run by our release) lets go of the storage, and so of our export, exactly once."""
    forget_earlier_roots(bridge)
    backing = np.arange(12, dtype=np.float32)
    p = paddle.from_dlpack(share(bridge, backing, [3, 4], [1, 3], 21))
    tensor = imported(bridge, p)
    assert first_element(tensor) == backing.ctypes.data and shape_of(tensor) == ([3, 4], [1, 3])
    del p
    flush(bridge)
    assert bridge.take_released_roots() == [], "the import holds paddle's storage"
    assert read_back(tensor, 4, np.float32).tolist() == backing.reshape(3, 4, order="F").tolist()
    bridge.release(tensor)
    flush(bridge)
    assert bridge.take_released_roots() == [21]
    assert bridge.take_released_roots() == []


def test_paddle_through_the_python_protocol(bridge):
    t = paddle.arange(12, dtype="float64").reshape([3, 4]).T
    wrapped = OnlyThePythonProtocol(t)
    tensor = imported(bridge, wrapped)
    assert wrapped.calls == [{"max_version": (1, 3)}]
    assert first_element(tensor) == t.data_ptr() and shape_of(tensor) == ([4, 3], [1, 4])
    c = tensor.contents
    assert (c.version.major, c.version.minor, c.flags) == (1, 3, 0)
    assert read_back(tensor, 8, np.float64).tolist() == t.numpy().tolist()
    bridge.release(tensor)
    # A bare capsule from paddle's __dlpack__.
    tensor = imported(bridge, t.__dlpack__())
    assert first_element(tensor) == t.data_ptr()
    bridge.release(tensor)


def test_a_device_id_of_none_on_the_host_is_read_as_zero(bridge):
    """Asking for a stream makes the import ask `__dlpack_device__`, which paddle answers
    `(kDLCPU, None)`; the stream is then not passed, as for every host tensor."""
    t = paddle.arange(6, dtype="float32")
    assert t.__dlpack_device__() == (KDLCPU, None), "paddle now names a device id: revisit"
    wrapped = OnlyThePythonProtocol(t)
    tensor = imported(bridge, wrapped, ImportOptions(has_stream=1, stream=-1, copy=-1))
    assert wrapped.calls == [{"max_version": (1, 3)}], "no stream for host memory"
    assert first_element(tensor) == t.data_ptr()
    bridge.release(tensor)

    class CudaWithoutId(OnlyThePythonProtocol):
        def __dlpack_device__(self):
            return (2, None)

    # A device with several instances must name one.
    _, (code, message) = bridge.import_(CudaWithoutId(t), ImportOptions(has_stream=1, stream=-1, copy=-1))
    assert code == INVALID and "CudaWithoutId.__dlpack_device__ returned (2, None)" in message, message
