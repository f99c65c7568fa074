"""The one-crossing entry points behind Julia's from_dlpack and share (bridges/python/src/c_abi/import_plan.rs, held.rs, share.rs),
called through ctypes as Julia's ccall calls them: one call imports, validates and plans; copies and
releases consume the handle; finalizer releases only queue."""

import ctypes
import sys
import threading

import numpy as np
import pytest

from rsdlpack_ctypes import (CALL_DECLINE_REFUSALS, CALL_REFUSE_WITHOUT_GIL, ELEMENT_CODES, ERROR_CODE_BUFFER,
                             ERROR_CODE_INVALID, ERROR_CODE_NOT_DLPACK, PLAN_COPY, PLAN_EMPTY, PLAN_VIEW,
                             PLAN_WRITABLE_TYPE, ImportOptions, PlanOptions,
                             raw_element_code)

LOADERS = ["bridge", "bridge_with_gil"]


def julia_view(plan, itemsize):
    """What the Julia glue composes from a view plan, in NumPy terms: a column-major parent at
    parent_address, one range per parent dim, then the permutation. Returns the resulting array
    over the same memory (elements as opaque itemsize-byte records)."""
    parent_dims = plan.parent_dims_()
    parent_strides = [itemsize * int(np.prod(parent_dims[:p])) for p in range(plan.ndims)]
    count = int(np.prod(parent_dims)) if plan.ndims else 1
    buffer = (ctypes.c_char * (count * itemsize)).from_address(plan.parent_address)
    offset = sum((start - 1) * stride for (start, _, _), stride in zip(plan.ranges_(), parent_strides))
    view = np.ndarray(shape=[length for _, _, length in plan.ranges_()], dtype=f"V{itemsize}", buffer=buffer,
                      offset=offset, strides=[step * stride for (_, step, _), stride in zip(plan.ranges_(), parent_strides)])
    return view.transpose([p - 1 for p in plan.permutation_()])


def same_elements(julia, a):
    return julia.shape == a.shape and julia.tobytes() == np.ascontiguousarray(a).view(f"V{a.itemsize}").tobytes()


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("make", [
    lambda: np.arange(12, dtype=np.float32).reshape(3, 4),
    lambda: np.asfortranarray(np.arange(12, dtype=np.float64).reshape(3, 4)),
    lambda: np.arange(60, dtype=np.int16).reshape(3, 4, 5)[::-1, 1::2, ::3],
    lambda: np.arange(24, dtype=np.complex64).reshape(2, 3, 4).transpose(2, 0, 1),
    lambda: np.array(7.5),
], ids=["c-order", "f-order", "reversed-stepped", "permuted", "0-d"])
def test_one_call_plans_a_view_over_the_producers_memory(loader, make, request):
    lib = request.getfixturevalue(loader)
    a = make()
    before = sys.getrefcount(a)
    result, error = lib.import_plan(a)
    assert error is None, error
    plan = result.plan
    assert plan.kind == PLAN_VIEW and plan.tensor
    assert plan.element_code == ELEMENT_CODES[a.dtype.name]
    assert (plan.device_type, plan.device_id, plan.read_only) == (1, 0, 0)
    assert plan.dims_() == list(a.shape)
    assert same_elements(julia_view(plan, a.itemsize), a)
    assert bool(plan.needs_permutation) == (plan.permutation_() != list(range(1, a.ndim + 1)))
    assert sys.getrefcount(a) > before
    lib.release_handle(plan.tensor)
    lib.lib.rsdlpack_py_flush_releases()
    assert sys.getrefcount(a) == before


@pytest.mark.parametrize("loader", LOADERS)
def test_a_finalizer_release_only_queues_even_on_the_thread_holding_the_gil(loader, request):
    lib = request.getfixturevalue(loader)
    lib.lib.rsdlpack_py_flush_releases()
    a = np.arange(6.0)
    before = sys.getrefcount(a)
    result, _ = lib.import_plan(a)
    lib.release_later(result.plan.tensor)
    # bridge_with_gil keeps the GIL held across the call, as Julia's main thread does: the
    # producer's deleter (Python code) must still not run inside the release.
    assert sys.getrefcount(a) > before
    assert lib.lib.rsdlpack_py_pending_releases() == 1
    assert lib.lib.rsdlpack_py_flush_releases() == 1
    assert sys.getrefcount(a) == before


def test_queued_releases_drain_at_the_next_import(bridge):
    bridge.lib.rsdlpack_py_flush_releases()
    a = np.arange(3.0)
    before = sys.getrefcount(a)
    first, _ = bridge.import_plan(a)
    worker = threading.Thread(target=bridge.release_later, args=(first.plan.tensor,))
    worker.start()
    worker.join(timeout=20)
    assert not worker.is_alive(), "release_later must not wait for the GIL"
    assert bridge.lib.rsdlpack_py_pending_releases() == 1
    second, _ = bridge.import_plan(np.arange(2.0))
    assert bridge.lib.rsdlpack_py_pending_releases() == 0
    assert sys.getrefcount(a) == before
    bridge.release_handle(second.plan.tensor)
    bridge.lib.rsdlpack_py_flush_releases()


def test_explicit_release_with_the_gil_runs_the_deleter_at_once(bridge_with_gil):
    a = np.arange(5.0)
    before = sys.getrefcount(a)
    result, _ = bridge_with_gil.import_plan(a)
    bridge_with_gil.release_handle(result.plan.tensor)
    assert sys.getrefcount(a) == before
    bridge_with_gil.release_handle(None)  # null is ignored
    bridge_with_gil.release_later(None)


@pytest.mark.parametrize("stream", [-1, 1, 2, 0x7F00])
def test_release_after_a_callers_stream_releases_a_host_tensor_at_once(bridge_with_gil, stream):
    # Host memory: the caller's stream is ignored (no driver call), the deleter runs now.
    a = np.arange(5.0)
    before = sys.getrefcount(a)
    result, _ = bridge_with_gil.import_plan(a)
    assert bridge_with_gil.release_after(result.plan.tensor, stream) is None
    assert sys.getrefcount(a) == before
    assert bridge_with_gil.release_after(None, stream) is None  # null is ignored


def test_release_after_refuses_stream_zero_and_still_releases(bridge_with_gil):
    a = np.arange(5.0)
    before = sys.getrefcount(a)
    result, _ = bridge_with_gil.import_plan(a)
    code, message = bridge_with_gil.release_after(result.plan.tensor, 0)
    assert code == 1 and "stream=0 is disallowed" in message, message
    assert sys.getrefcount(a) == before, "the handle is consumed and released whatever the answer"


def test_release_after_off_the_gil_queues(bridge):
    bridge.lib.rsdlpack_py_flush_releases()
    a = np.arange(5.0)
    before = sys.getrefcount(a)
    result, _ = bridge.import_plan(a)
    # ctypes.CDLL releases the GIL around the call: the release is queued, as off Julia's thread.
    assert bridge.release_after(result.plan.tensor, 0x7F00) is None
    assert bridge.lib.rsdlpack_py_pending_releases() == 1
    assert sys.getrefcount(a) > before
    assert bridge.lib.rsdlpack_py_flush_releases() == 1
    assert sys.getrefcount(a) == before


def test_keeping_a_host_imports_stream_alive_gives_the_root_back_at_once(bridge_with_gil):
    """A host tensor's release records on no stream, so the stream's root (Julia's root of the
    CuStream) comes back at once; the handle is not consumed. The device case needs a handle to
    device memory, which an import cannot give without a driver: the bridge's own tests
    (c_abi::held) and src/cuda/tests_gpu.rs cover it."""
    bridge_with_gil.take_released_roots()
    a = np.arange(5.0)
    before = sys.getrefcount(a)
    result, _ = bridge_with_gil.import_plan(a, options=ImportOptions(has_stream=1, stream=-1, copy=-1))
    bridge_with_gil.keep_stream_alive(result.plan.tensor, 501)
    bridge_with_gil.keep_stream_alive(None, 502)
    assert sorted(bridge_with_gil.take_released_roots()) == [501, 502]
    assert sys.getrefcount(a) > before, "still held"
    bridge_with_gil.release_handle(result.plan.tensor)
    assert sys.getrefcount(a) == before
    assert bridge_with_gil.take_released_roots() == []


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("order", [0, 1])
def test_copies_land_column_major_and_release_the_tensor(loader, order, request):
    lib = request.getfixturevalue(loader)
    a = np.broadcast_to(np.arange(4.0), (3, 4))  # a zero stride: no view exists
    expected = np.array(a if order == 0 else a.T)
    before = sys.getrefcount(a)
    result, error = lib.import_plan(a, PlanOptions.of(order=order))
    assert error is None, error
    plan = result.plan
    assert plan.kind == PLAN_COPY and plan.tensor
    assert plan.dims_() == list(expected.shape)
    buffer = (ctypes.c_double * a.size)()
    assert lib.copy_into(plan.tensor, buffer) is None
    lib.lib.rsdlpack_py_flush_releases()
    assert sys.getrefcount(a) == before
    got = np.frombuffer(buffer, dtype=np.float64).reshape(expected.shape, order="F")
    assert (got == expected).all()


def test_a_copy_into_a_wrong_sized_destination_fails_and_still_releases(bridge):
    a = np.broadcast_to(np.arange(4.0), (3, 4))
    before = sys.getrefcount(a)
    result, _ = bridge.import_plan(a)
    small = (ctypes.c_double * 3)()
    code, message = bridge.copy_into(result.plan.tensor, small)
    assert code == 1 and "holds 24 bytes but the tensor needs 96" in message, message
    bridge.lib.rsdlpack_py_flush_releases()
    assert sys.getrefcount(a) == before


def test_empty_tensors_hold_nothing(bridge):
    a = np.zeros((0, 3, 2), dtype=np.int64)
    before = sys.getrefcount(a)
    result, error = bridge.import_plan(a)
    assert error is None
    assert result.plan.kind == PLAN_EMPTY and not result.plan.tensor
    assert result.plan.dims_() == [0, 3, 2]
    bridge.lib.rsdlpack_py_flush_releases()
    assert sys.getrefcount(a) == before


def test_typed_requests_name_the_mismatch_and_release(bridge):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    before = sys.getrefcount(a)
    _, (code, message) = bridge.import_plan(a, PlanOptions.of(element_code=ELEMENT_CODES["float64"], ndims=2))
    assert code == 2 and "Float32, not the requested Float64" in message, message
    _, (code, message) = bridge.import_plan(a, PlanOptions.of(element_code=ELEMENT_CODES["float32"], ndims=3))
    assert code == 2 and "2 dimensions, not the requested 3" in message, message
    bridge.lib.rsdlpack_py_flush_releases()
    assert sys.getrefcount(a) == before


def test_typed_requests_get_a_plain_array_or_a_copy(bridge):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    typed = dict(element_code=ELEMENT_CODES["float32"], ndims=2, dense=1)
    reversed_, _ = bridge.import_plan(a, PlanOptions.of(order=1, **typed))
    plan = reversed_.plan
    assert plan.kind == PLAN_VIEW and not plan.needs_view and not plan.needs_permutation
    assert plan.parent_address == a.ctypes.data and plan.parent_dims_() == [4, 3]
    bridge.release_handle(plan.tensor)
    producer, _ = bridge.import_plan(a, PlanOptions.of(order=0, **typed))
    assert producer.plan.kind == PLAN_COPY
    bridge.release_handle(producer.plan.tensor)
    _, (code, message) = bridge.import_plan(a, PlanOptions.of(order=0, copy=0, **typed))
    assert code == 2 and "dense array in the requested index order" in message
    bridge.lib.rsdlpack_py_flush_releases()


def test_the_target_device_is_decided_in_rust(bridge):
    a = np.arange(4.0)
    _, (code, message) = bridge.import_plan(a, PlanOptions.of(target=1))
    assert code == 2 and "a CUDA array (CuArray) cannot hold" in message, message
    _, (code, message) = bridge.import_plan(a, PlanOptions.of(target=7))
    assert code == 1 and "target" in message, message
    bridge.lib.rsdlpack_py_flush_releases()


def test_read_only_memory_needs_consent_or_a_copy(bridge):
    a = np.arange(4.0)
    a.flags.writeable = False
    _, (code, message) = bridge.import_plan(a)
    assert code == 2 and "read-only" in message
    accepted, _ = bridge.import_plan(a, PlanOptions.of(readonly=1))
    assert accepted.plan.kind == PLAN_VIEW and accepted.plan.read_only == 1
    bridge.release_handle(accepted.plan.tensor)
    copied, _ = bridge.import_plan(a, PlanOptions.of(copy=1), ImportOptions(copy=1))
    assert copied.plan.kind == PLAN_COPY or copied.plan.read_only == 0
    bridge.release_handle(copied.plan.tensor)
    bridge.lib.rsdlpack_py_flush_releases()


def test_share_exports_julia_style_strides_and_queues_the_root(bridge):
    bridge.take_released_roots()
    backing = np.arange(12, dtype=np.float64)
    # A 3x4 column-major "Julia array" over backing, shared in Julia's index order.
    (exporter, _), = [bridge.share(backing.ctypes.data, [3, 4], [1, 3], ELEMENT_CODES["float64"], root_id=41)[0]]
    seen = np.from_dlpack(exporter)
    assert seen.ctypes.data == backing.ctypes.data
    assert seen.shape == (3, 4) and seen.strides == (8, 24)
    assert (seen == backing.reshape(3, 4, order="F")).all()
    assert bridge.take_released_roots() == []
    del seen, exporter
    import gc
    gc.collect()
    assert bridge.take_released_roots() == [41]
    # The count travels with the next answer, so Julia knows when to take roots without a call.
    (other, released), _ = bridge.share(backing.ctypes.data, [12], [1], ELEMENT_CODES["float64"], root_id=42)
    assert released == 0
    del other
    gc.collect()
    result, _ = bridge.import_plan(np.arange(2.0))
    assert result.released_roots == 1
    assert bridge.take_released_roots() == [42]
    bridge.release_handle(result.plan.tensor)


def test_share_refuses_bad_descriptions_and_still_queues_the_root(bridge):
    bridge.take_released_roots()
    backing = np.arange(4.0)
    _, (code, message) = bridge.share(backing.ctypes.data, [4], [1], 99, root_id=7)
    assert code == 1 and "element code 99" in message
    _, (code, message) = bridge.share(backing.ctypes.data, [-1], [1], ELEMENT_CODES["float64"], root_id=8)
    assert code == 1 and "negative" in message
    assert sorted(bridge.take_released_roots()) == [7, 8]


def test_fp8_keeps_its_dlpack_code_through_a_round_trip(bridge):
    jnp = pytest.importorskip("jax.numpy")
    import jax

    x = jnp.asarray([0.5, 1.0, -2.0, 448.0], dtype=jnp.float8_e4m3fn)
    result, error = bridge.import_plan(x)
    assert error is None, error
    plan = result.plan
    float8_e4m3fn = 10  # kDLFloat8_e4m3fn in dlpack.h 1.1+
    assert plan.element_code == raw_element_code(float8_e4m3fn, 8)
    assert plan.kind == PLAN_VIEW
    raw = bytes((ctypes.c_uint8 * 4).from_address(plan.parent_address))
    assert raw == np.asarray(x).view(np.uint8).tobytes()
    # Share those bytes back as the same element code: JAX sees float8_e4m3fn again.
    (exporter, _), error = bridge.share(plan.parent_address, [4], [1], plan.element_code, root_id=9)
    assert error is None, error
    back = jax.dlpack.from_dlpack(exporter)
    assert back.dtype == jnp.float8_e4m3fn
    assert back.tolist() == x.tolist()
    del back, exporter
    bridge.release_handle(plan.tensor)
    bridge.lib.rsdlpack_py_flush_releases()


def test_the_struct_sizes_match_the_mirrors(bridge):
    from rsdlpack_ctypes import (STRUCT_ID_ARRAY_EXPORT, STRUCT_ID_IMPORT_OPTIONS, STRUCT_ID_IMPORT_RESULT,
                                 STRUCT_ID_PLAN_OPTIONS, STRUCT_ID_SHARE_RESULT, STRUCT_ID_STRIDED_PLAN, ArrayExport,
                                 ImportOptions, ImportResult, ShareResult, StridedPlan)

    numbered = [(STRUCT_ID_IMPORT_OPTIONS, ImportOptions), (STRUCT_ID_PLAN_OPTIONS, PlanOptions),
                (STRUCT_ID_IMPORT_RESULT, ImportResult), (STRUCT_ID_ARRAY_EXPORT, ArrayExport),
                (STRUCT_ID_SHARE_RESULT, ShareResult), (STRUCT_ID_STRIDED_PLAN, StridedPlan)]
    for number, mirror in numbered:
        assert bridge.lib.rsdlpack_struct_size(number) == ctypes.sizeof(mirror), mirror.__name__
    assert bridge.lib.rsdlpack_struct_size(6) == 0
    # The sizes test/abi.jl expects of the Julia mirrors: the header's (julia/abi.jl).
    import pathlib
    import re
    sizes = dict(re.findall(r"^    (Rsdl\w+) = (\d+),$", (pathlib.Path(__file__).parents[2] / "julia" / "abi.jl").read_text(), re.M))
    mirrors = (ImportOptions, PlanOptions, ImportResult, ArrayExport, ShareResult, StridedPlan)
    assert [ctypes.sizeof(s) for s in mirrors] == [int(sizes["Rsdl" + s.__name__]) for s in mirrors]


def plan_fields(plan):
    """What Julia builds an array from, read out of a plan (the handle aside): an empty one's
    dims alone."""
    fields = (plan.kind, plan.element_code, plan.ndims, plan.dims_())
    if plan.kind == PLAN_EMPTY:
        return fields
    return fields + (plan.parent_address, plan.parent_dims_(), plan.ranges_(), plan.permutation_(), plan.read_only)


@pytest.mark.parametrize("loader", LOADERS)
def test_several_tensors_in_one_call_plan_as_one_call_each_plans_them(loader, request):
    """rsdlpack_py_import_plans (a differentiable call's results, in one crossing): each item's
    answer is the one rsdlpack_py_import_plan gives it, a None item's result holds no handle, and
    each handle is released on its own."""
    lib = request.getfixturevalue(loader)
    torch = pytest.importorskip("torch")
    arrays = (np.arange(12, dtype=np.float32).reshape(3, 4), None, torch.arange(6.0).reshape(2, 3).t(),
              np.array(2.5), np.zeros((0, 2)))
    owners = [a for a in arrays if isinstance(a, np.ndarray)]
    before = [sys.getrefcount(a) for a in owners]
    options = PlanOptions.of(order=1)
    results, error = lib.import_plans(arrays, options)
    assert error is None, error
    for k, a in enumerate(arrays):
        if a is None:
            assert not results[k].plan.tensor, "a None item's result holds no handle"
            continue
        single, error = lib.import_plan(a, options)
        assert error is None, error
        assert plan_fields(results[k].plan) == plan_fields(single.plan)
        nonempty = (a.numel() if isinstance(a, torch.Tensor) else a.size) > 0
        assert bool(results[k].plan.tensor) == bool(single.plan.tensor) == nonempty
        lib.release_handle(single.plan.tensor)
    del a
    for result in results:
        lib.release_handle(result.plan.tensor)
    lib.lib.rsdlpack_py_flush_releases()
    assert [sys.getrefcount(a) for a in owners] == before


def test_an_item_that_fails_releases_the_ones_imported_before_it_and_is_named(bridge):
    a, b, c = np.arange(3.0), np.arange(4.0), np.arange(5.0)
    before = [sys.getrefcount(x) for x in (a, b, c)]
    _, (code, message) = bridge.import_plans((a, None, b, [1, 2, 3], c))
    assert code == ERROR_CODE_NOT_DLPACK and message.startswith("item 4 of 5: ") and "list" in message, message
    _, (code, message) = bridge.import_plans((a, np.arange(4, dtype=np.float32)),
                                             PlanOptions.of(element_code=ELEMENT_CODES["float64"]))
    assert code == ERROR_CODE_BUFFER and message.startswith("item 2 of 2: ") and "Float32" in message, message
    bridge.lib.rsdlpack_py_flush_releases()
    assert [sys.getrefcount(x) for x in (a, b, c)] == before


def test_several_tensors_come_in_a_tuple_of_count_items_with_the_flags_one_call_takes(bridge, bridge_with_gil):
    a = np.arange(3.0)
    _, (code, message) = bridge.import_plans([a, a])
    assert code == ERROR_CODE_INVALID and "a tuple" in message and "list" in message, message
    _, (code, message) = bridge.import_plans((a, a, a), count=2)
    assert code == ERROR_CODE_INVALID and "3 items for a count of 2" in message, message
    _, (code, message) = bridge.import_plans((a,), flags=CALL_DECLINE_REFUSALS)
    assert code == ERROR_CODE_INVALID and "rsdlpack_py_import_plans: unknown flag bits" in message, message
    results, error = bridge.import_plans((), count=0)
    assert error is None
    # Julia's flags, the GIL held across the call as Julia holds it.
    results, error = bridge_with_gil.import_plans((a,), flags=CALL_REFUSE_WITHOUT_GIL | PLAN_WRITABLE_TYPE)
    assert error is None and results[0].plan.kind == PLAN_VIEW
    bridge.release_handle(results[0].plan.tensor)
    bridge.lib.rsdlpack_py_flush_releases()
