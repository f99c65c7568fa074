"""rsdlpack_py_import_strided_plan (bridges/python/src/c_abi/strided_plan.rs), called through
ctypes as Julia's `from_dlpack(StridedView, t)` calls it: one call imports, validates and answers
with one flat span over every element the strides reach, the offset of the first element in it
and the strides, for any layout (broadcasts, negative, permuted, stepped, overlapping and
non-nesting strides, empty and 0-d tensors).

Every element is read back from the span, as a StridedView reads its parent, and compared with
the producer's element at the same index, for real NumPy and torch tensors and for random
layouts; the handle is the one `rsdlpack_py_import_plan` returns, released exactly once."""

import ctypes
import gc
import random
import sys

import numpy as np
import pytest

from rsdlpack_abi import (ACCESS_READ_ONLY, COPY_ALWAYS, COPY_NEVER, DENSE_REQUIRED,
                          ERROR_CODE_BUFFER, ERROR_CODE_INVALID, INDEX_ORDER_PRODUCER, INDEX_ORDER_REVERSED,
                          PLAN_WRITABLE_TYPE, TARGET_CUDA_ARRAY)
from rsdlpack_ctypes import (DELETER, ELEMENT_CODES, PLAN_COPY, PLAN_EMPTY, PLAN_VIEW, DLDataType, DLDevice,
                             DLManagedTensorVersioned, DLPackVersion, DLTensor, PlanOptions)

READ_ONLY_FLAG = 1


def reached(plan, index):
    """The span element (0-based) a StridedView reads for 0-based `index`."""
    return plan.offset + sum(i * s for i, s in zip(index, plan.strides_()))


def assert_every_element_is_the_producers(plan, producer, first_element, order=INDEX_ORDER_PRODUCER):
    """`producer` (a NumPy array over the producer's memory, with its indices) read back from
    the plan's span at each index, and the span exactly what the indices reach."""
    assert plan.kind == PLAN_VIEW and plan.tensor
    assert plan.element_code == ELEMENT_CODES[producer.dtype.name]
    assert (plan.device_type, plan.device_id) == (1, 0)
    shape = list(producer.shape)
    assert plan.dims_() == (shape if order == INDEX_ORDER_PRODUCER else shape[::-1])
    assert plan.span_address == first_element + plan.span_byte_offset
    assert plan.span_byte_offset <= 0 <= plan.offset < plan.span_len
    size = producer.itemsize
    positions = []
    for index in np.ndindex(*plan.dims_()):
        position = reached(plan, index)
        assert 0 <= position < plan.span_len, (index, position)
        got = ctypes.string_at(plan.span_address + position * size, size)
        producer_index = index if order == INDEX_ORDER_PRODUCER else index[::-1]
        assert got == producer[producer_index].tobytes(), (index, producer_index)
        positions.append(position)
    assert (min(positions), max(positions)) == (0, plan.span_len - 1), "the span is what the strides reach"


def numpy_cases():
    return {
        "broadcast_to": np.broadcast_to(np.arange(4.0), (3, 4)),
        "broadcast column": np.broadcast_to(np.arange(3, dtype=np.int16)[:, None], (3, 5)),
        "flip": np.flip(np.arange(12, dtype=np.int32).reshape(3, 4), axis=1),
        "reversed and stepped": np.arange(60, dtype=np.float32).reshape(3, 4, 5)[::-1, 1::2, ::-3],
        "permuted": np.arange(24, dtype=np.complex64).reshape(2, 3, 4).transpose(2, 0, 1),
        "stepped": np.arange(40, dtype=np.uint8).reshape(5, 8)[1::2, ::3],
        "overlapping (sliding window)": np.lib.stride_tricks.sliding_window_view(np.arange(8.0), 3),
        "non-nesting": np.lib.stride_tricks.as_strided(np.arange(20.0), shape=(2, 3), strides=(32, 24)),
        "bool": np.array([True, False, True, True])[::-2],
        "0-d": np.array(7.5),
    }


@pytest.mark.parametrize("name", list(numpy_cases()))
def test_numpy_layouts_read_back_element_by_element(bridge_with_gil, name):
    a = numpy_cases()[name]
    before = sys.getrefcount(a)
    plan, error = bridge_with_gil.import_strided_plan(a, PlanOptions.of(readonly=ACCESS_READ_ONLY))
    assert error is None, error
    assert_every_element_is_the_producers(plan, a, a.ctypes.data)
    assert plan.read_only == int(not a.flags.writeable)
    assert sys.getrefcount(a) > before, "the handle holds the producer's tensor"
    bridge_with_gil.release_handle(plan.tensor)
    assert sys.getrefcount(a) == before


@pytest.mark.parametrize("name", ["broadcast_to", "overlapping (sliding window)", "non-nesting"])
def test_what_the_composed_views_copy_is_a_strided_view(bridge_with_gil, name):
    a = numpy_cases()[name]
    result, error = bridge_with_gil.import_plan(a, PlanOptions.of(readonly=ACCESS_READ_ONLY))
    assert error is None, error
    assert result.plan.kind == PLAN_COPY, "rsdlpack_py_import_plan copies this layout"
    bridge_with_gil.release_handle(result.plan.tensor)
    plan, error = bridge_with_gil.import_strided_plan(a, PlanOptions.of(readonly=ACCESS_READ_ONLY, copy=COPY_NEVER))
    assert error is None, error
    assert plan.kind == PLAN_VIEW
    bridge_with_gil.release_handle(plan.tensor)


def test_reversed_order_reverses_dims_and_strides(bridge_with_gil):
    a = np.arange(60, dtype=np.int64).reshape(3, 4, 5)[:, ::-1, 1::2]
    plan, error = bridge_with_gil.import_strided_plan(a, PlanOptions.of(order=INDEX_ORDER_REVERSED))
    assert error is None, error
    assert plan.strides_() == [s // 8 for s in a.strides][::-1]
    assert_every_element_is_the_producers(plan, a, a.ctypes.data, order=INDEX_ORDER_REVERSED)
    bridge_with_gil.release_handle(plan.tensor)


TORCH_CASES = ["expand", "expand middle", "permute", "stepped", "as_strided overlapping", "as_strided non-nesting",
               "storage offset", "0-d"]


def torch_cases(torch):
    base = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    return {
        "expand": torch.arange(4.0, dtype=torch.float64).expand(3, 4),
        "expand middle": torch.arange(3, dtype=torch.int64).reshape(3, 1, 1).expand(3, 2, 4),
        "permute": base.permute(2, 0, 1),
        "stepped": base[:, ::2, 1::3],
        "as_strided overlapping": torch.as_strided(torch.arange(10.0), (3, 4), (1, 2)),
        "as_strided non-nesting": torch.as_strided(torch.arange(20, dtype=torch.int16), (2, 3), (4, 3)),
        "storage offset": torch.arange(30.0).reshape(5, 6)[2:, 3:].t(),
        "0-d": torch.tensor(2.5),
    }


@pytest.mark.parametrize("name", TORCH_CASES)
def test_torch_layouts_read_back_element_by_element(bridge_with_gil, name):
    torch = pytest.importorskip("torch", reason="torch is in scripts/requirements.txt")
    cases = torch_cases(torch)
    assert list(cases) == TORCH_CASES
    t = cases[name]
    plan, error = bridge_with_gil.import_strided_plan(t)
    assert error is None, error
    assert_every_element_is_the_producers(plan, t.numpy(), t.data_ptr())
    assert plan.read_only == 0
    bridge_with_gil.release_handle(plan.tensor)
    assert bridge_with_gil.lib.rsdlpack_py_pending_releases() == 0


def random_layout(rng):
    """A NumPy view of random shape (0-4 dims, extents 0-4) and element strides (-5..5, zero
    included) over a buffer that holds every element it reaches, and that buffer."""
    dtype = rng.choice([np.int8, np.int16, np.float32, np.float64, np.complex128])
    ndim = rng.randint(0, 4)
    shape = [rng.randint(0, 4) for _ in range(ndim)]
    strides = [rng.randint(-5, 5) for _ in range(ndim)]
    below = sum((n - 1) * -s for n, s in zip(shape, strides) if s < 0 and n > 0)
    above = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0 and n > 0)
    base = (np.arange(below + above + 1) * 3 + 1).astype(dtype)
    itemsize = base.itemsize
    view = np.lib.stride_tricks.as_strided(base[below:], shape=shape, strides=[s * itemsize for s in strides])
    return view, base


def test_random_layouts_read_back_element_by_element(bridge_with_gil):
    rng = random.Random(28)
    seen = {"zero": 0, "negative": 0, "empty": 0}
    for _ in range(400):
        view, base = random_layout(rng)
        order = rng.choice([INDEX_ORDER_PRODUCER, INDEX_ORDER_REVERSED])
        plan, error = bridge_with_gil.import_strided_plan(view, PlanOptions.of(order=order))
        assert error is None, (view.shape, view.strides, error)
        element_strides = [s // view.itemsize for s in view.strides]
        if view.size == 0:
            seen["empty"] += 1
            assert plan.kind == PLAN_EMPTY and not plan.tensor and plan.span_len == 0
            assert plan.dims_() == (list(view.shape) if order == INDEX_ORDER_PRODUCER else list(view.shape)[::-1])
            continue
        seen["zero"] += 0 in element_strides
        seen["negative"] += any(s < 0 for s in element_strides)
        assert_every_element_is_the_producers(plan, view, view.ctypes.data, order)
        assert base.ctypes.data <= plan.span_address
        assert plan.span_address + plan.span_len * view.itemsize <= base.ctypes.data + base.nbytes
        bridge_with_gil.release_handle(plan.tensor)
    assert min(seen.values()) >= 20, seen


@pytest.mark.parametrize("make", [lambda: np.zeros((0, 3)), lambda: np.arange(10.0)[5:5],
                                  lambda: np.zeros((2, 0, 4))[::-1]], ids=["0x3", "empty slice", "2x0x4 reversed"])
def test_empty_tensors_hold_nothing(bridge_with_gil, make):
    a = make()
    before = sys.getrefcount(a)
    plan, error = bridge_with_gil.import_strided_plan(a, PlanOptions.of(copy=COPY_ALWAYS))
    assert error is None, error
    assert plan.kind == PLAN_EMPTY and not plan.tensor
    assert (plan.dims_(), plan.span_len, plan.offset) == (list(a.shape), 0, 0)
    column_major = [int(np.prod(a.shape[:k])) for k in range(a.ndim)]
    assert plan.strides_() == column_major, "the strides of the array the caller allocates"
    assert sys.getrefcount(a) == before, "released within the call"


@pytest.mark.parametrize("order", [INDEX_ORDER_PRODUCER, INDEX_ORDER_REVERSED])
def test_a_copy_fills_the_column_major_array_the_plan_describes(bridge_with_gil, order):
    a = np.broadcast_to(np.arange(4.0), (3, 4))
    before = sys.getrefcount(a)
    plan, error = bridge_with_gil.import_strided_plan(a, PlanOptions.of(copy=COPY_ALWAYS, order=order),
                                                      flags=PLAN_WRITABLE_TYPE)
    assert error is None, error
    assert (plan.kind, plan.read_only, plan.span_len, plan.offset) == (PLAN_COPY, 0, 12, 0)
    dims = plan.dims_()
    assert plan.strides_() == [1, dims[0]]
    buffer = (ctypes.c_double * plan.span_len)()
    assert bridge_with_gil.copy_into(plan.tensor, buffer) is None
    assert sys.getrefcount(a) == before, "copy_into released the handle"
    copied = np.frombuffer(buffer, dtype=np.float64).reshape(dims, order="F")
    assert (copied == (a if order == INDEX_ORDER_PRODUCER else a.T)).all()


def misaligned_array():
    buffer = bytearray(8 * 6 + 1)
    a = np.frombuffer(buffer, dtype=np.float64, offset=1, count=6).reshape(2, 3)[:, ::-1]
    a[...] = np.arange(6.0).reshape(2, 3)
    assert not a.flags.aligned
    return a


def test_misaligned_data_is_copied_when_allowed_and_refused_otherwise(bridge_with_gil):
    a = misaligned_array()
    plan, error = bridge_with_gil.import_strided_plan(a)
    assert error is None, error
    assert (plan.kind, plan.dims_(), plan.span_len) == (PLAN_COPY, [2, 3], 6)
    buffer = (ctypes.c_double * 6)()
    assert bridge_with_gil.copy_into(plan.tensor, buffer) is None
    assert np.frombuffer(buffer).reshape(2, 3, order="F").tolist() == a.tolist()
    _, (code, message) = bridge_with_gil.import_strided_plan(a, PlanOptions.of(copy=COPY_NEVER))
    assert code == ERROR_CODE_BUFFER and "misaligned" in message and "Float64" in message, message


def read_only_array():
    a = np.arange(6.0)[::-1]
    a.flags.writeable = False
    return a


def test_read_only_memory_follows_readonly_and_the_writable_type_flag(bridge_with_gil):
    a = read_only_array()
    _, (code, message) = bridge_with_gil.import_strided_plan(a)
    assert code == ERROR_CODE_BUFFER and "read-only" in message, message
    plan, error = bridge_with_gil.import_strided_plan(a, PlanOptions.of(readonly=ACCESS_READ_ONLY))
    assert error is None and plan.read_only == 1
    bridge_with_gil.release_handle(plan.tensor)
    _, (code, message) = bridge_with_gil.import_strided_plan(a, PlanOptions.of(readonly=ACCESS_READ_ONLY),
                                                             flags=PLAN_WRITABLE_TYPE)
    assert code == ERROR_CODE_BUFFER and "no read-only form" in message, message


def test_typed_requests_targets_and_options_are_checked(bridge_with_gil):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    typed = PlanOptions.of(element_code=ELEMENT_CODES["float32"], ndims=2)
    plan, error = bridge_with_gil.import_strided_plan(a, typed)
    assert error is None and plan.dims_() == [2, 3]
    bridge_with_gil.release_handle(plan.tensor)
    _, (code, message) = bridge_with_gil.import_strided_plan(a, PlanOptions.of(element_code=ELEMENT_CODES["float64"]))
    assert code == ERROR_CODE_BUFFER and "not the requested Float64" in message, message
    _, (code, message) = bridge_with_gil.import_strided_plan(a, PlanOptions.of(ndims=3))
    assert code == ERROR_CODE_BUFFER and "not the requested 3" in message, message
    _, (code, message) = bridge_with_gil.import_strided_plan(a, PlanOptions.of(target=TARGET_CUDA_ARRAY))
    assert code == ERROR_CODE_BUFFER and "a CUDA array (CuArray) cannot hold" in message, message
    _, (code, message) = bridge_with_gil.import_strided_plan(a, PlanOptions.of(dense=DENSE_REQUIRED))
    assert code == ERROR_CODE_INVALID and "dense" in message, message
    _, (code, message) = bridge_with_gil.import_strided_plan(a, flags=1 << 20)
    assert code == ERROR_CODE_INVALID and "rsdlpack_py_import_strided_plan: unknown flag bits 0x100000" in message
    _, (code, message) = bridge_with_gil.import_strided_plan([1, 2])
    assert code == 3 and "list" in message, message


class CountedTensor:
    """A hand-made versioned capsule whose deleter counts its calls: that the handle is
    released exactly once, on every path."""

    def __init__(self, shape, strides, dtype=(2, 32), flags=0, byte_offset=0):
        self.deleted = 0
        self.data = ctypes.create_string_buffer(256)
        n = len(shape)
        self.shape = (ctypes.c_int64 * max(n, 1))(*shape)
        self.strides = (ctypes.c_int64 * max(n, 1))(*strides)
        self.deleter = DELETER(self._delete)
        tensor = DLTensor(ctypes.addressof(self.data), DLDevice(1, 0), n, DLDataType(dtype[0], dtype[1], 1),
                          self.shape, self.strides, byte_offset)
        self.managed = DLManagedTensorVersioned(DLPackVersion(1, 3), None,
                                                ctypes.cast(self.deleter, ctypes.c_void_p), flags, tensor)

    def _delete(self, _tensor):
        self.deleted += 1

    def capsule(self):
        new = ctypes.PyDLL(None).PyCapsule_New  # its own handle: ctypes.pythonapi's types stay as they are
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self.managed), b"dltensor_versioned", None)


def test_the_handle_is_released_exactly_once_on_every_path(bridge_with_gil):
    lib = bridge_with_gil
    view = CountedTensor([3, 4], [0, -1], byte_offset=12)   # a broadcast of a reversed row
    plan, error = lib.import_strided_plan(view.capsule())
    assert error is None, error
    assert (plan.kind, plan.span_byte_offset, plan.span_len, plan.offset) == (PLAN_VIEW, -12, 4, 3)
    assert view.deleted == 0, "held"
    lib.release_handle(plan.tensor)
    assert view.deleted == 1

    queued = CountedTensor([2, 2], [1, 1])
    plan, _ = lib.import_strided_plan(queued.capsule())
    lib.release_later(plan.tensor)
    assert queued.deleted == 0 and lib.lib.rsdlpack_py_pending_releases() == 1
    lib.lib.rsdlpack_py_flush_releases()
    assert queued.deleted == 1

    copied = CountedTensor([2, 3], [3, 1])
    plan, _ = lib.import_strided_plan(copied.capsule(), PlanOptions.of(copy=COPY_ALWAYS))
    assert plan.kind == PLAN_COPY and copied.deleted == 0
    assert lib.copy_into(plan.tensor, (ctypes.c_float * 6)()) is None
    assert copied.deleted == 1

    empty = CountedTensor([0, 3], [3, 1])
    plan, _ = lib.import_strided_plan(empty.capsule())
    assert plan.kind == PLAN_EMPTY and not plan.tensor and empty.deleted == 1

    read_only = CountedTensor([4], [1], flags=READ_ONLY_FLAG)
    _, (code, _) = lib.import_strided_plan(read_only.capsule())
    assert code == ERROR_CODE_BUFFER and read_only.deleted == 1, "refused: released within the call"

    packed = CountedTensor([8], [1], dtype=(17, 4))   # packed fp4 (float4_e2m1fn), two a byte
    _, (code, message) = lib.import_strided_plan(packed.capsule())
    assert code == ERROR_CODE_BUFFER and "smaller than a byte" in message and "from_dlpack(Array, t)" in message
    assert packed.deleted == 1
    # The composed planner takes the same compact packed tensor, as bytes.
    bytes_ = CountedTensor([8], [1], dtype=(17, 4))
    result, error = lib.import_plan(bytes_.capsule())
    assert error is None and result.plan.kind == PLAN_VIEW and result.plan.element_code == ELEMENT_CODES["uint8"]
    lib.release_handle(result.plan.tensor)
    assert bytes_.deleted == 1
    assert lib.lib.rsdlpack_py_pending_releases() == 0


def test_a_strided_plan_shares_back_as_the_same_tensor(bridge_with_gil):
    """What Julia's `share(::StridedView)` passes (the view's pointer, size and strides) for
    a plan of each awkward layout: the consumer sees the producer's elements."""
    lib = bridge_with_gil
    lib.take_released_roots()
    for root, a in enumerate([numpy_cases()["broadcast_to"], numpy_cases()["non-nesting"],
                              numpy_cases()["overlapping (sliding window)"], numpy_cases()["reversed and stepped"]],
                             start=2800):
        plan, error = lib.import_strided_plan(a, PlanOptions.of(readonly=ACCESS_READ_ONLY))
        assert error is None, error
        pointer = plan.span_address + plan.offset * a.itemsize
        (exporter, _), error = lib.share(pointer, plan.dims_(), plan.strides_(), plan.element_code, root_id=root,
                                         read_only=plan.read_only)
        assert error is None, error
        back = np.from_dlpack(exporter)
        assert back.ctypes.data == a.ctypes.data and back.strides == a.strides
        assert (back == a).all() and back.flags.writeable == a.flags.writeable
        del back, exporter
        gc.collect()
        assert lib.take_released_roots() == [root]
        lib.release_handle(plan.tensor)

