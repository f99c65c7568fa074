"""Calls that may not wait for the GIL (RSDLPACK_CALL_REFUSE_WITHOUT_GIL, what Julia passes):
from a thread that does not hold it they are refused at once, naming the fix; without the flag
(a C caller that released the GIL on purpose, ctypes' CDLL) they take it, as before.

A ctypes CDLL call releases the GIL around the call, so the thread making it does not hold the
GIL inside; a PyDLL call keeps it. Each call runs in a thread joined with a timeout, so that a
call that waited would fail the test rather than hang it. (That a refusal does not wait while
another thread holds the GIL is bridges/python/tests/gil.rs's test, with the GIL held there.)
"""

import threading

import numpy as np
import pytest

from rsdlpack_abi import CALL_REFUSE_WITHOUT_GIL, ERROR_CODE_INVALID, ERROR_CODE_BUFFER
from rsdlpack_ctypes import ELEMENT_CODES

GIL_MESSAGE = "this thread does not hold Python's GIL"


def on_a_thread(call, timeout=20):
    """`call()`'s value, computed on a new thread that must finish within `timeout` s."""
    answer = []
    worker = threading.Thread(target=lambda: answer.append(call()), daemon=True)
    worker.start()
    worker.join(timeout)
    assert not worker.is_alive(), "the call did not return (it waited for the GIL)"
    return answer[0]


def share_calls(bridge, backing, flags, into=None):
    return bridge.share(backing.ctypes.data, [4], [1], ELEMENT_CODES["float64"], root_id=90, into=into, flags=flags)


@pytest.mark.parametrize("entry_point", ["import_plan", "import_strided_plan", "share", "share_into", "flush_releases"])
def test_a_call_that_may_not_wait_is_refused_without_the_gil(bridge, entry_point):
    a = np.arange(4.0)
    calls = {
        "import_plan": lambda: bridge.import_plan(a, flags=CALL_REFUSE_WITHOUT_GIL),
        "import_strided_plan": lambda: bridge.import_strided_plan(a, flags=CALL_REFUSE_WITHOUT_GIL),
        "share": lambda: share_calls(bridge, a, CALL_REFUSE_WITHOUT_GIL),
        "share_into": lambda: share_calls(bridge, a, CALL_REFUSE_WITHOUT_GIL, into=np.ndarray),
        "flush_releases": lambda: bridge.flush_releases(CALL_REFUSE_WITHOUT_GIL),
    }
    result, error = on_a_thread(calls[entry_point])
    assert result is None
    code, message = error
    assert code == ERROR_CODE_INVALID and GIL_MESSAGE in message, message
    assert "call from the thread that holds the GIL" in message and "PythonCall.GIL.lock" in message
    bridge.take_released_roots()


def test_with_the_gil_held_the_same_calls_run(bridge_with_gil):
    a = np.arange(4.0)
    result, error = on_a_thread(lambda: bridge_with_gil.import_plan(a, flags=CALL_REFUSE_WITHOUT_GIL))
    assert error is None, error
    assert result.plan.dims_() == [4]
    bridge_with_gil.release_handle(result.plan.tensor)
    strided, error = on_a_thread(lambda: bridge_with_gil.import_strided_plan(a, flags=CALL_REFUSE_WITHOUT_GIL))
    assert error is None, error
    assert strided.dims_() == [4]
    bridge_with_gil.release_handle(strided.tensor)
    (exporter, _), error = share_calls(bridge_with_gil, a, CALL_REFUSE_WITHOUT_GIL)
    assert error is None, error
    assert np.from_dlpack(exporter).tolist() == a.tolist()
    # share_into gets as far as the type's table (NumPy has none): past the GIL check.
    _, (code, message) = share_calls(bridge_with_gil, a, CALL_REFUSE_WITHOUT_GIL, into=np.ndarray)
    assert code == ERROR_CODE_BUFFER and "cannot share into the type numpy.ndarray" in message
    released, error = bridge_with_gil.flush_releases(CALL_REFUSE_WITHOUT_GIL)
    assert error is None and released >= 0
    del exporter
    bridge_with_gil.take_released_roots()


def test_without_the_flag_a_cdll_call_takes_the_gil_as_before(bridge):
    a = np.arange(4.0)
    result, error = on_a_thread(lambda: bridge.import_plan(a, flags=0))
    assert error is None, error
    bridge.release_handle(result.plan.tensor)
    released, error = on_a_thread(lambda: bridge.flush_releases(0))
    assert error is None and released >= 0
    result, error = on_a_thread(lambda: bridge.import_plan(a))
    assert error is None, error
    bridge.release_handle(result.plan.tensor)
    bridge.flush_releases(0)


def test_unknown_flag_bits_are_refused_by_name(bridge_with_gil):
    a = np.arange(4.0)
    _, (code, message) = bridge_with_gil.import_plan(a, flags=1 << 20)
    assert code == ERROR_CODE_INVALID and "rsdlpack_py_import_plan_with_flags: unknown flag bits 0x100000" in message
    _, (code, message) = bridge_with_gil.flush_releases(1)
    assert code == ERROR_CODE_INVALID and "rsdlpack_py_flush_releases_with_flags: unknown flag bits 0x1" in message
    _, (code, message) = share_calls(bridge_with_gil, a, 4)
    assert code == ERROR_CODE_INVALID and "rsdlpack_py_share_with_flags: unknown flag bits 0x4" in message
    bridge_with_gil.take_released_roots()


def test_share_into_may_be_given_any_consumer_and_makes_an_exporter_for_non_types(bridge_with_gil):
    # Julia's share(A, consumer) passes every consumer this way, so that it asks Python what the
    # consumer is only after the call proved this thread holds the GIL.
    from rsdlpack_abi import SHARE_EXPORTER_FOR_NON_TYPES

    a = np.arange(4.0)
    flags = CALL_REFUSE_WITHOUT_GIL | SHARE_EXPORTER_FOR_NON_TYPES
    (exporter, _), error = share_calls(bridge_with_gil, a, flags, into=np.from_dlpack)
    assert error is None, error
    assert hasattr(exporter, "__dlpack__") and np.from_dlpack(exporter).tolist() == a.tolist()
    # A type still goes to its table (refused here: NumPy has none).
    _, (code, message) = share_calls(bridge_with_gil, a, flags, into=np.ndarray)
    assert code == ERROR_CODE_BUFFER and "cannot share into the type numpy.ndarray" in message
    # Without the flag a non-type is refused.
    _, (code, message) = share_calls(bridge_with_gil, a, CALL_REFUSE_WITHOUT_GIL, into=np.from_dlpack)
    assert code == ERROR_CODE_INVALID and "must be a Python type" in message
    del exporter
    bridge_with_gil.take_released_roots()


def test_share_takes_the_kept_stream_flag_and_host_memory_is_shared_as_before(bridge_with_gil):
    # Julia passes it for a CuArray whose task stream it roots with the array: each __dlpack__
    # then records on that stream (test/gpu/check_gpu.py proves it there); host memory has no
    # stream, so the flag changes nothing here, but it is accepted by both share entry points.
    from rsdlpack_abi import SHARE_EXPORTER_FOR_NON_TYPES, SHARE_STREAM_KEPT

    a = np.arange(4.0)
    (exporter, _), error = share_calls(bridge_with_gil, a, CALL_REFUSE_WITHOUT_GIL | SHARE_STREAM_KEPT)
    assert error is None, error
    assert np.from_dlpack(exporter).tolist() == a.tolist()
    flags = CALL_REFUSE_WITHOUT_GIL | SHARE_EXPORTER_FOR_NON_TYPES | SHARE_STREAM_KEPT
    (other, _), error = share_calls(bridge_with_gil, a, flags, into=np.from_dlpack)
    assert error is None, error
    assert np.from_dlpack(other).tolist() == a.tolist()
    del exporter, other
    bridge_with_gil.take_released_roots()
