"""rsdlpack.DLPackTensor, the exporter's type, cannot be made to hold anything but an exporter.

Every object of the type is the start of an exporter's own allocation, which only the bridge
makes. A mutable heap type let plain Python assign `T.__new__`, after which `object.__new__`
made a zero-filled object of the type: its `__dlpack__` took it for an exporter, and releasing
the capsule dropped an all-zero keeper (a segfault; issue 39). Each attempt runs in a child
process, so that a crash fails the test instead of killing pytest; the exporter comes from
rsdlpack_py_share through ctypes, as Julia's `share(A, Py)` hands one to Python.
"""

import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))

# The child: an exporter over a NumPy buffer, then every way in, each expected to raise TypeError
# (pickle may say PicklingError); prints one line per attempt, "ok <name>" or "LEAK <name>: ...".
CHILD = textwrap.dedent(
    r'''
    import copy, copyreg, ctypes, gc, os, pickle
    import numpy as np
    from rsdlpack_ctypes import Bridge, share_numpy

    bridge = Bridge(os.environ["RSDLPACK_PYTHON_LIB"], ctypes.CDLL)
    backing = np.arange(6, dtype=np.float64)
    e = share_numpy(bridge, backing, [2, 3], [1, 2], root_id=7)
    T = type(e)
    assert T.__module__ == "rsdlpack" and T.__qualname__ == "DLPackTensor", T

    def refused(name, attempt, expected=(TypeError,)):
        try:
            attempt()
        except expected as error:
            print(f"ok {name}: {type(error).__name__}: {error}", flush=True)
            return
        except BaseException as error:
            print(f"LEAK {name}: raised {type(error).__name__}: {error}", flush=True)
            return
        print(f"LEAK {name}: no error", flush=True)

    def issue_snippet():
        # issue 39, as filed: the first statement must fail.
        T.__new__ = lambda c: object.__new__(c)
        x = T()
        c = x.__dlpack__()
        del c

    def assign_init():
        T.__init__ = lambda self: None

    def subclass():
        class S(T):
            pass

    class Other:
        __slots__ = ()

    def class_of_exporter():
        e.__class__ = Other

    def class_of_other():
        o = Other()
        o.__class__ = T

    def set_exchange_api():
        T.__dlpack_c_exchange_api__ = None

    def delete_exchange_api():
        del T.__dlpack_c_exchange_api__

    def set_dlpack():
        T.__dlpack__ = lambda self, **kw: None

    def pickled(protocol):
        return lambda: pickle.loads(pickle.dumps(e, protocol=protocol))

    refused("the issue's snippet", issue_snippet)
    refused("type.__setattr__(T, '__new__', ...)", lambda: type.__setattr__(T, "__new__", lambda c: object.__new__(c)))
    refused("object.__setattr__(T, '__new__', ...)", lambda: object.__setattr__(T, "__new__", lambda c: object.__new__(c)))
    refused("T.__init__ = ...", assign_init)
    refused("T()", lambda: T())
    refused("T.__new__(T)", lambda: T.__new__(T))
    refused("object.__new__(T)", lambda: object.__new__(T))
    refused("copyreg._reconstructor(T, object, None)", lambda: copyreg._reconstructor(T, object, None))
    refused("copyreg.__newobj__(T)", lambda: copyreg.__newobj__(T))
    refused("class S(T)", subclass)
    refused("type('S', (T,), {})", lambda: type("S", (T,), {}))
    refused("e.__class__ = Other", class_of_exporter)
    refused("other.__class__ = T", class_of_other)
    refused("T.__dlpack_c_exchange_api__ = None", set_exchange_api)
    refused("del T.__dlpack_c_exchange_api__", delete_exchange_api)
    refused("T.__dlpack__ = ...", set_dlpack)
    refused("copy.copy(e)", lambda: copy.copy(e))
    refused("copy.deepcopy(e)", lambda: copy.deepcopy(e))
    refused("e.__reduce_ex__(2)", lambda: e.__reduce_ex__(2))
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        refused(f"pickle protocol {protocol}", pickled(protocol), (TypeError, pickle.PicklingError))

    # The type is what it was: immutable, its class attribute in place, its exporter working.
    assert T.__flags__ & (1 << 8), "Py_TPFLAGS_IMMUTABLETYPE"
    api = T.__dlpack_c_exchange_api__
    assert type(api).__name__ == "PyCapsule" and "dlpack_exchange_api" in repr(api), api
    assert np.array_equal(np.from_dlpack(e), backing.reshape(3, 2).T)
    del e
    gc.collect()
    bridge.lib.rsdlpack_py_flush_releases()
    assert bridge.take_released_roots() == [7]
    print("done", flush=True)
    '''
)


def test_python_can_neither_make_nor_alter_the_exporter_type(bridge):
    env = dict(os.environ, RSDLPACK_PYTHON_LIB=bridge.path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH")) if p)
    child = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    report = f"exit {child.returncode}\nstdout:\n{child.stdout}\nstderr:\n{child.stderr}"
    assert child.returncode == 0, f"the child crashed or failed ({report})"
    lines = child.stdout.splitlines()
    assert lines[-1] == "done", report
    leaks = [line for line in lines if line.startswith("LEAK")]
    assert not leaks, report
    assert sum(line.startswith("ok ") for line in lines) >= 20, report
    assert lines[0].startswith("ok the issue's snippet: TypeError"), report
