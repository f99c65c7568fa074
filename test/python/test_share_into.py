"""Julia's share(A, T) into a type through T's DLPack C exchange API: rsdlpack_py_share_into,
called as Julia's ccall calls it (ctypes). The "Julia array" is a NumPy buffer described
column-major; the object comes from T's own managed_tensor_to_py_object_no_sync.

Facts about torch 2.15 these tests pin down: its managed_tensor_to_py_object_no_sync ignores
DLPack's READ_ONLY flag (the tensor is writable), and on an element type it does not know it
fails before it takes the tensor (its deleter is not run).
"""

import gc

import numpy as np
import pytest

from rsdlpack_abi import ERROR_CODE_BUFFER, ERROR_CODE_INVALID, ERROR_CODE_PRODUCER
from rsdlpack_ctypes import ACCESS_READ_ONLY, ELEMENT_CODES

torch = pytest.importorskip("torch", reason="torch is in scripts/requirements.txt")
if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
    pytest.skip("this torch has no torch.Tensor.__dlpack_c_exchange_api__ (test_calling_thread.py refuses a "
                "type without it)", allow_module_level=True)


def share_into(bridge, backing, dims, strides, into, root_id, **options):
    code = ELEMENT_CODES[options.pop("element", str(backing.dtype))]
    return bridge.share(backing.ctypes.data, dims, strides, code, root_id=root_id, into=into, **options)


def exporter_type(bridge):
    """RsDLPack's own exporter type, which offers a table that makes its objects."""
    (exporter, _), _ = bridge.share(np.zeros(1).ctypes.data, [1], [1], ELEMENT_CODES["float64"], root_id=1)
    return type(exporter)


def test_a_torch_tensor_over_the_julia_array_and_the_root_released_once(bridge):
    bridge.take_released_roots()
    backing = np.arange(12, dtype=np.float64)
    (t, released), error = share_into(bridge, backing, [3, 4], [1, 3], torch.Tensor, 41)
    assert error is None, error
    assert type(t) is torch.Tensor
    assert t.data_ptr() == backing.ctypes.data
    assert t.shape == (3, 4) and t.stride() == (1, 3) and t.dtype == torch.float64
    assert t.tolist() == backing.reshape(3, 4, order="F").tolist()
    t[0, 1] = -1.0
    assert backing[3] == -1.0, "the same memory, writable"
    view = t[1:]
    del t
    gc.collect()
    assert bridge.take_released_roots() == [], "a view keeps the tensor"
    del view
    gc.collect()
    assert bridge.take_released_roots() == [41]
    assert bridge.take_released_roots() == []


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int64", "float16", "float32", "complex64"])
def test_every_element_type_torch_knows_arrives_as_torchs_dtype(bridge, dtype):
    bridge.take_released_roots()
    backing = np.arange(6).astype(dtype)
    (t, _), error = share_into(bridge, backing, [6], [1], torch.Tensor, 50)
    assert error is None, error
    assert t.dtype == getattr(torch, dtype) and t.data_ptr() == backing.ctypes.data
    assert t.tolist() == backing.tolist()
    del t
    gc.collect()
    assert bridge.take_released_roots() == [50]


def test_reversed_order_hands_out_the_reversed_dims(bridge):
    from rsdlpack_ctypes import INDEX_ORDER_REVERSED

    backing = np.arange(6, dtype=np.float32)
    (t, _), error = share_into(bridge, backing, [2, 3], [1, 2], torch.Tensor, 51, order=INDEX_ORDER_REVERSED)
    assert error is None, error
    assert t.shape == (3, 2) and t.stride() == (2, 1)
    assert t.tolist() == backing.reshape(3, 2).tolist()
    del t
    gc.collect()
    assert bridge.take_released_roots() == [51]


def test_refusals_name_the_problem_and_leave_no_reference_to_the_root(bridge):
    bridge.take_released_roots()
    backing = np.arange(4.0)
    _, (code, message) = share_into(bridge, backing, [4], [1], torch.Tensor, 60, read_only=ACCESS_READ_ONLY)
    assert code == ERROR_CODE_BUFFER and "read-only" in message and "torch.Tensor" in message
    # A type without the table (NumPy's; a plain class) is a refusal naming the type, not a call
    # of the type (torch.Tensor(exporter) on a torch without the table is its legacy constructor).
    _, (code, message) = share_into(bridge, backing, [4], [1], np.ndarray, 61)
    assert code == ERROR_CODE_BUFFER and "cannot share into the type numpy.ndarray" in message
    assert "no DLPack C exchange API" in message and "share(A, torch.from_dlpack)" in message
    _, (code, message) = share_into(bridge, backing, [4], [1], torch.ones(1), 62)
    assert code == ERROR_CODE_INVALID and "must be a Python type" in message
    # A subclass inherits torch's table, which makes plain tensors: refused by name.
    _, (code, message) = share_into(bridge, backing, [4], [1], torch.nn.Parameter, 63)
    assert code == ERROR_CODE_INVALID and "makes torch.Tensor objects, not torch.nn.parameter.Parameter" in message

    class Consumer:
        def __init__(self, tensor):
            raise AssertionError("share_into must not call the type")

    _, (code, message) = share_into(bridge, backing, [4], [1], Consumer, 64)
    assert code == ERROR_CODE_BUFFER and f"the type {__name__}." in message and "<locals>.Consumer:" in message, message
    gc.collect()
    assert sorted(bridge.take_released_roots()) == [60, 61, 62, 63, 64]


def test_a_type_its_table_fails_on_releases_the_root_exactly_once(bridge):
    bridge.take_released_roots()
    backing = np.zeros(4, dtype=np.uint16)
    # Complex bfloat16 (DLPack's kDLBcomplex): torch has no such dtype and fails before it takes
    # the tensor, so the tensor is released here.
    _, (code, message) = share_into(bridge, backing, [2], [1], torch.Tensor, 70, element="bcomplex")
    assert code == ERROR_CODE_PRODUCER and "managed_tensor_to_py_object_no_sync" in message
    gc.collect()
    assert bridge.take_released_roots() == [70]
    assert bridge.take_released_roots() == []


def test_every_type_here_with_a_table_that_makes_objects(bridge):
    candidates = [torch.Tensor, exporter_type(bridge)]
    for number, kind in enumerate(candidates):
        bridge.take_released_roots()
        backing = np.arange(6, dtype=np.float32)
        (obj, _), error = share_into(bridge, backing, [2, 3], [1, 2], kind, 80 + number)
        assert error is None, (kind, error)
        assert isinstance(obj, kind)
        seen = np.from_dlpack(obj)
        assert seen.ctypes.data == backing.ctypes.data, kind
        assert seen.tolist() == backing.reshape(2, 3, order="F").tolist(), kind
        del seen, obj
        gc.collect()
        bridge.lib.rsdlpack_py_flush_releases()
        assert bridge.take_released_roots() == [80 + number], kind
