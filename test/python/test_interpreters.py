"""The bridge serves one interpreter, the first that calls it: a call from a sub-interpreter is
refused with the interpreter error code and a message naming the limit, and the first goes on
being served. (A free-threaded build, the other refusal, is tested in Rust with its facts faked:
bridges/python/src/python/interpreter.rs; none is installed here.)

In a child process: once a sub-interpreter exists CPython disables `PyGILState_Check` for the
rest of the process (it answers yes on every thread), so both interpreters call through
ctypes.PyDLL, which keeps the GIL held; then the main interpreter calls once more through
ctypes.CDLL, which releases it: that thread has no thread state, and the call must take the GIL
rather than ask the interpreter of a thread state it lacks (`PyInterpreterState_Get` would end
the process with a fatal error). On 3.10 and 3.11, where the current thread state is the GIL
holder's for the whole process, the sub-interpreter's call is refused for a thread state that is
not its thread's own, which is all the bridge can tell there (see
bridges/python/src/python/interpreter.rs; bridges/python/tests/sub_interpreter.rs covers the
threads)."""

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = textwrap.dedent(
    r'''
    import ctypes, os
    from rsdlpack_ctypes import Bridge, ELEMENT_CODES, ERROR_CODE_INTERPRETER
    try:
        import _interpreters as interpreters  # 3.13 and later
    except ImportError:
        import _xxsubinterpreters as interpreters  # 3.10 to 3.12

    def share_once(bridge, root_id):
        data = (ctypes.c_double * 4)()
        return bridge.share(ctypes.addressof(data), [4], [1], ELEMENT_CODES["float64"], root_id=root_id)

    bridge = Bridge(os.environ["RSDLPACK_PYTHON_LIB"], ctypes.PyDLL)
    (exporter, _), error = share_once(bridge, 1)
    assert error is None, error
    del exporter
    print("main: served", flush=True)

    try:
        # 3.12's default is an isolated interpreter with its own GIL, where ctypes cannot load.
        sub = interpreters.create(isolated=False)
    except TypeError:
        sub = interpreters.create()
    interpreters.run_string(sub, """if True:
        import ctypes, os
        from rsdlpack_ctypes import Bridge, ELEMENT_CODES, ERROR_CODE_INTERPRETER
        bridge = Bridge(os.environ["RSDLPACK_PYTHON_LIB"], ctypes.PyDLL)
        data = (ctypes.c_double * 4)()
        result, error = bridge.share(ctypes.addressof(data), [4], [1], ELEMENT_CODES["float64"], root_id=2)
        assert result is None, "a sub-interpreter was served"
        code, message = error
        assert code == ERROR_CODE_INTERPRETER, error
        print("sub: refused:", message, flush=True)
    """)
    interpreters.destroy(sub)

    (exporter, _), error = share_once(bridge, 3)
    assert error is None, error
    del exporter
    print("main: still served", flush=True)

    # With the GIL released (ctypes.CDLL): this thread has no thread state, and PyGILState_Check
    # answers yes all the same now that a sub-interpreter has existed. The call takes the GIL
    # as any call without it does; asking the interpreter without a thread state would abort.
    released = Bridge(os.environ["RSDLPACK_PYTHON_LIB"], ctypes.CDLL)
    (exporter, _), error = share_once(released, 4)
    assert error is None, error
    del exporter
    print("main, GIL released: served", flush=True)
    '''
)


def test_a_sub_interpreter_is_refused_and_the_first_still_served(bridge):
    try:
        import _interpreters  # noqa: F401
    except ImportError:
        pytest.importorskip("_xxsubinterpreters", reason="CPython's sub-interpreter module")
    env = dict(os.environ, RSDLPACK_PYTHON_LIB=bridge.path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH")) if p)
    child = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    report = f"exit {child.returncode}\nstdout:\n{child.stdout}\nstderr:\n{child.stderr}"
    assert child.returncode == 0, report
    lines = child.stdout.splitlines()
    assert lines[0] == "main: served", report
    if sys.version_info >= (3, 12):
        assert lines[1].startswith("sub: refused: RsDLPack's Python bridge serves one interpreter per process"), report
        assert "sub-interpreter 1" in lines[1] and "call from the main interpreter" in lines[1], report
    else:
        assert lines[1].startswith("sub: refused: the current Python thread state is not this thread's own"), report
        assert "in the main interpreter" in lines[1], report
    assert lines[2] == "main: still served", report
    assert lines[3] == "main, GIL released: served", report
