"""A result type with no read-only form (Julia's typed Array{T,N} and CuArray{T,N}): the plan
request says so (RSDLPACK_PLAN_WRITABLE_TYPE), and the core refuses a view of read-only memory
even where `readonly` accepts one, or copies it when asked to (copy=1). Producers: a NumPy
array with writeable=False and torch's ReadOnlyTensorWrapper, both exported READ_ONLY."""

import numpy as np
import pytest

from rsdlpack_abi import (ACCESS_READ_ONLY, COPY_ALWAYS, DENSE_REQUIRED, ERROR_CODE_BUFFER,
                          PLAN_WRITABLE_TYPE, TARGET_CUDA_ARRAY)
from rsdlpack_ctypes import ELEMENT_CODES, PLAN_COPY, PLAN_VIEW, PlanOptions


def typed(copy=-1, target=0):
    """What from_dlpack(Array{Float32,1}, x; readonly=true) asks (readonly: accepted)."""
    return PlanOptions.of(element_code=ELEMENT_CODES["float32"], ndims=1, target=target, copy=copy,
                          readonly=ACCESS_READ_ONLY, dense=DENSE_REQUIRED)


def read_only_numpy():
    a = np.arange(6, dtype=np.float32)
    a.flags.writeable = False
    return a


def read_only_torch():
    torch = pytest.importorskip("torch", reason="torch is in scripts/requirements.txt")
    dlpack = pytest.importorskip("torch.utils.dlpack")
    if not hasattr(dlpack, "ReadOnlyTensorWrapper"):
        pytest.skip("this torch has no torch.utils.dlpack.ReadOnlyTensorWrapper")
    return dlpack.ReadOnlyTensorWrapper(torch.arange(6, dtype=torch.float32))


@pytest.mark.parametrize("make", [read_only_numpy, read_only_torch], ids=["numpy", "torch"])
def test_a_writable_type_refuses_read_only_memory_unless_copied(bridge, make):
    source = make()
    # Without the flag the same request is a read-only view (the untyped forms wrap it).
    result, error = bridge.import_plan(source, typed())
    assert error is None, error
    assert result.plan.kind == PLAN_VIEW and result.plan.read_only == 1
    bridge.release_handle(result.plan.tensor)

    _, (code, message) = bridge.import_plan(source, typed(), flags=PLAN_WRITABLE_TYPE)
    assert code == ERROR_CODE_BUFFER, message
    assert "no read-only form" in message and "ReadOnlyArray{T,N}" in message and "copy=true" in message

    result, error = bridge.import_plan(source, typed(copy=COPY_ALWAYS), flags=PLAN_WRITABLE_TYPE)
    assert error is None, error
    assert result.plan.kind == PLAN_COPY and result.plan.read_only == 0
    bridge.release_handle(result.plan.tensor)


def test_writable_memory_is_viewed_under_the_flag(bridge):
    a = np.arange(6, dtype=np.float32)
    result, error = bridge.import_plan(a, typed(), flags=PLAN_WRITABLE_TYPE)
    assert error is None, error
    assert result.plan.kind == PLAN_VIEW and result.plan.read_only == 0
    assert result.plan.parent_address == a.ctypes.data
    bridge.release_handle(result.plan.tensor)


def test_a_cuda_target_is_refused_host_memory_first(bridge):
    # Without a GPU: a CUDA target's plan sees host memory and says so before read-only matters
    # (src/layout/tests_target.rs holds the CUDA case itself: refused, and copy=1 refused too).
    _, (code, message) = bridge.import_plan(read_only_numpy(), typed(target=TARGET_CUDA_ARRAY),
                                            flags=PLAN_WRITABLE_TYPE)
    assert code == ERROR_CODE_BUFFER and "a CUDA array (CuArray) cannot hold" in message
