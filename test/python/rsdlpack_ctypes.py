"""ctypes definitions of the DLPack structs and of the RsDLPack Python bridge's C entry points
(the same functions Julia's ccall uses). Shared by the pytest suite and test/gpu/check_gpu.py;
no pytest here, so the GPU machine needs only ctypes.

The C ABI's constants (return codes, element codes, plan kinds, option values, struct numbers)
are rsdlpack_abi.py's, generated from include/rsdlpack.h (scripts/abi_constants.py) and
re-exported here; the names below that predate it are aliases of those."""

import ctypes
import gc

import rsdlpack_abi
from rsdlpack_abi import *  # noqa: F403 (every ABI constant, re-exported)

# The Python C API through a handle of our own: `ctypes.pythonapi` is one object for the whole
# process, whose functions any library may retype (NVIDIA Warp sets Py_DecRef.argtypes for
# everyone); a PyDLL of our own has its own function objects, typed here once.
PYTHON_API = ctypes.PyDLL(None)
PYTHON_API.Py_DecRef.argtypes = [ctypes.py_object]
PYTHON_API.Py_DecRef.restype = None
PYTHON_API.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
PYTHON_API.PyCapsule_GetPointer.restype = ctypes.c_void_p


def adopt(obj):
    """Gives back the new reference an entry point wrote into a py_object (ctypes never
    releases one), once the caller holds its own: what Julia's PyObject does by stealing it."""
    PYTHON_API.Py_DecRef(obj)
    return obj


def capsule_pointer(capsule, name):
    """The pointer inside a capsule named `name` (bytes)."""
    return PYTHON_API.PyCapsule_GetPointer(capsule, name)


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


class DLManagedTensor(ctypes.Structure):
    """The legacy (unversioned) managed tensor, inside a "dltensor" capsule."""
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


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
    return DLPackExchangeAPI.from_address(capsule_pointer(tp.__dlpack_c_exchange_api__, b"dlpack_exchange_api"))


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

# Return codes of the entry points (RsdlErrorCode; docs/src/usage.md's table).
INVALID, BUFFER, NOT_DLPACK, PRODUCER, RESOURCE, DRIVER, INTERPRETER, INTERNAL = (
    ERROR_CODE_INVALID, ERROR_CODE_BUFFER, ERROR_CODE_NOT_DLPACK, ERROR_CODE_PRODUCER, ERROR_CODE_RESOURCE,
    ERROR_CODE_DRIVER, ERROR_CODE_INTERPRETER, ERROR_CODE_INTERNAL)

# flags of rsdlpack_py_import_with_flags.
ACCEPT_UNKNOWN_DEVICE_TYPES = IMPORT_ACCEPT_UNKNOWN_DEVICE_TYPES


class StreamDescription(ctypes.Structure):
    _fields_ = [
        ("context", ctypes.c_size_t),
        ("device", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("priority", ctypes.c_int32),
    ]


DIMS = ctypes.c_int64 * MAX_NDIM


class ArrayPlan(ctypes.Structure):
    """Mirror of rsdlpack::layout::ArrayPlan."""
    _fields_ = [
        ("tensor", ctypes.c_void_p),
        ("parent_address", ctypes.c_size_t),
        ("ndims", ctypes.c_int64),
        ("dims", DIMS),
        ("parent_dims", DIMS),
        ("starts", DIMS),
        ("steps", DIMS),
        ("lengths", DIMS),
        ("permutation", DIMS),
        ("element_code", ctypes.c_uint32),
        ("device_type", ctypes.c_uint32),
        ("device_id", ctypes.c_int32),
        ("kind", ctypes.c_uint8),
        ("read_only", ctypes.c_uint8),
        ("needs_view", ctypes.c_uint8),
        ("needs_permutation", ctypes.c_uint8),
    ]

    def dims_(self):
        return [self.dims[k] for k in range(self.ndims)]

    def parent_dims_(self):
        return [self.parent_dims[k] for k in range(self.ndims)]

    def permutation_(self):
        return [self.permutation[k] for k in range(self.ndims)]

    def ranges_(self):
        return [(self.starts[k], self.steps[k], self.lengths[k]) for k in range(self.ndims)]


PLAN_VIEW, PLAN_EMPTY, PLAN_COPY = PLAN_KIND_VIEW, PLAN_KIND_EMPTY, PLAN_KIND_COPY


class PlanOptions(ctypes.Structure):
    """Mirror of RsdlPlanOptions (bridges/python/src/c_abi/import_plan.rs)."""
    _fields_ = [
        ("element_code", ctypes.c_int64),
        ("ndims", ctypes.c_int64),
        ("target", ctypes.c_uint32),
        ("order", ctypes.c_uint32),
        ("copy", ctypes.c_int32),
        ("readonly", ctypes.c_uint32),
        ("dense", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]

    @classmethod
    def of(cls, element_code=PLAN_ANY, ndims=PLAN_ANY, target=TARGET_HOST_ARRAY, order=INDEX_ORDER_PRODUCER,
           copy=COPY_IF_NEEDED, readonly=ACCESS_WRITABLE, dense=DENSE_ANY_LAYOUT):
        return cls(element_code, ndims, target, order, copy, readonly, dense, 0)


class ImportResult(ctypes.Structure):
    _fields_ = [("plan", ArrayPlan), ("released_roots", ctypes.c_uint64)]


class StridedPlan(ctypes.Structure):
    """Mirror of RsdlStridedPlan (bridges/python/src/c_abi/strided_plan.rs)."""
    _fields_ = [
        ("tensor", ctypes.c_void_p),
        ("span_address", ctypes.c_size_t),
        ("span_byte_offset", ctypes.c_int64),
        ("span_len", ctypes.c_int64),
        ("offset", ctypes.c_int64),
        ("ndims", ctypes.c_int64),
        ("dims", DIMS),
        ("strides", DIMS),
        ("released_roots", ctypes.c_uint64),
        ("element_code", ctypes.c_uint32),
        ("device_type", ctypes.c_uint32),
        ("device_id", ctypes.c_int32),
        ("kind", ctypes.c_uint8),
        ("read_only", ctypes.c_uint8),
        ("reserved", ctypes.c_uint16),
    ]

    def dims_(self):
        return [self.dims[k] for k in range(self.ndims)]

    def strides_(self):
        return [self.strides[k] for k in range(self.ndims)]


class ArrayExport(ctypes.Structure):
    """Mirror of RsdlArrayExport: a "Julia array" to share."""
    _fields_ = [
        ("address", ctypes.c_size_t),
        ("dims", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("ndims", ctypes.c_int64),
        ("root_id", ctypes.c_uint64),
        ("stream", ctypes.c_size_t),
        ("element_code", ctypes.c_uint32),
        ("order", ctypes.c_uint32),
        ("device_type", ctypes.c_uint32),
        ("device_id", ctypes.c_int32),
        ("read_only", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class ShareResult(ctypes.Structure):
    _fields_ = [("exporter", ctypes.py_object), ("released_roots", ctypes.c_uint64)]


# rsdlpack::ElementType::code of the named types (RsdlElementCode), by NumPy's dtype name; raw-byte
# elements (fp8/fp6/fp4) have codes from RAW_CODE_BASE up.
NUMPY_NAMES = {"COMPLEX_F32": "complex64", "COMPLEX_F64": "complex128"}
ELEMENT_CODES = {NUMPY_NAMES.get(name, name).lower(): code for name, code in (
    (key.removeprefix("ELEMENT_CODE_"), value) for key, value in vars(rsdlpack_abi).items()
    if key.startswith("ELEMENT_CODE_"))}


def raw_element_code(dlpack_code, bits):
    return RAW_CODE_BASE + (dlpack_code << 8) + bits


class Bridge:
    """Thin typed wrappers over the entry points; errors become (code, message)."""

    def __init__(self, path, loader):
        self.path = path
        self.lib = loader(path)
        lib = self.lib
        lib.rsdlpack_py_import.argtypes = [ctypes.py_object, ctypes.POINTER(ImportOptions), ctypes.POINTER(TENSOR_P), ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_py_import.restype = ctypes.c_int32
        lib.rsdlpack_py_import_with_flags.argtypes = [ctypes.py_object, ctypes.POINTER(ImportOptions), ctypes.c_uint32, ctypes.POINTER(TENSOR_P), ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_py_import_with_flags.restype = ctypes.c_int32
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
        lib.rsdlpack_py_import_plan.argtypes = [ctypes.py_object, ctypes.POINTER(ImportOptions), ctypes.POINTER(PlanOptions), ctypes.POINTER(ImportResult), ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_py_import_plan.restype = ctypes.c_int32
        lib.rsdlpack_imported_copy_into.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_imported_copy_into.restype = ctypes.c_int32
        lib.rsdlpack_imported_release.argtypes = [ctypes.c_void_p]
        lib.rsdlpack_imported_release.restype = None
        lib.rsdlpack_imported_release_later.argtypes = [ctypes.c_void_p]
        lib.rsdlpack_imported_release_later.restype = None
        lib.rsdlpack_imported_release_after.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_imported_release_after.restype = ctypes.c_int32
        lib.rsdlpack_imported_keep_stream_alive.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        lib.rsdlpack_imported_keep_stream_alive.restype = None
        lib.rsdlpack_py_share.argtypes = [ctypes.POINTER(ArrayExport), ctypes.POINTER(ShareResult), ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_py_share.restype = ctypes.c_int32
        lib.rsdlpack_py_share_into.argtypes = [ctypes.POINTER(ArrayExport), ctypes.py_object, ctypes.POINTER(ShareResult), ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_py_share_into.restype = ctypes.c_int32
        lib.rsdlpack_py_import_plan_with_flags.argtypes = [ctypes.py_object, ctypes.POINTER(ImportOptions), ctypes.POINTER(PlanOptions), ctypes.c_uint32, ctypes.POINTER(ImportResult), ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_py_import_plan_with_flags.restype = ctypes.c_int32
        lib.rsdlpack_py_import_plans.argtypes = [ctypes.py_object, ctypes.POINTER(ImportOptions), ctypes.POINTER(PlanOptions), ctypes.c_uint32, ctypes.POINTER(ImportResult), ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_py_import_plans.restype = ctypes.c_int32
        lib.rsdlpack_py_import_strided_plan.argtypes = [ctypes.py_object, ctypes.POINTER(ImportOptions), ctypes.POINTER(PlanOptions), ctypes.c_uint32, ctypes.POINTER(StridedPlan), ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_py_import_strided_plan.restype = ctypes.c_int32
        lib.rsdlpack_py_share_with_flags.argtypes = [ctypes.POINTER(ArrayExport), ctypes.c_uint32, ctypes.POINTER(ShareResult), ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_py_share_with_flags.restype = ctypes.c_int32
        lib.rsdlpack_py_share_into_with_flags.argtypes = [ctypes.POINTER(ArrayExport), ctypes.py_object, ctypes.c_uint32, ctypes.POINTER(ShareResult), ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_py_share_into_with_flags.restype = ctypes.c_int32
        lib.rsdlpack_py_flush_releases_with_flags.argtypes = [ctypes.c_uint32, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_py_flush_releases_with_flags.restype = ctypes.c_int32
        lib.rsdlpack_py_take_released_roots.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        lib.rsdlpack_py_take_released_roots.restype = ctypes.c_size_t
        lib.rsdlpack_py_tensor_device.argtypes = [ctypes.py_object, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_void_p)]
        lib.rsdlpack_py_tensor_device.restype = ctypes.c_int32

    def _message(self, pointer):
        text = ctypes.string_at(pointer.value).decode()
        self.lib.rsdlpack_error_free(pointer)
        return text

    def import_(self, obj, options=None, flags=None):
        """rsdlpack_py_import, or rsdlpack_py_import_with_flags when `flags` is given."""
        out = TENSOR_P()
        error = ctypes.c_void_p()
        opts = ctypes.byref(options) if options is not None else None
        if flags is None:
            code = self.lib.rsdlpack_py_import(obj, opts, ctypes.byref(out), ctypes.byref(error))
        else:
            code = self.lib.rsdlpack_py_import_with_flags(obj, opts, flags, ctypes.byref(out), ctypes.byref(error))
        if code != 0:
            return None, (code, self._message(error))
        return out, None

    def export(self, tensor, stream=0):
        out = ctypes.py_object()
        error = ctypes.c_void_p()
        code = self.lib.rsdlpack_py_export_with_stream(tensor, stream, ctypes.byref(out), ctypes.byref(error))
        if code != 0:
            return None, (code, self._message(error))
        return adopt(out.value), None

    def import_plan(self, obj, plan_options=None, options=None, flags=None):
        """(ImportResult, None) or (None, (code, message)); with `flags`, through
        rsdlpack_py_import_plan_with_flags."""
        out = ImportResult()
        error = ctypes.c_void_p()
        opts = ctypes.byref(options) if options is not None else None
        plan_options = plan_options if plan_options is not None else PlanOptions.of()
        if flags is None:
            code = self.lib.rsdlpack_py_import_plan(obj, opts, ctypes.byref(plan_options), ctypes.byref(out), ctypes.byref(error))
        else:
            code = self.lib.rsdlpack_py_import_plan_with_flags(obj, opts, ctypes.byref(plan_options), flags, ctypes.byref(out),
                                                               ctypes.byref(error))
        if code != 0:
            return None, (code, self._message(error))
        return out, None

    def import_plans(self, objects, plan_options=None, options=None, flags=0, count=None):
        """rsdlpack_py_import_plans on the tuple `objects` (`count` results, by default one per
        item), into results filled with 0xFF bytes first: (a ctypes array of ImportResult, None)
        or (None, (code, message))."""
        count = len(objects) if count is None else count
        out = (ImportResult * max(count, 1))()
        ctypes.memset(out, 0xFF, ctypes.sizeof(out))  # what an uninitialized Julia vector may hold
        error = ctypes.c_void_p()
        opts = ctypes.byref(options) if options is not None else None
        plan_options = plan_options if plan_options is not None else PlanOptions.of()
        code = self.lib.rsdlpack_py_import_plans(objects, opts, ctypes.byref(plan_options), flags, out, count,
                                                 ctypes.byref(error))
        if code != 0:
            return None, (code, self._message(error))
        return out, None

    def tensor_device(self, obj, flags=0):
        """rsdlpack_py_tensor_device: ((device_type, device_id), None) or (None, (code, message))."""
        device_type, device_id = ctypes.c_uint32(), ctypes.c_int32()
        error = ctypes.c_void_p()
        code = self.lib.rsdlpack_py_tensor_device(obj, flags, ctypes.byref(device_type), ctypes.byref(device_id),
                                                  ctypes.byref(error))
        if code != 0:
            return None, (code, self._message(error))
        return (device_type.value, device_id.value), None

    def import_strided_plan(self, obj, plan_options=None, options=None, flags=0):
        """rsdlpack_py_import_strided_plan: (StridedPlan, None) or (None, (code, message))."""
        out = StridedPlan()
        error = ctypes.c_void_p()
        opts = ctypes.byref(options) if options is not None else None
        plan_options = plan_options if plan_options is not None else PlanOptions.of()
        code = self.lib.rsdlpack_py_import_strided_plan(obj, opts, ctypes.byref(plan_options), flags, ctypes.byref(out),
                                                        ctypes.byref(error))
        if code != 0:
            return None, (code, self._message(error))
        return out, None

    def copy_into(self, handle, buffer):
        """Copies into a ctypes buffer and releases the handle; None or (code, message)."""
        error = ctypes.c_void_p()
        code = self.lib.rsdlpack_imported_copy_into(handle, ctypes.cast(buffer, ctypes.c_void_p), ctypes.sizeof(buffer), ctypes.byref(error))
        return None if code == 0 else (code, self._message(error))

    def release_handle(self, handle):
        self.lib.rsdlpack_imported_release(handle)

    def release_later(self, handle):
        self.lib.rsdlpack_imported_release_later(handle)

    def keep_stream_alive(self, handle, root_id):
        """rsdlpack_imported_keep_stream_alive: root `root_id` comes back once the release has
        recorded its event on the import's stream (at once when nothing will be)."""
        self.lib.rsdlpack_imported_keep_stream_alive(handle, root_id)

    def release_after(self, handle, stream):
        """rsdlpack_imported_release_after: None, or (code, message); released either way."""
        error = ctypes.c_void_p()
        code = self.lib.rsdlpack_imported_release_after(handle, stream, ctypes.byref(error))
        return None if code == 0 else (code, self._message(error))

    def share(self, address, dims, strides, element_code, root_id, order=INDEX_ORDER_PRODUCER, read_only=ACCESS_WRITABLE,
              device=(1, 0), stream=0, into=None, flags=None):
        """Shares memory described Julia-style; (exporter, released_roots) or (None, (code, message)).
        With `into` (a type), through rsdlpack_py_share_into: the object is one of that type. With
        `flags`, through the entry point's _with_flags form."""
        n = len(dims)
        dims_c = (ctypes.c_int64 * max(n, 1))(*dims)
        strides_c = (ctypes.c_int64 * max(n, 1))(*strides)
        array = ArrayExport(address, dims_c, strides_c, n, root_id, stream, element_code, order, device[0], device[1], read_only, 0)
        out = ShareResult()
        error = ctypes.c_void_p()
        if into is None and flags is None:
            code = self.lib.rsdlpack_py_share(ctypes.byref(array), ctypes.byref(out), ctypes.byref(error))
        elif into is None:
            code = self.lib.rsdlpack_py_share_with_flags(ctypes.byref(array), flags, ctypes.byref(out), ctypes.byref(error))
        elif flags is None:
            code = self.lib.rsdlpack_py_share_into(ctypes.byref(array), into, ctypes.byref(out), ctypes.byref(error))
        else:
            code = self.lib.rsdlpack_py_share_into_with_flags(ctypes.byref(array), into, flags, ctypes.byref(out),
                                                              ctypes.byref(error))
        if code != 0:
            return None, (code, self._message(error))
        return (adopt(out.exporter), out.released_roots), None

    def flush_releases(self, flags):
        """rsdlpack_py_flush_releases_with_flags: (released, None) or (None, (code, message))."""
        released = ctypes.c_size_t(0)
        error = ctypes.c_void_p()
        code = self.lib.rsdlpack_py_flush_releases_with_flags(flags, ctypes.byref(released), ctypes.byref(error))
        if code != 0:
            return None, (code, self._message(error))
        return released.value, None

    def take_released_roots(self):
        taken = []
        batch = (ctypes.c_uint64 * 4)()
        while True:
            n = self.lib.rsdlpack_py_take_released_roots(batch, 4)
            taken.extend(batch[:n])
            if n < 4:
                return taken

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


# (DLPack type code, bits) of the element types that the array libraries name alike ("float32").
DLPACK_DTYPES = {
    "bool": (6, 8),
    "int8": (0, 8),
    "int16": (0, 16),
    "int32": (0, 32),
    "int64": (0, 64),
    "uint8": (1, 8),
    "uint16": (1, 16),
    "uint32": (1, 32),
    "uint64": (1, 64),
    "float16": (2, 16),
    "bfloat16": (4, 16),
    "float32": (2, 32),
    "float64": (2, 64),
    "complex64": (5, 64),
    "complex128": (5, 128),
}


def flush(bridge):
    """Collects garbage, then runs the releases it queued."""
    gc.collect()
    bridge.lib.rsdlpack_py_flush_releases()


def forget_earlier_roots(bridge):
    """Takes the roots that earlier tests left (a failed test's frame frees its arrays late)."""
    flush(bridge)
    bridge.take_released_roots()


def imported(bridge, obj, options=None):
    """rsdlpack_py_import's tensor, asserting that it succeeded."""
    tensor, error = bridge.import_(obj, options)
    assert error is None, error
    return tensor


def share_numpy(bridge, backing, dims, strides, root_id, **options):
    """A "Julia array" over a NumPy buffer (`dims` and `strides` in elements, Julia's) shared as
    an exporter, asserting that it succeeded."""
    code = ELEMENT_CODES[str(backing.dtype)]
    (exporter, _), error = bridge.share(backing.ctypes.data, dims, strides, code, root_id=root_id, **options)
    assert error is None, error
    return exporter
