"""PyTorch as a peer, through the shipped C entry points (ctypes, as Julia's ccall calls them),
and the DLPack 1.3 C exchange API both ways: torch's table consumed by rsdlpack_py_import, and
our exporter's table (rsdlpack.DLPackTensor.__dlpack_c_exchange_api__) consumed by tvm-ffi and
called function by function.

Facts about torch 2.15 these tests pin down (so that a change in torch shows up here):
- `__dlpack__` refuses requires_grad and the conjugate bit (BufferError) but exports a tensor with
  the negative bit as if it were clear; torch's C exchange API checks none of the three. RsDLPack
  refuses all three itself, naming the bit.
- `__dlpack__(copy=True)` copies without setting IS_COPIED.
"""

import ctypes
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is in scripts/requirements.txt")

from rsdlpack_ctypes import (  # noqa: E402
    DLPACK_DTYPES,
    SET_ERROR,
    TENSOR_P,
    DLDataType,
    DLDevice,
    DLTensor,
    ImportOptions,
    adopt,
    exchange_api_of,
    first_element,
    flush,
    imported,
    run_deleter,
    shape_of,
)

READ_ONLY, IS_COPIED = 1, 2
KDLCPU = 1
# (DLPack type code, bits) of every torch dtype with a DLPack and Julia counterpart.
DTYPES = DLPACK_DTYPES


def element_strides(t):
    return list(t.stride())


class NoPythonProtocol(torch.Tensor):
    """A torch tensor whose `__dlpack__` fails: importing it proves the C exchange API served."""

    def __dlpack__(self, *args, **kwargs):
        raise AssertionError("__dlpack__ was called; the C exchange API should have been used")


class NoExchangeApi(torch.Tensor):
    """A torch tensor type that opts out of the C exchange API (None on the type)."""

    __dlpack_c_exchange_api__ = None
    calls = 0

    def __dlpack__(self, *args, **kwargs):
        NoExchangeApi.calls += 1
        return super().__dlpack__(*args, **kwargs)


# ---- torch → RsDLPack -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_every_torch_dtype_imports_zero_copy_through_the_c_api(bridge, name):
    dtype = getattr(torch, name, None)
    if dtype is None:
        pytest.skip(f"this torch has no torch.{name}")
    t = torch.arange(24).reshape(4, 6).to(dtype).as_subclass(NoPythonProtocol)
    tensor = imported(bridge, t)
    c = tensor.contents
    assert (c.dl_tensor.dtype.code, c.dl_tensor.dtype.bits, c.dl_tensor.dtype.lanes) == (*DTYPES[name], 1)
    assert first_element(tensor) == t.data_ptr()
    assert shape_of(tensor) == ([4, 6], [6, 1])
    assert (c.version.major, c.version.minor) == (1, 3)
    assert c.flags == 0
    bridge.release(tensor)


@pytest.mark.parametrize(
    "label, make",
    [
        ("0-d", lambda: torch.tensor(3.5)),
        ("transposed", lambda: torch.arange(12.0).reshape(3, 4).T),
        ("permuted", lambda: torch.arange(24.0).reshape(2, 3, 4).permute(2, 0, 1)),
        ("sliced", lambda: torch.arange(30.0).reshape(5, 6)[1:4, 2:5]),
        ("stepped", lambda: torch.arange(30.0).reshape(5, 6)[::2, ::3]),
        ("storage offset", lambda: torch.arange(10.0).narrow(0, 3, 5)),
        ("offset and transposed", lambda: torch.arange(40.0).reshape(5, 8)[2:, 1:7].T),
        ("size-1 dims", lambda: torch.arange(6.0).reshape(1, 6, 1)[:, 1:4, :]),
        ("32 dims", lambda: torch.arange(2.0).reshape([1] * 31 + [2])),
    ],
)
def test_views_import_at_the_same_address_with_torchs_strides(bridge, label, make):
    t = make().as_subclass(NoPythonProtocol)
    tensor = imported(bridge, t)
    assert first_element(tensor) == t.data_ptr(), label
    assert shape_of(tensor) == (list(t.shape), element_strides(t)), label
    assert tensor.contents.dl_tensor.ndim == t.ndim
    bridge.release(tensor)


def test_empty_tensors_import_with_their_shape(bridge):
    for t in [torch.empty(0), torch.empty(0, 3), torch.empty(4, 0, 2)[:, :, 1:]]:
        tensor = imported(bridge, t.as_subclass(NoPythonProtocol))
        assert shape_of(tensor)[0] == list(t.shape)
        bridge.release(tensor)


def test_more_dimensions_than_rsdlpack_holds_are_refused_by_count(bridge):
    t = torch.zeros([1] * 33)
    assert t.ndim == 33, "torch itself allows 33 dimensions"
    _, (code, message) = bridge.import_(t)
    assert code == 2 and "ndim is 33" in message and "0 to 32" in message, message  # a limit of ours: BufferError


def test_import_holds_torchs_tensor_and_the_deleter_runs_once(bridge, bridge_with_gil):
    t = torch.arange(8.0)
    python_refs = sys.getrefcount(t)
    assert t._use_count() == 1
    tensor = imported(bridge_with_gil, t)
    assert t._use_count() == 2, "the managed tensor holds torch's tensor"
    bridge_with_gil.release(tensor)  # the GIL is held: released at once
    assert t._use_count() == 1, "its deleter ran and released it"
    assert sys.getrefcount(t) == python_refs
    # Released on a thread without the GIL, torch's deleter is deferred, then run exactly once.
    import threading

    tensor = imported(bridge, t)
    worker = threading.Thread(target=bridge.release, args=(tensor,))
    worker.start()
    worker.join(timeout=20)
    assert not worker.is_alive()
    assert t._use_count() == 2 and bridge.lib.rsdlpack_py_pending_releases() == 1
    assert bridge.lib.rsdlpack_py_flush_releases() == 1
    assert t._use_count() == 1


def test_the_python_protocol_serves_types_without_the_api_and_copy_requests(bridge):
    before = NoExchangeApi.calls
    t = torch.arange(6.0).as_subclass(NoExchangeApi)
    tensor = imported(bridge, t)
    assert NoExchangeApi.calls == before + 1, "__dlpack__ was called"
    assert first_element(tensor) == t.data_ptr()
    bridge.release(tensor)

    u = torch.arange(6.0).reshape(2, 3).as_subclass(NoExchangeApi)
    copied = imported(bridge, u, ImportOptions(copy=1))
    assert NoExchangeApi.calls == before + 2, "copy=1 is asked of __dlpack__"
    assert first_element(copied) != u.data_ptr()
    assert copied.contents.flags & IS_COPIED == 0, "torch 2.15 copies without IS_COPIED"
    bridge.release(copied)

    # dl_device=(CPU, 0), what Julia's from_dlpack(Array, ...) asks: served by the C API.
    same = imported(bridge, torch.arange(3.0).as_subclass(NoPythonProtocol), ImportOptions(has_device=1, device_type=KDLCPU, copy=-1))
    bridge.release(same)


def test_requires_grad_is_refused_clearly_as_torch_refuses_it(bridge):
    t = torch.ones(3, requires_grad=True)
    with pytest.raises(BufferError, match="require gradient"):
        t.__dlpack__()
    for options in [None, ImportOptions(copy=1)]:
        _, (code, message) = bridge.import_(t, options)
        assert code == 2, message
        assert "torch.Tensor" in message and "requires grad" in message and "detach()" in message, message
    detached = imported(bridge, t.detach())
    bridge.release(detached)


def test_conj_bit_is_refused_clearly_as_torch_refuses_it(bridge):
    t = torch.tensor([1 + 2j, 3 - 4j]).conj()
    assert t.is_conj()
    with pytest.raises(BufferError, match="conjugate bit"):
        t.__dlpack__()
    _, (code, message) = bridge.import_(t)
    assert code == 2 and "conjugate bit" in message and "resolve_conj()" in message, message
    resolved = imported(bridge, t.resolve_conj())
    bridge.release(resolved)


def test_neg_bit_is_refused_although_torch_exports_it_wrongly(bridge):
    t = torch.tensor([1 + 2j]).conj().imag
    assert t.is_neg() and t.tolist() == [-2.0]
    # torch 2.15 exports the unnegated memory as if the bit were clear: NumPy reads +2.
    assert np.from_dlpack(t).tolist() == [2.0], "torch now resolves the negative bit: revisit"
    _, (code, message) = bridge.import_(t)
    assert code == 2 and "negative bit" in message and "resolve_neg()" in message, message
    resolved = imported(bridge, t.resolve_neg())
    assert ctypes.c_float.from_address(first_element(resolved)).value == -2.0
    bridge.release(resolved)


def test_a_torch_error_in_the_c_api_comes_back_as_a_producer_error(bridge):
    _, (code, message) = bridge.import_(torch.empty(3, device="meta"))
    assert code == 4, message
    assert "managed_tensor_from_py_object_no_sync" in message and "meta" in message, message
    _, (code, message) = bridge.import_(torch.eye(3).to_sparse())
    assert code == 4, message


def test_read_only_wrapper_imports_read_only(bridge):
    dlpack = pytest.importorskip("torch.utils.dlpack")
    if not hasattr(dlpack, "ReadOnlyTensorWrapper"):
        pytest.skip("this torch has no torch.utils.dlpack.ReadOnlyTensorWrapper")
    source = torch.arange(5.0)
    wrapper = dlpack.ReadOnlyTensorWrapper(source)
    # Its type carries torch's const exchange table, not torch.Tensor's.
    assert type(wrapper).__dlpack_c_exchange_api__ is not torch.Tensor.__dlpack_c_exchange_api__
    tensor = imported(bridge, wrapper)
    assert tensor.contents.flags & READ_ONLY
    assert first_element(tensor) == source.data_ptr()
    bridge.release(tensor)


# ---- RsDLPack → torch -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "label, make",
    [
        ("row-major", lambda: np.arange(12, dtype=np.float32).reshape(3, 4)),
        ("column-major (Julia's Array)", lambda: np.asfortranarray(np.arange(12, dtype=np.float64).reshape(3, 4))),
        ("column-major view, stepped", lambda: np.asfortranarray(np.arange(30, dtype=np.int32).reshape(5, 6))[1::2, ::2][:, 1:]),
        ("0-d", lambda: np.array(2.5)),
    ],
)
def test_exports_are_consumed_by_torch_at_the_same_address(bridge, label, make):
    a = make()
    before = sys.getrefcount(a)
    tensor = imported(bridge, a)
    exporter, error = bridge.export(tensor)
    assert error is None, error
    t = torch.from_dlpack(exporter)
    assert t.data_ptr() == a.__array_interface__["data"][0], label
    assert list(t.stride()) == [s // a.itemsize for s in a.strides], label
    assert t.tolist() == a.tolist()
    del t, exporter
    flush(bridge)
    assert sys.getrefcount(a) == before, "the NumPy source was released exactly once"


def test_a_torch_tensor_round_trips_through_the_exporter(bridge):
    t = torch.arange(12.0).reshape(3, 4).T
    tensor = imported(bridge, t)
    exporter, _ = bridge.export(tensor)
    u = torch.from_dlpack(exporter)
    assert u.data_ptr() == t.data_ptr() and u.stride() == t.stride()
    assert t._use_count() == 2
    del u, exporter
    flush(bridge)
    assert t._use_count() == 1


# ---- our exporter's C exchange API ----------------------------------------------------------


def exporter_over(bridge, array):
    exporter, error = bridge.export(imported(bridge, array))
    assert error is None, error
    return exporter


def test_the_exporters_table_is_a_dlpack_1_3_capsule_with_five_functions(bridge):
    exporter = exporter_over(bridge, np.arange(3.0))
    capsule = type(exporter).__dlpack_c_exchange_api__
    assert type(capsule).__name__ == "PyCapsule" and '"dlpack_exchange_api"' in repr(capsule)
    api = exchange_api_of(type(exporter))
    assert (api.header.version.major, api.header.version.minor) == (1, 3)
    assert not api.header.prev_api
    for field in ["managed_tensor_allocator", "managed_tensor_from_py_object_no_sync", "managed_tensor_to_py_object_no_sync", "dltensor_from_py_object_no_sync", "current_work_stream"]:
        assert ctypes.cast(getattr(api, field), ctypes.c_void_p).value, field


def test_tvm_ffi_consumes_the_exporter_through_the_c_api_at_the_same_address(bridge):
    tvm_ffi = pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi is in scripts/requirements.txt")
    a = np.arange(12.0).reshape(3, 4)[:, 1:]
    before = sys.getrefcount(a)
    x = tvm_ffi.from_dlpack(exporter_over(bridge, a))
    assert x.data_ptr() == a.ctypes.data
    assert tuple(x.shape) == a.shape and tuple(x.strides) == (4, 1)
    # A read-only export proves the C API served: tvm-ffi's fallback is the legacy __dlpack__(),
    # which cannot carry READ_ONLY and which our exporter therefore refuses.
    ro = np.arange(4.0)
    ro.flags.writeable = False
    ro_exporter = exporter_over(bridge, ro)
    with pytest.raises(BufferError):
        ro_exporter.__dlpack__()
    y = tvm_ffi.from_dlpack(ro_exporter)
    assert y.data_ptr() == ro.ctypes.data
    del x, y, ro_exporter
    flush(bridge)
    assert sys.getrefcount(a) == before


def test_managed_tensor_from_py_object_gives_what_dunder_dlpack_gives(bridge):
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    a.flags.writeable = False
    before = sys.getrefcount(a)
    exporter = exporter_over(bridge, a)
    api = exchange_api_of(type(exporter))
    out = TENSOR_P()
    assert api.managed_tensor_from_py_object_no_sync(exporter, ctypes.byref(out)) == 0
    c = out.contents
    assert (c.version.major, c.version.minor) == (1, 3)
    assert c.flags & READ_ONLY
    assert first_element(out) == a.ctypes.data and shape_of(out) == ([2, 3], [3, 1])
    del exporter
    flush(bridge)
    assert sys.getrefcount(a) > before, "the managed tensor keeps the source alive"
    run_deleter(out)
    flush(bridge)
    assert sys.getrefcount(a) == before, "its deleter released the source once"
    with pytest.raises(TypeError, match="not an rsdlpack.DLPackTensor"):
        api.managed_tensor_from_py_object_no_sync(np.arange(3.0), ctypes.byref(out))


def test_managed_memory_through_the_c_api_is_ordered_as_cuda_memory_is(bridge):
    """The C API is "no_sync": its consumer orders its streams after current_work_stream, the
    legacy default stream, so the exporter makes CUDA-managed memory ready there as it does CUDA
    memory (as __dlpack__(stream=...) does) — here, without a driver, that is the driver's
    absence, reported and nothing leaked (the fuzz regression
    exchange_api/managed-memory-through-the-c-api-is-not-ordered replays it)."""
    a = np.arange(3.0)
    before = sys.getrefcount(a)
    tensor = imported(bridge, a)
    tensor.contents.dl_tensor.device.device_type = 13  # kDLCUDAManaged
    exporter, error = bridge.export(tensor)
    assert error is None, error
    api = exchange_api_of(type(exporter))
    out = TENSOR_P()
    with pytest.raises(BufferError, match="no CUDA driver"):
        api.managed_tensor_from_py_object_no_sync(exporter, ctypes.byref(out))
    del exporter
    flush(bridge)
    assert sys.getrefcount(a) == before, "the source was released once"


def test_dltensor_from_py_object_is_a_view_while_the_exporter_lives(bridge):
    a = np.arange(24, dtype=np.int16).reshape(4, 6)[1:, ::2]
    exporter = exporter_over(bridge, a)
    api = exchange_api_of(type(exporter))
    view = DLTensor()
    assert api.dltensor_from_py_object_no_sync(exporter, ctypes.byref(view)) == 0
    assert view.data + view.byte_offset == a.ctypes.data
    assert (view.device.device_type, view.ndim) == (KDLCPU, 2)
    assert (view.dtype.code, view.dtype.bits, view.dtype.lanes) == (0, 16, 1)
    assert [view.shape[i] for i in range(2)] == [3, 3]
    assert [view.strides[i] for i in range(2)] == [6, 2]
    ro = np.arange(3.0)
    ro.flags.writeable = False
    with pytest.raises(BufferError, match="read-only"):
        api.dltensor_from_py_object_no_sync(exporter_over(bridge, ro), ctypes.byref(view))


def test_managed_tensor_to_py_object_steals_the_tensor(bridge):
    a = np.arange(5.0)
    before = sys.getrefcount(a)
    api = exchange_api_of(type(exporter_over(bridge, np.arange(1.0))))
    tensor = imported(bridge, a)
    out = ctypes.py_object()
    assert api.managed_tensor_to_py_object_no_sync(tensor, ctypes.byref(out)) == 0
    obj = adopt(out.value)
    assert type(obj).__name__ == "DLPackTensor"
    n = np.from_dlpack(obj)
    assert n.ctypes.data == a.ctypes.data and n.tolist() == a.tolist()
    del n, obj
    flush(bridge)
    assert sys.getrefcount(a) == before, "released once, by the exporter"
    with pytest.raises(ValueError, match="null"):
        api.managed_tensor_to_py_object_no_sync(None, ctypes.byref(out))


def test_managed_tensor_allocator_makes_aligned_host_tensors_and_reports_errors(bridge):
    api = exchange_api_of(type(exporter_over(bridge, np.arange(1.0))))
    errors = []
    set_error = SET_ERROR(lambda ctx, kind, message: errors.append((ctx, kind.decode(), message.decode())))

    def prototype(shape, code=2, bits=32, device_type=KDLCPU):
        shape_array = (ctypes.c_int64 * len(shape))(*shape)
        t = DLTensor(None, DLDevice(device_type, 0), len(shape), DLDataType(code, bits, 1), shape_array, None, 0)
        return t, shape_array

    proto, keep = prototype([3, 5])
    out = TENSOR_P()
    assert api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out), None, set_error) == 0
    assert not errors
    c = out.contents
    assert first_element(out) % 64 == 0
    assert shape_of(out) == ([3, 5], [5, 1])
    assert (c.version.major, c.version.minor, c.flags) == (1, 3, 0)
    assert (c.dl_tensor.device.device_type, c.dl_tensor.dtype.code, c.dl_tensor.dtype.bits) == (KDLCPU, 2, 32)
    values = (ctypes.c_float * 15).from_address(first_element(out))
    assert list(values) == [0.0] * 15, "fresh and zeroed"
    values[14] = 7.0  # writable to its end
    # A consumer (torch) takes it as any managed tensor; its deleter frees the buffer.
    exporter = ctypes.py_object()
    assert api.managed_tensor_to_py_object_no_sync(out, ctypes.byref(exporter)) == 0
    t = torch.from_dlpack(adopt(exporter.value))
    assert t.shape == (3, 5) and t[2, 4].item() == 7.0

    empty, keep = prototype([0, 4])
    assert api.managed_tensor_allocator(ctypes.byref(empty), ctypes.byref(out), None, set_error) == 0
    assert shape_of(out)[0] == [0, 4]
    run_deleter(out)

    cuda, keep = prototype([2], device_type=2)
    assert api.managed_tensor_allocator(ctypes.byref(cuda), ctypes.byref(out), ctypes.c_void_p(1234), set_error) == -1
    assert errors[-1][0] == 1234 and errors[-1][1] == "BufferError" and "host (CPU)" in errors[-1][2]
    negative, keep = prototype([2, -1])
    assert api.managed_tensor_allocator(ctypes.byref(negative), ctypes.byref(out), None, set_error) == -1
    assert errors[-1][1] == "ValueError" and "negative" in errors[-1][2]
    huge, keep = prototype([1 << 40, 1 << 40])
    assert api.managed_tensor_allocator(ctypes.byref(huge), ctypes.byref(out), None, set_error) == -1
    assert "overflows" in errors[-1][2]
    assert api.managed_tensor_allocator(None, ctypes.byref(out), None, set_error) == -1
    assert "prototype" in errors[-1][2]
    assert len(errors) == 4, "set_error is called exactly when -1 is returned"


def test_current_work_stream_is_null_on_the_host_and_refuses_unknown_devices(bridge):
    api = exchange_api_of(type(exporter_over(bridge, np.arange(1.0))))
    stream = ctypes.c_void_p(0xDEAD)
    assert api.current_work_stream(KDLCPU, 0, ctypes.byref(stream)) == 0
    assert stream.value is None
    with pytest.raises(ValueError, match="device type 99"):
        api.current_work_stream(99, 0, ctypes.byref(stream))


def test_our_import_of_our_exporter_takes_our_own_c_api(bridge):
    a = np.arange(4.0)
    a.flags.writeable = False
    exporter = exporter_over(bridge, a)
    # The Python protocol would need max_version for READ_ONLY; the C API always carries it.
    tensor = imported(bridge, exporter)
    assert tensor.contents.flags & READ_ONLY
    assert first_element(tensor) == a.ctypes.data
    bridge.release(tensor)
