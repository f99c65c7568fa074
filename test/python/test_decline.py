"""Declining (RSDLPACK_CALL_DECLINE_REFUSALS): what Julia's PythonCall `pyconvert` rules ask the
bridge, which decides which objects they pass on to PythonCall's other rules. With the flag, an
object that is not a tensor (no `__dlpack__`, a class such as `torch.Tensor` itself) and a
tensor whose export is refused (torch's `requires_grad`, `nn.Parameter`, conjugate-, negative-
bit and sparse tensors; a producer whose `__dlpack__` raises; another device) answer
RSDL_ERROR_CODE_DECLINED, with the message the import gives without the flag; every other error
keeps its code, and tensors import as before. `rsdlpack_py_tensor_device` answers the device the
rules pick their array type by, declining the same non-tensors, and calls nothing on a class.
Real peers: NumPy and torch."""

import ctypes

import numpy as np
import pytest

from rsdlpack_abi import (CALL_DECLINE_REFUSALS, CALL_REFUSE_WITHOUT_GIL, ERROR_CODE_BUFFER, ERROR_CODE_DECLINED,
                          ERROR_CODE_INVALID, ERROR_CODE_NOT_DLPACK, ERROR_CODE_PRODUCER, PLAN_WRITABLE_TYPE,
                          TARGET_CUDA_ARRAY)
from rsdlpack_ctypes import PLAN_VIEW, ImportOptions, PlanOptions

DECLINE = CALL_DECLINE_REFUSALS | CALL_REFUSE_WITHOUT_GIL  # as Julia's rules pass it
HOST = ImportOptions(0, 0, 1, 1, 0, -1)                    # what Julia asks for an Array: the CPU


def torch_module():
    return pytest.importorskip("torch", reason="torch is in scripts/requirements.txt")


class Refusing:
    """A producer whose export raises, as JAX's does for a sharded array."""

    def __dlpack__(self, **kwargs):
        raise BufferError("this array is sharded across devices and cannot be exported")

    def __dlpack_device__(self):
        return (1, 0)


class BadDevice:
    """A producer whose `__dlpack_device__` raises."""

    def __dlpack__(self, **kwargs):
        raise AssertionError("not reached: the device query fails first")

    def __dlpack_device__(self):
        raise RuntimeError("no device today")


def refused_tensors():
    torch = torch_module()
    z = torch.tensor([1 + 2j, 3 - 4j])
    return {
        "requires_grad": (torch.ones(3, requires_grad=True), ERROR_CODE_BUFFER, "requires grad"),
        "a graph's tensor": (torch.ones(3, requires_grad=True) * 2, ERROR_CODE_BUFFER, "requires grad"),
        "nn.Parameter": (torch.nn.Parameter(torch.zeros(2)), ERROR_CODE_BUFFER, "requires grad"),
        "conj bit": (z.conj(), ERROR_CODE_BUFFER, "conjugate bit"),
        "neg bit": (z.conj().imag, ERROR_CODE_BUFFER, "negative bit"),
        "sparse": (torch.zeros(2, 2).to_sparse(), ERROR_CODE_PRODUCER, "raised"),
        "producer raises": (Refusing(), ERROR_CODE_PRODUCER, "sharded"),
    }


def not_tensors():
    torch = torch_module()
    return {
        "torch.Tensor": (torch.Tensor, "torch.Tensor is a class, not a tensor"),
        "nn.Parameter class": (torch.nn.Parameter, "is a class, not a tensor"),
        "numpy.ndarray": (np.ndarray, "numpy.ndarray is a class, not a tensor"),
        "a list": ([1, 2], "neither a DLPack capsule nor has __dlpack__"),
        "None": (None, "neither a DLPack capsule nor has __dlpack__"),
    }


@pytest.mark.parametrize("name", ["requires_grad", "a graph's tensor", "nn.Parameter", "conj bit", "neg bit", "sparse",
                                  "producer raises"])
def test_refused_exports_are_declined_only_when_asked(bridge_with_gil, name):
    obj, code, what = refused_tensors()[name]
    _, (plain_code, plain_message) = bridge_with_gil.import_plan(obj, options=HOST, flags=CALL_REFUSE_WITHOUT_GIL)
    assert plain_code == code and what in plain_message, plain_message
    _, (declined, message) = bridge_with_gil.import_plan(obj, options=HOST, flags=DECLINE)
    assert declined == ERROR_CODE_DECLINED and message == plain_message
    # The strided import (Julia's pyconvert(StridedView, x)) declines the same.
    _, (declined, _) = bridge_with_gil.import_strided_plan(obj, options=HOST, flags=DECLINE)
    assert declined == ERROR_CODE_DECLINED


def test_requires_grad_names_the_cause_and_the_fix(bridge_with_gil):
    torch = torch_module()
    p = torch.nn.Parameter(torch.zeros(2))
    _, (code, message) = bridge_with_gil.import_plan(p, options=HOST, flags=CALL_REFUSE_WITHOUT_GIL)
    assert code == ERROR_CODE_BUFFER
    assert "Parameter" in message and "requires grad" in message and ".detach()" in message, message
    # The fix works: the detached tensor imports, over the parameter's memory.
    result, error = bridge_with_gil.import_plan(p.detach(), options=HOST, flags=DECLINE)
    assert error is None, error
    assert result.plan.kind == PLAN_VIEW and result.plan.parent_address == p.data_ptr()
    bridge_with_gil.release_handle(result.plan.tensor)


@pytest.mark.parametrize("name", ["torch.Tensor", "nn.Parameter class", "numpy.ndarray", "a list", "None"])
def test_objects_that_are_not_tensors(bridge_with_gil, name):
    obj, what = not_tensors()[name]
    _, (code, message) = bridge_with_gil.import_plan(obj, options=HOST, flags=CALL_REFUSE_WITHOUT_GIL)
    assert code == ERROR_CODE_NOT_DLPACK and what in message, message
    _, (declined, message) = bridge_with_gil.import_plan(obj, options=HOST, flags=DECLINE)
    assert declined == ERROR_CODE_DECLINED and what in message, message
    _, (code, message) = bridge_with_gil.tensor_device(obj, flags=CALL_REFUSE_WITHOUT_GIL)
    assert code == ERROR_CODE_NOT_DLPACK and what in message, message
    _, (declined, _) = bridge_with_gil.tensor_device(obj, flags=DECLINE)
    assert declined == ERROR_CODE_DECLINED


def test_a_class_is_never_called(bridge_with_gil):
    calls = []

    class Producer:
        def __dlpack__(self, **kwargs):
            calls.append("__dlpack__")
            return np.zeros(2).__dlpack__(**kwargs)

        def __dlpack_device__(self):
            calls.append("__dlpack_device__")
            return (1, 0)

    _, (declined, message) = bridge_with_gil.tensor_device(Producer, flags=DECLINE)
    assert declined == ERROR_CODE_DECLINED and "is a class" in message
    assert calls == []
    assert bridge_with_gil.tensor_device(Producer(), flags=DECLINE) == ((1, 0), None)
    assert calls == ["__dlpack_device__"]


def test_device_answers(bridge_with_gil):
    torch = torch_module()
    assert bridge_with_gil.tensor_device(np.zeros((2, 3)), flags=DECLINE) == ((1, 0), None)
    assert bridge_with_gil.tensor_device(torch.zeros(2), flags=DECLINE) == ((1, 0), None)
    # The device of a tensor whose import will be declined: the import decides that.
    assert bridge_with_gil.tensor_device(torch.nn.Parameter(torch.zeros(2)), flags=DECLINE) == ((1, 0), None)

    class Legacy:  # __dlpack__ but no __dlpack_device__: asked for as a host tensor
        def __init__(self):
            self.a = np.arange(3.0)

        def __dlpack__(self, **kwargs):
            return self.a.__dlpack__(**kwargs)

    assert bridge_with_gil.tensor_device(Legacy(), flags=DECLINE) == ((1, 0), None)
    capsule = np.zeros(2).__dlpack__()
    _, (code, message) = bridge_with_gil.tensor_device(capsule)
    assert code == ERROR_CODE_NOT_DLPACK and "capsule" in message
    _, (declined, _) = bridge_with_gil.tensor_device(capsule, flags=DECLINE)
    assert declined == ERROR_CODE_DECLINED
    _, (code, message) = bridge_with_gil.tensor_device(BadDevice())
    assert code == ERROR_CODE_PRODUCER and "no device today" in message
    _, (declined, _) = bridge_with_gil.tensor_device(BadDevice(), flags=DECLINE)
    assert declined == ERROR_CODE_DECLINED
    _, (code, message) = bridge_with_gil.tensor_device(np.zeros(2), flags=1 << 20)
    assert code == ERROR_CODE_INVALID and "unknown flag bits" in message


def test_tensors_import_as_before_under_the_flag(bridge_with_gil):
    torch = torch_module()
    t = torch.arange(6.0).reshape(2, 3)
    result, error = bridge_with_gil.import_plan(t, options=HOST, flags=DECLINE)
    assert error is None, error
    assert result.plan.kind == PLAN_VIEW and result.plan.parent_address == t.data_ptr()
    bridge_with_gil.release_handle(result.plan.tensor)
    a = np.arange(4.0)
    result, error = bridge_with_gil.import_plan(a, options=HOST, flags=DECLINE | PLAN_WRITABLE_TYPE)
    assert error is None, error
    bridge_with_gil.release_handle(result.plan.tensor)


def test_what_the_request_cannot_take_is_declined(bridge_with_gil):
    t = np.arange(6.0).reshape(2, 3)
    # Another rank (Julia's pyconvert(Array{Float64,3}, t): PythonCall's "not converted").
    _, (code, _) = bridge_with_gil.import_plan(t, PlanOptions.of(ndims=3), options=HOST, flags=CALL_REFUSE_WITHOUT_GIL)
    assert code == ERROR_CODE_BUFFER
    _, (declined, message) = bridge_with_gil.import_plan(t, PlanOptions.of(ndims=3), options=HOST, flags=DECLINE)
    assert declined == ERROR_CODE_DECLINED and "3" in message
    # Another device (a CUDA array asked of a host tensor).
    cuda = ImportOptions(0, 0, 1, 2, 0, -1)
    _, (declined, _) = bridge_with_gil.import_plan(t, PlanOptions.of(target=TARGET_CUDA_ARRAY), options=cuda, flags=DECLINE)
    assert declined == ERROR_CODE_DECLINED
    # Read-only memory for a type with no read-only form.
    r = np.arange(3.0)
    r.flags.writeable = False
    _, (declined, _) = bridge_with_gil.import_plan(r, options=HOST, flags=DECLINE | PLAN_WRITABLE_TYPE)
    assert declined == ERROR_CODE_DECLINED


def test_other_errors_keep_their_codes(bridge_with_gil):
    a = np.arange(3.0)
    bad_target = PlanOptions.of(target=7)
    _, (code, message) = bridge_with_gil.import_plan(a, bad_target, options=HOST, flags=DECLINE)
    assert code == ERROR_CODE_INVALID and "target" in message
    _, (code, message) = bridge_with_gil.import_plan(a, options=HOST, flags=DECLINE | (1 << 20))
    assert code == ERROR_CODE_INVALID and "unknown flag bits" in message
    # Null outputs are the caller's bug, not the object's.
    error = ctypes.c_void_p()
    code = bridge_with_gil.lib.rsdlpack_py_tensor_device(a, DECLINE, None, None, ctypes.byref(error))
    assert code == ERROR_CODE_INVALID
    bridge_with_gil.lib.rsdlpack_error_free(error)
