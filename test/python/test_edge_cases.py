"""Protocol edge cases (issue #10) through the C entry points, as Julia's ccall reaches them,
with the real NumPy as producer and consumer: misaligned tensors, device types DLPack does not
define, CUDA tensors without a driver, and what legacy or older versioned consumers are given."""

import ctypes
import gc
import sys

import numpy as np
import pytest

from rsdlpack_ctypes import (
    ACCEPT_UNKNOWN_DEVICE_TYPES, BUFFER, ELEMENT_CODES, INVALID, PLAN_VIEW, SET_ERROR, TENSOR_P, DLDataType, DLDevice,
    DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor, capsule_pointer, exchange_api_of, first_element,
    run_deleter, shape_of,
)

IS_SUBBYTE_TYPE_PADDED = 4


def misaligned_array():
    buffer = bytearray(8 * 6 + 1)
    a = np.frombuffer(buffer, dtype=np.float64, offset=1, count=6).reshape(2, 3)
    a[...] = np.arange(6.0).reshape(2, 3) + 0.5
    assert not a.flags.aligned and a.ctypes.data % 8 == 1
    return a


def capsule_contents(capsule):
    """The version and flags of the tensor inside an unconsumed versioned capsule, read in
    place (the capsule keeps it; importing would re-wrap it under the current version)."""
    managed = ctypes.cast(capsule_pointer(capsule, b"dltensor_versioned"), TENSOR_P).contents
    return (managed.version.major, managed.version.minor), managed.flags


def exporter_of(bridge, array, edit=None):
    """Imports `array` through the bridge, lets `edit` change the raw tensor, and exports it."""
    tensor, error = bridge.import_(array)
    assert error is None, error
    if edit is not None:
        edit(tensor.contents)
    exporter, error = bridge.export(tensor)
    assert error is None, error
    return exporter


def test_a_misaligned_numpy_array_imports_zero_copy(bridge):
    a = misaligned_array()
    tensor, error = bridge.import_(a)
    assert error is None, "misalignment is the planner's question, not a validation error"
    assert first_element(tensor) == a.ctypes.data
    assert shape_of(tensor) == ([2, 3], [3, 1])
    bridge.release(tensor)
    bridge.lib.rsdlpack_py_flush_releases()


def test_a_misaligned_tensor_is_exported_truthfully(bridge):
    a = misaligned_array()
    exporter = exporter_of(bridge, a)
    view = np.from_dlpack(exporter)
    assert view.ctypes.data == a.ctypes.data and not view.flags.aligned
    assert view.tolist() == a.tolist()
    copy = np.from_dlpack(exporter, copy=True)
    assert copy.flags.aligned and copy.ctypes.data % 64 == 0
    assert copy.tolist() == a.tolist()
    del view, copy, exporter
    gc.collect()
    bridge.lib.rsdlpack_py_flush_releases()


def set_device_type(device_type):
    def edit(managed):
        managed.dl_tensor.device.device_type = device_type

    return edit


@pytest.mark.parametrize("device_type", [0, 99])
def test_unknown_device_types_are_refused_unless_opted_in(bridge, device_type):
    a = np.arange(4.0)
    exporter = exporter_of(bridge, a, set_device_type(device_type))
    assert exporter.__dlpack_device__() == (device_type, 0)

    _, (code, message) = bridge.import_(exporter)
    assert code == BUFFER, message
    assert message.startswith(f"device type {device_type} "), message
    capsule = exporter.__dlpack__(max_version=(1, 3))
    _, (code, message) = bridge.import_(capsule)
    assert code == BUFFER and f"device type {device_type}" in message, message

    tensor, error = bridge.import_(exporter, flags=ACCEPT_UNKNOWN_DEVICE_TYPES)
    assert error is None, error
    assert tensor.contents.dl_tensor.device.device_type == device_type
    assert first_element(tensor) == a.ctypes.data
    bridge.release(tensor)

    _, (code, message) = bridge.import_(exporter, flags=1 << 7)
    assert code == INVALID and "unknown flag bits 0x80" in message, message
    del exporter, capsule
    gc.collect()
    bridge.lib.rsdlpack_py_flush_releases()


def test_without_a_driver_a_cuda_import_leads_with_the_cause(bridge):
    if bridge.lib.rsdlpack_cuda_driver_available() == 1:
        pytest.skip("a CUDA driver is present; test/gpu/check_gpu.py covers this machine")
    exporter = exporter_of(bridge, np.arange(4.0), set_device_type(2))
    # stream=-1: no synchronisation asked, so the exporter makes no driver call; the importer's
    # pointer check is what needs the driver.
    capsule = exporter.__dlpack__(max_version=(1, 3), stream=-1)
    _, (code, message) = bridge.import_(capsule)
    assert code == BUFFER, message
    assert message.startswith("no CUDA driver"), message
    assert "does not know address" not in message, message


def padded_fp4(managed):
    managed.dl_tensor.dtype.code = 17
    managed.dl_tensor.dtype.bits = 4
    managed.flags |= IS_SUBBYTE_TYPE_PADDED


def test_legacy_consumers_are_refused_padded_subbyte_tensors(bridge):
    exporter = exporter_of(bridge, np.zeros(4, dtype=np.uint8), padded_fp4)
    with pytest.raises(BufferError, match=r"IS_SUBBYTE_TYPE_PADDED.*ask with max_version=\(1, x\)"):
        exporter.__dlpack__()
    version, flags = capsule_contents(exporter.__dlpack__(max_version=(1, 1)))
    assert version == (1, 1)
    assert flags & IS_SUBBYTE_TYPE_PADDED


def test_versioned_exports_need_a_max_version_that_covers_their_dtype(bridge):
    def fp8(managed):
        managed.dl_tensor.dtype.code = 10  # float8_e4m3fn, DLPack 1.1

    exporter = exporter_of(bridge, np.zeros(4, dtype=np.uint8), fp8)
    with pytest.raises(BufferError, match=r"needs DLPack 1\.1.*max_version=\(1, 1\)"):
        exporter.__dlpack__(max_version=(1, 0))
    for asked, claimed in [((1, 1), (1, 1)), ((1, 2), (1, 2)), ((1, 9), (1, 3)), ((2, 0), (1, 3))]:
        version, _ = capsule_contents(exporter.__dlpack__(max_version=asked))
        assert version == claimed, asked
    plain = exporter_of(bridge, np.arange(3.0))
    assert capsule_contents(plain.__dlpack__(max_version=(1, 0)))[0] == (1, 0)
    del exporter, plain
    gc.collect()
    bridge.lib.rsdlpack_py_flush_releases()


def test_bcomplex_travels_both_ways_and_needs_dlpack_1_3(bridge):
    """kDLBcomplex (code 18, complex of two bfloat16; after DLPack 1.3): planned as its own
    element, exported only to consumers that accept 1.3, like the other post-1.0 codes."""
    def bcomplex(managed):
        managed.dl_tensor.dtype.code = 18  # same 32 bits as the float32 it was

    source = np.arange(4, dtype=np.float32)
    exporter = exporter_of(bridge, source, bcomplex)
    with pytest.raises(BufferError, match=r"kDLBcomplex.*needs DLPack 1\.3.*max_version=\(1, 3\)"):
        exporter.__dlpack__(max_version=(1, 2))
    version, _ = capsule_contents(exporter.__dlpack__(max_version=(1, 3)))
    assert version == (1, 3)
    result, error = bridge.import_plan(exporter)
    assert error is None, error
    plan = result.plan
    assert (plan.kind, plan.element_code, plan.dims_()) == (PLAN_VIEW, ELEMENT_CODES["bcomplex"], [4])
    assert plan.parent_address == source.ctypes.data
    bridge.release_handle(plan.tensor)
    del exporter
    gc.collect()
    bridge.lib.rsdlpack_py_flush_releases()


def test_every_managed_tensor_we_hand_out_names_its_owner(bridge):
    """dlpack.h allows a NULL manager_ctx, but PaddlePaddle never calls the deleter of such a
    tensor (test_paddle.py): every tensor RsDLPack makes carries its owner's address there."""

    backing = np.arange(6.0)
    (shared, _), error = bridge.share(backing.ctypes.data, [2, 3], [1, 2], ELEMENT_CODES["float64"], root_id=1)
    assert error is None, error
    forwarded, error = bridge.import_(np.arange(3.0))
    assert error is None, error
    api = exchange_api_of(type(shared))
    through_api = TENSOR_P()
    assert api.managed_tensor_from_py_object_no_sync(shared, ctypes.byref(through_api)) == 0
    shape = (ctypes.c_int64 * 1)(4)
    prototype = DLTensor(None, (1, 0), 1, (2, 32, 1), shape, None, 0)
    allocated = TENSOR_P()
    assert api.managed_tensor_allocator(ctypes.byref(prototype), ctypes.byref(allocated), None, SET_ERROR()) == 0
    versioned = shared.__dlpack__(max_version=(1, 3))
    legacy = shared.__dlpack__()
    contexts = {
        "rsdlpack_py_import": forwarded.contents.manager_ctx,
        "managed_tensor_from_py_object_no_sync": through_api.contents.manager_ctx,
        "managed_tensor_allocator": allocated.contents.manager_ctx,
        "a versioned capsule": ctypes.cast(capsule_pointer(versioned, b"dltensor_versioned"), TENSOR_P).contents.manager_ctx,
        "a legacy capsule": ctypes.cast(capsule_pointer(legacy, b"dltensor"), ctypes.POINTER(DLManagedTensor)).contents.manager_ctx,
    }
    assert all(contexts.values()), contexts
    for tensor in [forwarded, through_api, allocated]:
        run_deleter(tensor)
    del shared, versioned, legacy
    gc.collect()
    bridge.lib.rsdlpack_py_flush_releases()
    bridge.take_released_roots()


def test_the_ctypes_client_survives_a_peer_that_retypes_ctypes_pythonapi(bridge, monkeypatch):
    """NVIDIA Warp sets ctypes.pythonapi.Py_DecRef.argtypes for the whole process; the ctypes
    client (rsdlpack_ctypes.PYTHON_API) types its own handle, so another library's choice
    changes nothing here."""
    monkeypatch.setattr(ctypes.pythonapi.Py_DecRef, "argtypes", [ctypes.c_void_p])
    monkeypatch.setattr(ctypes.pythonapi.PyCapsule_GetPointer, "restype", ctypes.c_int)
    backing = np.arange(3.0)
    (shared, _), error = bridge.share(backing.ctypes.data, [3], [1], ELEMENT_CODES["float64"], root_id=2)
    assert error is None, error
    assert np.from_dlpack(shared).tolist() == backing.tolist()
    assert exchange_api_of(type(shared)).header.version.major == 1
    refs = sys.getrefcount(shared)
    del shared
    gc.collect()
    assert refs == 2, "one reference: ours (the entry point's was given back)"


def hand_made_capsule(shape, strides, code, bits, keep):
    """An unconsumed DLPack 1.3 capsule over a tensor built here (no deleter: nothing to free);
    `keep` holds what it points to for as long as the test needs it."""
    shape_ = (ctypes.c_int64 * len(shape))(*shape)
    strides_ = (ctypes.c_int64 * len(strides))(*strides)
    data = ctypes.create_string_buffer(64)
    tensor = DLTensor(ctypes.addressof(data), DLDevice(1, 0), len(shape), DLDataType(code, bits, 1), shape_, strides_, 0)
    managed = DLManagedTensorVersioned(DLPackVersion(1, 3), None, None, 0, tensor)
    keep.extend([shape_, strides_, data, managed])
    new = ctypes.PyDLL(None).PyCapsule_New  # its own handle: ctypes.pythonapi's types stay as they are
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(managed), b"dltensor_versioned", None)


@pytest.mark.parametrize("shape", [[3, 2**62], [2**63 - 1, 2]], ids=["3x2^62", "int64max x2"])
def test_packed_fp4_element_counts_past_int64_are_refused(bridge, shape):
    """Their bytes fit in isize (3·2⁶¹ and isize::MAX), their element counts do not: the second
    is negative as an int64. Refused as every extent past isize::MAX is, by both entry points."""
    strides = [shape[1], 1]
    keep = []
    _, (code, message) = bridge.import_(hand_made_capsule(shape, strides, 17, 4, keep))
    assert code == INVALID and "too large to address" in message, message
    _, (code, message) = bridge.import_plan(hand_made_capsule(shape, strides, 17, 4, keep))
    assert code == INVALID and "too large to address" in message, message
    # The largest count that fits is accepted (a compact fp4 row of int64-max elements).
    result, error = bridge.import_plan(hand_made_capsule([2**63 - 1, 1], [1, 1], 17, 4, keep))
    assert error is None, error
    plan = result.plan
    assert (plan.kind, plan.element_code, plan.dims_()) == (PLAN_VIEW, ELEMENT_CODES["uint8"], [2**62]), "packed into bytes"
    bridge.release_handle(plan.tensor)
    gc.collect()
    bridge.lib.rsdlpack_py_flush_releases()
    del keep
