"""array-api-strict (the Array API's reference implementation) as a peer, through the shipped C
entry points (ctypes, as Julia's ccall calls them): a producer through `__dlpack__` (its array
type has no C exchange API, and is not a NumPy array), and a consumer of our exports through
its `from_dlpack`.

Facts about array-api-strict 2.6 these tests pin down: its `__dlpack__` hands on NumPy's
capsule (so READ_ONLY and IS_COPIED are NumPy's); set to an Array API version before 2023.12 it
refuses `max_version` with ValueError, not the TypeError that the DLPack protocol's retry rule
expects, so neither NumPy's `from_dlpack` nor ours imports it.
"""

import gc
import sys

import numpy as np
import pytest

xp = pytest.importorskip("array_api_strict", reason="array-api-strict is in scripts/requirements.txt")

from rsdlpack_ctypes import (ACCESS_READ_ONLY, PRODUCER, ImportOptions, first_element, flush,  # noqa: E402
                             forget_earlier_roots, imported, shape_of)
from rsdlpack_ctypes import share_numpy as share  # noqa: E402

READ_ONLY, IS_COPIED = 1, 2
KDLCPU = 1


def numpy_of(array):
    """The NumPy array an array-api-strict array wraps (where its memory lives)."""
    return np.asarray(array._array)


# ---- array-api-strict → RsDLPack ------------------------------------------------------------


@pytest.mark.parametrize(
    "label, make",
    [
        ("row-major", lambda: xp.reshape(xp.arange(12, dtype=xp.float32), (3, 4))),
        ("transposed", lambda: xp.permute_dims(xp.reshape(xp.arange(12, dtype=xp.float64), (3, 4)), (1, 0))),
        ("reversed", lambda: xp.flip(xp.arange(5, dtype=xp.int16))),
        ("0-d", lambda: xp.asarray(2.5)),
        ("bool", lambda: xp.asarray([True, False, True])),
        ("complex", lambda: xp.asarray([1 + 2j, 3 - 4j], dtype=xp.complex128)),
    ],
)
def test_strict_arrays_import_zero_copy_through_dunder_dlpack(bridge, label, make):
    a = make()
    inner = numpy_of(a)
    before = sys.getrefcount(inner)
    tensor = imported(bridge, a)
    assert first_element(tensor) == inner.__array_interface__["data"][0], label
    assert shape_of(tensor) == (list(a.shape), [s // inner.itemsize for s in inner.strides]), label
    c = tensor.contents
    assert (c.version.major, c.version.minor, c.flags) == (1, 3, 0), label
    dtype = c.dl_tensor.dtype
    assert (dtype.code, dtype.bits) == {"f": (2, 8 * inner.itemsize), "i": (0, 8 * inner.itemsize),
                                        "b": (6, 8), "c": (5, 8 * inner.itemsize)}[inner.dtype.kind], label
    assert sys.getrefcount(inner) > before, "the capsule's tensor holds NumPy's array"
    bridge.release(tensor)
    flush(bridge)
    assert sys.getrefcount(inner) == before, f"{label}: released exactly once"


def test_requests_reach_the_strict_array(bridge):
    a = xp.reshape(xp.arange(6, dtype=xp.float64), (2, 3))
    copied = imported(bridge, a, ImportOptions(copy=1))
    assert first_element(copied) != numpy_of(a).ctypes.data and copied.contents.flags & IS_COPIED
    bridge.release(copied)
    # A stream request asks __dlpack_device__ first, which answers the host: no stream passed.
    host = imported(bridge, a, ImportOptions(has_stream=1, stream=-1, has_device=1, device_type=KDLCPU, copy=-1))
    assert first_element(host) == numpy_of(a).ctypes.data
    bridge.release(host)


def test_a_strict_array_before_2023_12_is_refused_as_numpy_refuses_it(bridge):
    with xp.ArrayAPIStrictFlags(api_version="2022.12"):
        a = xp.asarray([1.0, 2.0])
        with pytest.raises(ValueError, match="max_version"):
            np.from_dlpack(a)
        _, (code, message) = bridge.import_(a)
    assert code == PRODUCER and "Array.__dlpack__ raised ValueError" in message and "max_version" in message, message


# ---- RsDLPack → array-api-strict ------------------------------------------------------------


def test_from_dlpack_shares_the_julia_array_and_releases_its_root_once(bridge):
    forget_earlier_roots(bridge)
    backing = np.arange(12, dtype=np.float64)
    y = xp.from_dlpack(share(bridge, backing, [3, 4], [1, 3], 41))
    assert type(y) is type(xp.asarray(0.0)) and y.shape == (3, 4)
    assert numpy_of(y).ctypes.data == backing.ctypes.data and numpy_of(y).strides == (8, 24)
    assert numpy_of(y).tolist() == backing.reshape(3, 4, order="F").tolist()
    gc.collect()
    assert bridge.take_released_roots() == [], "the strict array keeps the Julia array"
    del y
    gc.collect()
    assert bridge.take_released_roots() == [41]
    assert bridge.take_released_roots() == []


def test_read_only_and_copy_requests_from_the_strict_consumer(bridge):
    forget_earlier_roots(bridge)
    backing = np.arange(4.0)
    ro = xp.from_dlpack(share(bridge, backing, [4], [1], 42, read_only=ACCESS_READ_ONLY))
    assert not numpy_of(ro).flags.writeable, "READ_ONLY reaches the consumer"
    copied = xp.from_dlpack(share(bridge, backing, [4], [1], 43), copy=True)
    assert numpy_of(copied).ctypes.data != backing.ctypes.data
    assert numpy_of(copied).tolist() == backing.tolist()
    gc.collect()
    assert bridge.take_released_roots() == [43], "a copy holds nothing of the array"
    del ro, copied
    gc.collect()
    assert bridge.take_released_roots() == [42]
