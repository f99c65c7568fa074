"""The bridge keeps no Python object alive that it has finished with, called as Julia calls it
(the GIL held across the call, `bridge_with_gil`) or as ctypes usually does (`bridge`).

A producer type is held by the per-type cache until evicted, then must be freed; exceptions the
bridge handles (a producer's type without the C exchange API, an old producer's TypeError, a
producer that raises) must die with the call, with everything they reference."""

import gc
import weakref

import numpy as np
import pytest

from rsdlpack_ctypes import ImportOptions

# More than the per-type cache's slots (bridges/python/src/import/type_info.rs, SLOTS).
EVICTING_TYPES = 9

DEVICE_ANSWERS = {
    "a (device_type, device_id) tuple": lambda self: (1, 0),
    "a string": lambda self: "cpu",
    "an exception": lambda self: (_ for _ in ()).throw(RuntimeError("no device")),
    "no __dlpack_device__": None,
}


@pytest.fixture(params=["bridge", "bridge_with_gil"])
def loaded(request):
    return request.getfixturevalue(request.param)


def producer_type(name, device_answer):
    data = np.arange(4.0)
    namespace = {"__dlpack__": lambda self, **kwargs: data.__dlpack__(**kwargs)}
    if device_answer is not None:
        namespace["__dlpack_device__"] = device_answer
    return type(name, (), namespace)


def import_once(bridge, obj, options=None):
    tensor, error = bridge.import_(obj, options)
    if tensor is not None:
        bridge.lib.rsdlpack_tensor_release(tensor)
    return error


def stream_request():
    options = ImportOptions()
    options.has_stream, options.stream = 1, 1
    return options


@pytest.mark.parametrize("with_stream", [False, True], ids=["no stream", "stream asked"])
@pytest.mark.parametrize("device_answer", DEVICE_ANSWERS.values(), ids=DEVICE_ANSWERS.keys())
def test_a_producer_type_is_freed_once_evicted(loaded, device_answer, with_stream):
    options = stream_request() if with_stream else None
    producer = producer_type("Producer", device_answer)
    alive = weakref.ref(producer)
    import_once(loaded, producer(), options)
    for k in range(EVICTING_TYPES):
        assert import_once(loaded, producer_type(f"Other{k}", DEVICE_ANSWERS["a (device_type, device_id) tuple"])()) is None
    del producer
    gc.collect()
    assert alive() is None, "the bridge keeps a reference to an evicted producer type"


class Sentinel:
    pass


def raising(exception_type, sentinel):
    error = exception_type("refused")
    error.sentinel = sentinel  # what the exception (and its traceback) keeps alive
    raise error


def test_an_old_producers_type_error_dies_with_the_import(loaded):
    sentinel = Sentinel()
    alive = weakref.ref(sentinel)
    data = np.arange(3.0)

    class OldProducer:
        def __dlpack__(self, **kwargs):
            if "max_version" in kwargs:  # predates max_version: a TypeError, then a retry
                raising(TypeError, sentinel)
            return data.__dlpack__()

    assert import_once(loaded, OldProducer()) is None
    del sentinel
    gc.collect()
    assert alive() is None, "the retried TypeError outlives the import"


def test_a_producers_exception_dies_with_the_failed_import(loaded):
    sentinel = Sentinel()
    alive = weakref.ref(sentinel)

    class Failing:
        def __dlpack__(self, **kwargs):
            raising(RuntimeError, sentinel)

    error = import_once(loaded, Failing())
    assert error is not None and "refused" in error[1]
    del sentinel
    gc.collect()
    assert alive() is None, "the producer's exception outlives the failed import"
