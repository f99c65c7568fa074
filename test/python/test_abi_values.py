"""The option values the C header names mean to the entry points what their names say.

`RsdlCopy`, `RsdlIndexOrder`, `RsdlTarget`, `RsdlAccess`, `RsdlDense` and `RSDLPACK_PLAN_ANY`
reach Julia and ctypes as generated constants (rsdlpack_abi.py, from include/rsdlpack.h); the
Rust parsers of the option fields (bridges/python/src/c_abi/managed.rs, import_plan.rs, share.rs) match on numbers. These
tests pass every value by its name, so a value renumbered on one side alone fails here (the
tests elsewhere pass the numbers themselves, which pins them)."""

import gc

import numpy as np
import pytest

from rsdlpack_ctypes import ELEMENT_CODES, ImportOptions, PlanOptions, first_element
from rsdlpack_abi import (ACCESS_READ_ONLY, ACCESS_WRITABLE, COPY_ALWAYS, COPY_IF_NEEDED, COPY_NEVER,
                          DENSE_ANY_LAYOUT, DENSE_REQUIRED, ELEMENT_CODE_FLOAT32, ERROR_CODE_BUFFER,
                          ERROR_CODE_INVALID, INDEX_ORDER_PRODUCER, INDEX_ORDER_REVERSED, PLAN_ANY, PLAN_KIND_COPY,
                          PLAN_KIND_VIEW, TARGET_CUDA_ARRAY, TARGET_HOST_ARRAY)
import rsdlpack_abi


def named(prefix):
    """{name: value} of the generated constants named `prefix…`."""
    return {name: value for name, value in vars(rsdlpack_abi).items() if name.startswith(prefix)}


def plan(bridge, array, import_options=None, **plan_options):
    """(plan kind, dims, read_only) or (None, error code, message); the tensor is released."""
    result, error = bridge.import_plan(array, PlanOptions.of(**plan_options), import_options)
    if error is not None:
        return None, *error
    p = result.plan
    if p.tensor:
        bridge.release_handle(p.tensor)
    return p.kind, p.dims_(), p.read_only


@pytest.fixture
def c_order():
    """3×4, row-major: a view in either order, dense only in the reversed one."""
    return np.arange(12, dtype=np.float32).reshape(3, 4)


def test_each_enum_names_its_values_from_zero_or_minus_one():
    assert named("COPY_") == {"COPY_IF_NEEDED": -1, "COPY_NEVER": 0, "COPY_ALWAYS": 1}
    for prefix in ("INDEX_ORDER_", "TARGET_", "ACCESS_", "DENSE_"):
        assert sorted(named(prefix).values()) == [0, 1], prefix


def test_copy_as_named(bridge, c_order):
    broadcast = np.broadcast_to(np.arange(4.0), (3, 4))   # a zero stride: only a copy will do
    assert plan(bridge, c_order, copy=COPY_IF_NEEDED)[0] == PLAN_KIND_VIEW
    assert plan(bridge, c_order, copy=COPY_ALWAYS)[0] == PLAN_KIND_COPY
    assert plan(bridge, broadcast, copy=COPY_IF_NEEDED)[0] == PLAN_KIND_COPY
    assert plan(bridge, broadcast, copy=COPY_NEVER)[:2] == (None, ERROR_CODE_BUFFER)
    assert plan(bridge, c_order, copy=COPY_ALWAYS + 1)[:2] == (None, ERROR_CODE_INVALID)
    # RsdlImportOptions.copy, Python's copy= to the producer (NumPy honours it).
    for copy, same_memory in ((COPY_IF_NEEDED, True), (COPY_NEVER, True), (COPY_ALWAYS, False)):
        tensor, error = bridge.import_(c_order, ImportOptions(copy=copy))
        assert error is None, (copy, error)
        assert (first_element(tensor) == c_order.ctypes.data) == same_memory, copy
        bridge.release(tensor)
    _, (code, message) = bridge.import_(c_order, ImportOptions(copy=COPY_ALWAYS + 1))
    assert code == ERROR_CODE_INVALID and "copy must be" in message, message
    bridge.lib.rsdlpack_py_flush_releases()


def test_index_order_as_named(bridge, c_order):
    assert plan(bridge, c_order, order=INDEX_ORDER_PRODUCER)[:2] == (PLAN_KIND_VIEW, [3, 4])
    assert plan(bridge, c_order, order=INDEX_ORDER_REVERSED)[:2] == (PLAN_KIND_VIEW, [4, 3])
    assert plan(bridge, c_order, order=INDEX_ORDER_REVERSED + 1)[:2] == (None, ERROR_CODE_INVALID)
    # RsdlArrayExport.order: a 3×4 column-major "Julia array".
    backing = np.arange(12.0)
    for order, shape in ((INDEX_ORDER_PRODUCER, (3, 4)), (INDEX_ORDER_REVERSED, (4, 3))):
        (exporter, _), error = bridge.share(backing.ctypes.data, [3, 4], [1, 3], ELEMENT_CODES["float64"],
                                            root_id=60 + order, order=order)
        assert error is None, error
        assert np.from_dlpack(exporter).shape == shape
        del exporter
    _, (code, _) = bridge.share(backing.ctypes.data, [3, 4], [1, 3], ELEMENT_CODES["float64"], root_id=62,
                                order=INDEX_ORDER_REVERSED + 1)
    assert code == ERROR_CODE_INVALID
    gc.collect()
    assert sorted(bridge.take_released_roots()) == [60, 61, 62]


def test_target_as_named(bridge, c_order):
    assert plan(bridge, c_order, target=TARGET_HOST_ARRAY)[0] == PLAN_KIND_VIEW
    refused = plan(bridge, c_order, target=TARGET_CUDA_ARRAY)
    assert refused[:2] == (None, ERROR_CODE_BUFFER) and "CuArray" in refused[2], refused
    assert plan(bridge, c_order, target=TARGET_CUDA_ARRAY + 1)[:2] == (None, ERROR_CODE_INVALID)
    bridge.lib.rsdlpack_py_flush_releases()


def test_access_as_named(bridge, c_order):
    c_order.flags.writeable = False
    assert plan(bridge, c_order, readonly=ACCESS_WRITABLE)[:2] == (None, ERROR_CODE_BUFFER)
    assert plan(bridge, c_order, readonly=ACCESS_READ_ONLY) == (PLAN_KIND_VIEW, [3, 4], 1)
    # RsdlArrayExport.read_only: DLPack's READ_ONLY flag, which NumPy honours.
    backing = np.arange(4.0)
    for access, writeable in ((ACCESS_WRITABLE, True), (ACCESS_READ_ONLY, False)):
        (exporter, _), error = bridge.share(backing.ctypes.data, [4], [1], ELEMENT_CODES["float64"],
                                            root_id=70 + access, read_only=access)
        assert error is None, error
        assert np.from_dlpack(exporter).flags.writeable == writeable, access
        del exporter
    gc.collect()
    assert sorted(bridge.take_released_roots()) == [70, 71]
    bridge.lib.rsdlpack_py_flush_releases()


def test_dense_and_any_as_named(bridge, c_order):
    untyped = dict(element_code=PLAN_ANY, ndims=PLAN_ANY)
    assert plan(bridge, c_order, dense=DENSE_ANY_LAYOUT, **untyped)[:2] == (PLAN_KIND_VIEW, [3, 4])
    assert plan(bridge, c_order, dense=DENSE_REQUIRED, **untyped)[:2] == (PLAN_KIND_COPY, [3, 4])
    typed = dict(element_code=ELEMENT_CODE_FLOAT32, ndims=2, dense=DENSE_REQUIRED)
    assert plan(bridge, c_order, order=INDEX_ORDER_REVERSED, **typed)[:2] == (PLAN_KIND_VIEW, [4, 3])
    assert plan(bridge, c_order, element_code=PLAN_ANY - 1)[:2] == (None, ERROR_CODE_INVALID)
    assert plan(bridge, c_order, ndims=PLAN_ANY - 1)[:2] == (None, ERROR_CODE_INVALID)
    bridge.lib.rsdlpack_py_flush_releases()
