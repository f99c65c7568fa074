"""The C entry points, called through ctypes as Julia's ccall calls them, against NumPy and JAX."""

import ctypes
import subprocess
import sys
import threading

import numpy as np
import pytest

from rsdlpack_ctypes import ImportOptions, first_element, shape_of

READ_ONLY, IS_COPIED = 1, 2


def test_the_library_does_not_link_libpython(bridge):
    dynamic = subprocess.run(["readelf", "-d", bridge.path], capture_output=True, text=True, check=True).stdout
    needed = [line for line in dynamic.splitlines() if "NEEDED" in line]
    assert needed, "readelf listed the dynamic section"
    assert not any("libpython" in line for line in needed), needed


def test_the_library_loads_in_a_fresh_interpreter(bridge):
    code = f"import ctypes; lib = ctypes.CDLL({bridge.path!r}); print(lib.rsdlpack_py_pending_releases())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "0"


@pytest.mark.parametrize("loader", ["bridge", "bridge_with_gil"])
def test_numpy_import_is_zero_copy_and_released_once(loader, request):
    lib = request.getfixturevalue(loader)
    a = np.arange(24, dtype=np.float64).reshape(4, 6)[::2, 1::2]
    before = sys.getrefcount(a)
    tensor, error = lib.import_(a)
    assert error is None
    assert first_element(tensor) == a.ctypes.data
    assert shape_of(tensor) == ([2, 3], [12, 2])
    c = tensor.contents
    assert (c.version.major, c.version.minor) == (1, 3)
    assert (c.dl_tensor.dtype.code, c.dl_tensor.dtype.bits, c.dl_tensor.dtype.lanes) == (2, 64, 1)
    assert c.flags & READ_ONLY == 0
    assert sys.getrefcount(a) > before
    lib.release(tensor)
    lib.lib.rsdlpack_py_flush_releases()
    assert sys.getrefcount(a) == before


def test_read_only_and_copy_flags_travel(bridge):
    a = np.arange(5.0)
    a.flags.writeable = False
    tensor, _ = bridge.import_(a)
    assert tensor.contents.flags & READ_ONLY
    bridge.release(tensor)

    b = np.arange(5.0)
    copied, _ = bridge.import_(b, ImportOptions(copy=1))
    assert copied.contents.flags & IS_COPIED
    assert first_element(copied) != b.ctypes.data
    bridge.release(copied)
    bridge.lib.rsdlpack_py_flush_releases()


def test_errors_come_back_as_codes_and_messages(bridge):
    _, (code, message) = bridge.import_([1, 2, 3])
    assert code == 3 and "list" in message

    _, (code, message) = bridge.import_(np.arange(3.0), ImportOptions(has_stream=1, stream=0, copy=-1))
    assert code == 1 and "stream=0" in message

    _, (code, message) = bridge.import_(np.arange(3.0), ImportOptions(copy=7))
    assert code == 1 and "copy" in message

    _, (code, message) = bridge.import_(np.arange(3.0), ImportOptions(has_device=1, device_type=2, copy=-1))
    assert code == 4 and "BufferError" in message, message

    capsule = np.arange(3.0).__dlpack__()
    tensor, _ = bridge.import_(capsule)
    bridge.release(tensor)
    _, (code, message) = bridge.import_(capsule)
    assert code == 1 and "already consumed" in message


def test_jax_legacy_capsules_import_zero_copy(bridge):
    import jax.numpy as jnp

    x = jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4)
    tensor, error = bridge.import_(x)
    assert error is None
    assert first_element(tensor) == x.unsafe_buffer_pointer()
    assert shape_of(tensor) == ([3, 4], [4, 1])
    bridge.release(tensor)
    bridge.lib.rsdlpack_py_flush_releases()


def test_export_round_trip_to_numpy_and_jax(bridge):
    import jax.dlpack

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    before = sys.getrefcount(a)
    tensor, _ = bridge.import_(a)
    exporter, error = bridge.export(tensor)
    assert error is None
    assert exporter.__dlpack_device__() == (1, 0)
    n = np.from_dlpack(exporter)
    assert n.ctypes.data == a.ctypes.data and n.strides == a.strides
    j = jax.dlpack.from_dlpack(exporter)
    assert np.asarray(j).tolist() == a.tolist()
    del n, j, exporter
    import gc

    gc.collect()
    bridge.lib.rsdlpack_py_flush_releases()
    assert sys.getrefcount(a) == before


def test_export_refuses_a_null_tensor(bridge):
    _, (code, message) = bridge.export(None)
    assert code == 1 and "null" in message


def test_releases_on_threads_without_the_gil_are_deferred_then_flushed(bridge):
    a = np.arange(7.0)
    before = sys.getrefcount(a)
    tensor, _ = bridge.import_(a)
    # ctypes.CDLL releases the GIL around the call, so the release runs without it.
    worker = threading.Thread(target=bridge.release, args=(tensor,))
    worker.start()
    worker.join(timeout=20)
    assert not worker.is_alive(), "release without the GIL must not block"
    assert bridge.lib.rsdlpack_py_pending_releases() == 1
    assert sys.getrefcount(a) > before
    assert bridge.lib.rsdlpack_py_flush_releases() == 1
    assert sys.getrefcount(a) == before


def test_an_exporter_nobody_consumes_releases_its_tensor(bridge):
    import gc

    a = np.arange(4.0)
    before = sys.getrefcount(a)
    tensor, _ = bridge.import_(a)
    exporter, _ = bridge.export(tensor)
    capsule = exporter.__dlpack__(max_version=(1, 3))
    del exporter, capsule
    gc.collect()
    assert sys.getrefcount(a) == before


def test_cuda_entry_points_without_a_driver_report_it(bridge):
    if bridge.lib.rsdlpack_cuda_driver_available() == 1:
        pytest.skip("a CUDA driver is present; test/gpu/check_gpu.py covers this machine")
    _, (code, message) = bridge.describe_stream(0x1000)
    assert code == 2 and "no CUDA driver" in message
    code, message = bridge.order_streams(0, 0x1000, 0x2000)
    assert code == 2 and "no CUDA driver" in message
