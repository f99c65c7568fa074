"""ctypes definitions of the DLPack structs and of the RsDLPack Python bridge's C entry points
(the same functions Julia's ccall uses). Shared by the pytest suite and test/gpu/check_gpu.py;
no pytest here, so the GPU machine needs only ctypes."""

import ctypes

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_uint32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


# The DLPack 1.3 C exchange API (dlpack.h 1.3; dlpark's ffi::DLPackExchangeAPI, 56 bytes). The
# functions that take Python objects are called with the GIL held, so they are PYFUNCTYPEs:
# ctypes then raises the Python exception a function sets when it returns -1.
class DLPackExchangeAPIHeader(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("prev_api", ctypes.c_void_p)]


SET_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
MANAGED_TENSOR_ALLOCATOR = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(DLTensor), ctypes.POINTER(ctypes.POINTER(DLManagedTensorVersioned)), ctypes.c_void_p, SET_ERROR
)
MANAGED_TENSOR_FROM_PY_OBJECT = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.POINTER(DLManagedTensorVersioned))
)
MANAGED_TENSOR_TO_PY_OBJECT = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(DLManagedTensorVersioned), ctypes.POINTER(ctypes.py_object)
)
DLTENSOR_FROM_PY_OBJECT = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor))
CURRENT_WORK_STREAM = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_uint32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))
DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))


class DLPackExchangeAPI(ctypes.Structure):
    _fields_ = [
        ("header", DLPackExchangeAPIHeader),
        ("managed_tensor_allocator", MANAGED_TENSOR_ALLOCATOR),
        ("managed_tensor_from_py_object_no_sync", MANAGED_TENSOR_FROM_PY_OBJECT),
        ("managed_tensor_to_py_object_no_sync", MANAGED_TENSOR_TO_PY_OBJECT),
        ("dltensor_from_py_object_no_sync", DLTENSOR_FROM_PY_OBJECT),
        ("current_work_stream", CURRENT_WORK_STREAM),
    ]


def exchange_api_of(tp):
    """The DLPackExchangeAPI a type offers as `__dlpack_c_exchange_api__` (checking the name)."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return DLPackExchangeAPI.from_address(get(tp.__dlpack_c_exchange_api__, b"dlpack_exchange_api"))


def run_deleter(tensor):
    """Calls a managed tensor's own deleter (what its consumer does when done)."""
    DELETER(tensor.contents.deleter)(tensor)


class ImportOptions(ctypes.Structure):
    _fields_ = [
        ("has_stream", ctypes.c_int32),
        ("stream", ctypes.c_int64),
        ("has_device", ctypes.c_int32),
        ("device_type", ctypes.c_uint32),
        ("device_id", ctypes.c_int32),
        ("copy", ctypes.c_int32),
    ]


TENSOR_P = ctypes.POINTER(DLManagedTensorVersioned)


class StreamDescription(ctypes.Structure):
    _fields_ = [
        ("context", ctypes.c_size_t),
        ("device", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("priority", ctypes.c_int32),
    ]


class Bridge:
    """Thin typed wrappers over the entry points; errors become (code, message)."""

    def __init__(self, path, loader):
        self.path = path
        self.lib = loader(path)
        lib = self.lib
        lib.rsdlpack_py_import.argtypes = [ctypes.py_object, ctypes.POINTER(ImportOptions), ctypes.POINTER(TENSOR_P), ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_py_import.restype = ctypes.c_int32
        lib.rsdlpack_py_export.argtypes = [TENSOR_P, ctypes.POINTER(ctypes.py_object), ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_py_export.restype = ctypes.c_int32
        lib.rsdlpack_tensor_release.argtypes = [TENSOR_P]
        lib.rsdlpack_tensor_release.restype = None
        lib.rsdlpack_py_flush_releases.restype = ctypes.c_size_t
        lib.rsdlpack_py_pending_releases.restype = ctypes.c_size_t
        lib.rsdlpack_error_free.argtypes = [ctypes.c_void_p]
        lib.rsdlpack_py_export_with_stream.argtypes = [TENSOR_P, ctypes.c_size_t, ctypes.POINTER(ctypes.py_object), ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_py_export_with_stream.restype = ctypes.c_int32
        lib.rsdlpack_cuda_driver_available.restype = ctypes.c_int32
        lib.rsdlpack_cuda_describe_stream.argtypes = [ctypes.c_size_t, ctypes.POINTER(StreamDescription), ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_cuda_describe_stream.restype = ctypes.c_int32
        lib.rsdlpack_cuda_order_streams.argtypes = [ctypes.c_int32, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_cuda_order_streams.restype = ctypes.c_int32

    def _message(self, pointer):
        text = ctypes.string_at(pointer.value).decode()
        self.lib.rsdlpack_error_free(pointer)
        return text

    def import_(self, obj, options=None):
        out = TENSOR_P()
        error = ctypes.c_void_p()
        opts = ctypes.byref(options) if options is not None else None
        code = self.lib.rsdlpack_py_import(obj, opts, ctypes.byref(out), ctypes.byref(error))
        if code != 0:
            return None, (code, self._message(error))
        return out, None

    def export(self, tensor, stream=0):
        out = ctypes.py_object()
        error = ctypes.c_void_p()
        code = self.lib.rsdlpack_py_export_with_stream(tensor, stream, ctypes.byref(out), ctypes.byref(error))
        if code != 0:
            return None, (code, self._message(error))
        exporter = out.value
        # The entry point handed us a new reference; ctypes never releases references written
        # into a py_object, so give it back once we hold our own (Julia's PyObject steals it).
        ctypes.pythonapi.Py_DecRef.argtypes = [ctypes.py_object]
        ctypes.pythonapi.Py_DecRef(exporter)
        return exporter, None

    def release(self, tensor):
        self.lib.rsdlpack_tensor_release(tensor)

    def describe_stream(self, handle):
        out = StreamDescription()
        error = ctypes.c_void_p()
        code = self.lib.rsdlpack_cuda_describe_stream(handle, ctypes.byref(out), ctypes.byref(error))
        if code != 0:
            return None, (code, self._message(error))
        return out, None

    def order_streams(self, device, producer, consumer):
        error = ctypes.c_void_p()
        code = self.lib.rsdlpack_cuda_order_streams(device, producer, consumer, ctypes.byref(error))
        return None if code == 0 else (code, self._message(error))


def first_element(tensor):
    t = tensor.contents.dl_tensor
    return t.data + t.byte_offset


def shape_of(tensor):
    t = tensor.contents.dl_tensor
    return [t.shape[i] for i in range(t.ndim)], [t.strides[i] for i in range(t.ndim)]
