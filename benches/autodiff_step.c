/*
 * A differentiable call's step as Julia makes it, with no ctypes in the way: a CPython extension
 * module (built by benches/autodiff_overhead.py with the venv interpreter's headers) whose
 * `Stepper.step()` makes, in C, the calls julia/autodiff.jl's forward_call and pullback_call make
 * through ccall and PyCall/PythonCall: share each input into the callable's tensor type, call the
 * Python half's forward, read its `codes`, `outputs` and `pullback`, import the outputs in one
 * call, share the cotangent, call the pullback, read its `codes` and `tensors`, import them in
 * one call, release every result and take the released roots back. A Module's parameters are
 * shared at the first step and kept, as the Lux layer keeps them. The ctypes route the pytest
 * suite uses costs per call what Julia's ccall does not; this one costs what it costs Julia, less
 * Julia's own wrapping of the results (its arrays and their finalizers).
 *
 * `Stepper(None, ...)` makes the same step over the floor instead of the bridge: torch's DLPack
 * C exchange API called directly for the same crossings, nothing checked and nothing counted,
 * the least any bridge through that API does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <time.h>

/* torch's DLPack header (1.3: the C exchange API's table), from torch's include directory. */
#include <ATen/dlpack.h>

#include "rsdlpack.h"

/* Callgrind's client requests (valgrind's header; no-ops when not run under valgrind): the
 * instruction count of the step's bridge calls, per step and per size (scripts/budgets.py). */
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#endif
#endif
#ifndef CALLGRIND_ZERO_STATS
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_DUMP_STATS_AT(label) ((void)(label))
#endif

enum { MAX_ARRAYS = 32, MAX_RESULTS = 32, ROOTS = 64 };

static const RsdlImportOptions CPU = {.has_device = 1, .device_type = 1, .copy = -1};
/* What Julia's import_results asks of the planner for a host result (order reversed). */
static const RsdlPlanOptions REVERSED_ARRAY = {
    .element_code = -1, .ndims = -1, .order = RSDL_INDEX_ORDER_REVERSED, .copy = -1};
/* The flags it passes for an Array (julia/import.jl, import_flags(true)). */
static const uint32_t IMPORT_FLAGS = RSDLPACK_CALL_REFUSE_WITHOUT_GIL | RSDLPACK_PLAN_WRITABLE_TYPE;

typedef struct {
    int32_t (*share_into)(const RsdlArrayExport *, PyObject *, uint32_t, RsdlShareResult *, char **);
    int32_t (*import_plans)(PyObject *, const RsdlImportOptions *, const RsdlPlanOptions *, uint32_t,
                            RsdlImportResult *, size_t, char **);
    void (*release)(void *);
    size_t (*take_released_roots)(uint64_t *, size_t);
} Entries;

/* A Julia array as `share` describes it: (features, batch) dims over a C-order NumPy buffer. */
typedef struct {
    Py_buffer view;
    int64_t dims[2], strides[2];
    RsdlArrayExport export_;
} JuliaArray;

typedef struct {
    PyObject_HEAD
    Entries lib;
    PyObject *forward, *prefix, *tensor_type;
    JuliaArray arrays[MAX_ARRAYS]; /* the parameters, then the input, then the cotangent */
    Py_ssize_t n_params, n_arrays;
    PyObject *kept[MAX_ARRAYS]; /* the parameters' tensors, shared at the first step */
    uint64_t next_root;
    double bridge_seconds; /* time in the crossings' C calls (the bridge's or the floor's), when the step is timed */
    RsdlImportResult outputs[MAX_RESULTS], cotangents[MAX_RESULTS];
    uint64_t roots[ROOTS];
} Stepper;

/* Releases each result that holds a handle (a None item's holds none). */
static void release_results(void (*release)(void *), const RsdlImportResult *results, size_t count) {
    for (size_t k = 0; k < count; k++) {
        if (results[k].plan.tensor) {
            release(results[k].plan.tensor);
        }
    }
}

/* The floor's entries: torch's exchange table called directly, with the entry points'
 * signatures so that run_step makes the same step over them. A share is the table's
 * managed_tensor_to_py_object_no_sync over a DLManagedTensorVersioned made here (freed by its
 * deleter); an import its managed_tensor_from_py_object_no_sync, the plan given only what Julia
 * needs to make an Array (address, dims, element type, device); a release the tensor's deleter.
 * No validation, no layout decision, no roots: not a bridge, a measure of how close to free one
 * can be. */
static const DLPackExchangeAPI *floor_table;

typedef struct {
    DLManagedTensorVersioned managed;
    int64_t shape[2], strides[2];
} FloorExport;

static void floor_export_deleter(DLManagedTensorVersioned *managed) { free(managed->manager_ctx); }

static char *floor_message(const char *what) {
    PyErr_Clear();
    return strdup(what);
}

static int32_t floor_share_into(const RsdlArrayExport *array, PyObject *tensor_type, uint32_t flags,
                                RsdlShareResult *result, char **error) {
    (void)tensor_type;
    (void)flags;
    FloorExport *export_ = malloc(sizeof *export_);
    if (!export_) {
        *error = floor_message("floor share: out of memory");
        return 1;
    }
    int ndims = (int)array->ndims; /* Julia's column-major dims: C order reversed */
    for (int k = 0; k < ndims; k++) {
        export_->shape[k] = array->dims[ndims - 1 - k];
        export_->strides[k] = array->strides[ndims - 1 - k];
    }
    export_->managed = (DLManagedTensorVersioned){
        .version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION},
        .manager_ctx = export_,
        .deleter = floor_export_deleter,
        .dl_tensor = {.data = (void *)array->address, .device = {kDLCPU, 0}, .ndim = ndims,
                      .dtype = {kDLFloat, 32, 1}, .shape = export_->shape, .strides = export_->strides},
    };
    void *object = NULL;
    if (floor_table->managed_tensor_to_py_object_no_sync(&export_->managed, &object) != 0) {
        *error = floor_message("floor share: managed_tensor_to_py_object_no_sync failed");
        return 1;
    }
    result->exporter = object;
    result->released_roots = 0;
    return 0;
}

static void floor_release(void *tensor) {
    DLManagedTensorVersioned *managed = tensor;
    if (managed->deleter) {
        managed->deleter(managed);
    }
}

static int32_t floor_import_plans(PyObject *objects, const RsdlImportOptions *options, const RsdlPlanOptions *plan,
                                  uint32_t flags, RsdlImportResult *results, size_t n, char **error) {
    (void)options;
    (void)plan;
    (void)flags;
    for (size_t k = 0; k < n; k++) {
        RsdlArrayPlan *out = &results[k].plan;
        PyObject *item = PyTuple_GET_ITEM(objects, (Py_ssize_t)k);
        if (item == Py_None) {
            out->tensor = NULL;
            continue;
        }
        DLManagedTensorVersioned *managed = NULL;
        if (floor_table->managed_tensor_from_py_object_no_sync(item, &managed) != 0) {
            release_results(floor_release, results, k);
            *error = floor_message("floor import: managed_tensor_from_py_object_no_sync failed");
            return 1;
        }
        const DLTensor *t = &managed->dl_tensor;
        out->tensor = managed;
        out->parent_address = (size_t)t->data + (size_t)t->byte_offset;
        out->ndims = t->ndim;
        for (int32_t d = 0; d < t->ndim; d++) {
            out->dims[d] = t->shape[t->ndim - 1 - d];
        }
        out->element_code = RSDL_ELEMENT_CODE_FLOAT32; /* the step's tensors are all float32 */
        out->device_type = (uint32_t)t->device.device_type;
        out->device_id = t->device.device_id;
        results[k].released_roots = 0;
    }
    return 0;
}

static size_t floor_take_released_roots(uint64_t *roots, size_t capacity) {
    (void)roots;
    (void)capacity;
    return 0;
}

/* The floor's entries, or -1 with an exception where `tensor_type` has no usable table. */
static int floor_entries(PyObject *tensor_type, Entries *lib) {
    PyObject *capsule = PyObject_GetAttrString(tensor_type, "__dlpack_c_exchange_api__");
    if (!capsule) {
        return -1;
    }
    const DLPackExchangeAPI *table = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
    Py_DECREF(capsule); /* the table is a static of its producer */
    if (!table) {
        return -1;
    }
    if (table->header.version.major != 1 || !table->managed_tensor_from_py_object_no_sync ||
        !table->managed_tensor_to_py_object_no_sync) {
        PyErr_SetString(PyExc_RuntimeError, "the floor needs a DLPack 1.x exchange table with both functions");
        return -1;
    }
    floor_table = table;
    *lib = (Entries){floor_share_into, floor_import_plans, floor_release, floor_take_released_roots};
    return 0;
}

static PyObject *codes_name, *outputs_name, *pullback_name, *tensors_name;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Raises the bridge's message (or `what` without one) and frees the message. */
static PyObject *bridge_error(const char *what, int32_t code, char *message) {
    PyErr_Format(PyExc_RuntimeError, "%s failed (code %d): %s", what, (int)code, message ? message : "(no message)");
    free(message);
    return NULL;
}

static PyObject *share(Stepper *self, JuliaArray *array) {
    RsdlShareResult result;
    char *message = NULL;
    array->export_.root_id = ++self->next_root;
    int32_t code = self->lib.share_into(&array->export_, self->tensor_type, 0, &result, &message);
    if (code != 0) {
        return bridge_error("rsdlpack_py_share_into_with_flags", code, message);
    }
    return result.exporter;
}

/* `codes` read as Julia's python_ints reads it: every item an int. */
static int read_codes(PyObject *result, long *codes, Py_ssize_t capacity, Py_ssize_t *count) {
    PyObject *tuple = PyObject_GetAttr(result, codes_name);
    if (!tuple) {
        return -1;
    }
    Py_ssize_t n = PyTuple_Check(tuple) ? PyTuple_GET_SIZE(tuple) : -1;
    if (n < 0 || n > capacity) {
        Py_DECREF(tuple);
        PyErr_SetString(PyExc_ValueError, "codes: not a tuple of at most 2 + 2 * 32 ints");
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        codes[k] = PyLong_AsLong(PyTuple_GET_ITEM(tuple, k));
    }
    Py_DECREF(tuple);
    *count = n;
    return PyErr_Occurred() ? -1 : 0;
}

/* Imports the tuple `objects` in one call into `results` (their handles null for None items). */
static int import_all(Stepper *self, PyObject *objects, RsdlImportResult *results, Py_ssize_t *count) {
    Py_ssize_t n = PyTuple_Check(objects) ? PyTuple_GET_SIZE(objects) : -1;
    if (n < 0 || n > MAX_RESULTS) {
        PyErr_SetString(PyExc_ValueError, "results: not a tuple of at most 32 items");
        return -1;
    }
    char *message = NULL;
    int32_t code = self->lib.import_plans(objects, &CPU, &REVERSED_ARRAY, IMPORT_FLAGS, results, (size_t)n,
                                          &message);
    if (code != 0) {
        bridge_error("rsdlpack_py_import_plans", code, message);
        return -1;
    }
    *count = n;
    return 0;
}

static void release_all(Stepper *self, RsdlImportResult *results, Py_ssize_t count) {
    release_results(self->lib.release, results, (size_t)count);
}

/* One forward + pullback; with `timed`, the time in the bridge's calls is added up. */
static PyObject *run_step(Stepper *self, int timed) {
    double bridge = 0, t = timed ? now() : 0;
#define BRIDGE_TIME()                                                                                                  \
    do {                                                                                                               \
        if (timed) {                                                                                                   \
            double t2 = now();                                                                                         \
            bridge += t2 - t;                                                                                          \
            t = t2;                                                                                                    \
        }                                                                                                              \
    } while (0)
#define PYTHON_TIME()                                                                                                  \
    do {                                                                                                               \
        if (timed) {                                                                                                   \
            t = now();                                                                                                 \
        }                                                                                                              \
    } while (0)
    Py_ssize_t n_prefix = PyTuple_GET_SIZE(self->prefix);
    JuliaArray *input = &self->arrays[self->n_params], *cotangent = input + 1;
    long codes[2 + 2 * MAX_RESULTS];
    Py_ssize_t n_codes, n_outputs, n_cotangents;

    PyObject *args = PyTuple_New(n_prefix + self->n_params + 1);
    if (!args) {
        return NULL;
    }
    for (Py_ssize_t k = 0; k < n_prefix; k++) {
        PyObject *item = PyTuple_GET_ITEM(self->prefix, k);
        Py_INCREF(item);
        PyTuple_SET_ITEM(args, k, item);
    }
    for (Py_ssize_t k = 0; k < self->n_params; k++) {
        if (!self->kept[k] && !(self->kept[k] = share(self, &self->arrays[k]))) {
            Py_DECREF(args);
            return NULL;
        }
        Py_INCREF(self->kept[k]);
        PyTuple_SET_ITEM(args, n_prefix + k, self->kept[k]);
    }
    PyObject *shared = share(self, input);
    if (!shared) {
        Py_DECREF(args);
        return NULL;
    }
    PyTuple_SET_ITEM(args, n_prefix + self->n_params, shared);
    BRIDGE_TIME();
    PyObject *result = PyObject_Call(self->forward, args, NULL);
    Py_DECREF(args); /* release_shared!: the input is the forward's now */
    if (!result) {
        return NULL;
    }
    PyObject *outputs = NULL, *pullback = NULL;
    if (read_codes(result, codes, 2 + 2 * MAX_RESULTS, &n_codes) != 0 ||
        !(outputs = PyObject_GetAttr(result, outputs_name)) || !(pullback = PyObject_GetAttr(result, pullback_name))) {
        Py_DECREF(result);
        Py_XDECREF(outputs);
        return NULL;
    }
    Py_DECREF(result);
    PYTHON_TIME();
    /* Julia lets go of `outputs` here; the step holds it until its releases have run, so that
     * the results' memory is freed outside the bridge's time (torch alone frees its results too). */
    int failed = import_all(self, outputs, self->outputs, &n_outputs);
    if (!failed && n_outputs < 1) {
        PyErr_SetString(PyExc_ValueError, "the forward returned no outputs to take a cotangent for");
        failed = 1;
    }
    if (failed) {
        Py_DECREF(outputs);
        Py_DECREF(pullback);
        return NULL;
    }
    shared = share(self, cotangent);
    if (!shared) {
        release_all(self, self->outputs, n_outputs);
        Py_DECREF(outputs);
        Py_DECREF(pullback);
        return NULL;
    }
    BRIDGE_TIME();
    args = PyTuple_New(n_outputs);
    if (args) {
        PyTuple_SET_ITEM(args, 0, shared);
        for (Py_ssize_t k = 1; k < n_outputs; k++) {
            Py_INCREF(Py_None);
            PyTuple_SET_ITEM(args, k, Py_None);
        }
        result = PyObject_Call(pullback, args, NULL);
        Py_DECREF(args);
    } else {
        Py_DECREF(shared);
        result = NULL;
    }
    Py_DECREF(pullback); /* the pullback has run: what the forward saved goes with it */
    PyObject *tensors = NULL;
    if (!result || read_codes(result, codes, 2 * MAX_RESULTS, &n_codes) != 0 ||
        !(tensors = PyObject_GetAttr(result, tensors_name))) {
        Py_XDECREF(result);
        release_all(self, self->outputs, n_outputs);
        Py_DECREF(outputs);
        return NULL;
    }
    Py_DECREF(result);
    PYTHON_TIME();
    failed = import_all(self, tensors, self->cotangents, &n_cotangents);
    release_all(self, self->outputs, n_outputs); /* what Julia's arrays do when they are collected */
    if (!failed) {
        release_all(self, self->cotangents, n_cotangents);
        while (self->lib.take_released_roots(self->roots, ROOTS) == ROOTS) { /* Julia's unroot_released! */
        }
        BRIDGE_TIME();
        self->bridge_seconds += bridge;
    }
    Py_DECREF(tensors);
    Py_DECREF(outputs);
    if (failed) {
        return NULL;
    }
    Py_RETURN_NONE;
#undef BRIDGE_TIME
#undef PYTHON_TIME
}

static PyObject *Stepper_step(PyObject *self, PyObject *unused) {
    (void)unused;
    return run_step((Stepper *)self, 0);
}

static PyObject *Stepper_timed_step(PyObject *self, PyObject *unused) {
    (void)unused;
    return run_step((Stepper *)self, 1);
}

static PyObject *Stepper_bridge_seconds(PyObject *self, void *closure) {
    (void)closure;
    return PyFloat_FromDouble(((Stepper *)self)->bridge_seconds);
}

static int describe(JuliaArray *array, PyObject *object) {
    if (PyObject_GetBuffer(object, &array->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        return -1;
    }
    if (array->view.ndim < 1 || array->view.ndim > 2 || strcmp(array->view.format, "f") != 0) {
        PyBuffer_Release(&array->view);
        array->view.obj = NULL;
        PyErr_SetString(PyExc_ValueError, "arrays: C-contiguous float32 of 1 or 2 dims");
        return -1;
    }
    /* Julia's (features, batch) array: the buffer's dims reversed, column-major strides. */
    int ndims = array->view.ndim;
    for (int k = 0; k < ndims; k++) {
        array->dims[k] = array->view.shape[ndims - 1 - k];
    }
    array->strides[0] = 1;
    array->strides[1] = array->dims[0];
    array->export_ = (RsdlArrayExport){.address = (size_t)array->view.buf,
                                       .dims = array->dims,
                                       .strides = array->strides,
                                       .ndims = ndims,
                                       .element_code = RSDL_ELEMENT_CODE_FLOAT32,
                                       .order = RSDL_INDEX_ORDER_REVERSED,
                                       .device_type = 1};
    return 0;
}

/* The bridge's four entry points, from the library at `path` (a str). */
static int load_entries(PyObject *path, Entries *lib) {
    const char *library = PyUnicode_AsUTF8(path);
    if (!library) {
        return -1;
    }
    void *handle = dlopen(library, RTLD_NOW | RTLD_GLOBAL);
    if (!handle) {
        PyErr_Format(PyExc_OSError, "dlopen %s: %s", library, dlerror());
        return -1;
    }
    lib->share_into = dlsym(handle, "rsdlpack_py_share_into_with_flags");
    lib->import_plans = dlsym(handle, "rsdlpack_py_import_plans");
    lib->release = dlsym(handle, "rsdlpack_imported_release");
    lib->take_released_roots = dlsym(handle, "rsdlpack_py_take_released_roots");
    if (!lib->share_into || !lib->import_plans || !lib->release || !lib->take_released_roots) {
        PyErr_Format(PyExc_OSError, "%s lacks an entry point the step calls", library);
        return -1;
    }
    return 0;
}

static int Stepper_init(PyObject *object, PyObject *args, PyObject *kwargs) {
    Stepper *self = (Stepper *)object;
    PyObject *library;
    PyObject *params;
    PyObject *x, *cotangent;
    static char *names[] = {"library", "forward", "prefix", "tensor_type", "params", "x", "cotangent", NULL};
    if (self->forward) {
        PyErr_SetString(PyExc_TypeError, "Stepper is initialised once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO!OO!OO", names, &library, &self->forward, &PyTuple_Type,
                                     &self->prefix, &self->tensor_type, &PyTuple_Type, &params, &x, &cotangent)) {
        self->forward = self->prefix = self->tensor_type = NULL; /* borrowed, if parsed at all */
        return -1;
    }
    Py_INCREF(self->forward);
    Py_INCREF(self->prefix);
    Py_INCREF(self->tensor_type);
    if (PyTuple_GET_SIZE(params) + 2 > MAX_ARRAYS) {
        PyErr_SetString(PyExc_ValueError, "params: at most 30");
        return -1;
    }
    if (library == Py_None) {
        if (floor_entries(self->tensor_type, &self->lib) != 0) {
            return -1;
        }
    } else if (load_entries(library, &self->lib) != 0) {
        return -1;
    }
    self->n_params = PyTuple_GET_SIZE(params);
    for (Py_ssize_t k = 0; k < self->n_params + 2; k++) {
        PyObject *array = k < self->n_params ? PyTuple_GET_ITEM(params, k) : k == self->n_params ? x : cotangent;
        if (describe(&self->arrays[k], array) != 0) {
            return -1;
        }
        self->n_arrays = k + 1;
    }
    return 0;
}

static void Stepper_dealloc(PyObject *object) {
    Stepper *self = (Stepper *)object;
    for (Py_ssize_t k = 0; k < MAX_ARRAYS; k++) {
        Py_XDECREF(self->kept[k]);
    }
    for (Py_ssize_t k = 0; k < self->n_arrays; k++) {
        PyBuffer_Release(&self->arrays[k].view);
    }
    Py_XDECREF(self->forward);
    Py_XDECREF(self->prefix);
    Py_XDECREF(self->tensor_type);
    Py_TYPE(object)->tp_free(object);
}

static PyMethodDef Stepper_methods[] = {
    {"step", Stepper_step, METH_NOARGS, "One forward + pullback as Julia makes it."},
    {"timed_step", Stepper_timed_step, METH_NOARGS, "The same, adding the time in the bridge's calls up."},
    {NULL, NULL, 0, NULL},
};

static PyObject *zero_stats(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    CALLGRIND_ZERO_STATS;
    Py_RETURN_NONE;
}

static PyObject *dump_stats(PyObject *module, PyObject *label) {
    (void)module;
    const char *text = PyUnicode_AsUTF8(label);
    if (!text) {
        return NULL;
    }
    CALLGRIND_DUMP_STATS_AT(text);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"zero_stats", zero_stats, METH_NOARGS, "Callgrind's counts set to zero (nothing outside valgrind)."},
    {"dump_stats", dump_stats, METH_O, "Callgrind's counts since the last zero or dump, written under a label."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Stepper_getset[] = {
    {"bridge_seconds", Stepper_bridge_seconds, NULL,
     "Seconds in the crossings' calls (the bridge's, or the floor's) over the timed steps.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject StepperType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rsdlpack_autodiff_step.Stepper",
    .tp_basicsize = sizeof(Stepper),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Stepper(library, forward, prefix, tensor_type, params, x, cotangent): Julia's step, in C (library None: "
               "over the floor, torch's exchange table called directly).",
    .tp_new = PyType_GenericNew,
    .tp_init = Stepper_init,
    .tp_dealloc = Stepper_dealloc,
    .tp_methods = Stepper_methods,
    .tp_getset = Stepper_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "rsdlpack_autodiff_step", .m_doc = "Julia's differentiable step, made in C.",
    .m_size = -1, .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit_rsdlpack_autodiff_step(void) {
    codes_name = PyUnicode_InternFromString("codes");
    outputs_name = PyUnicode_InternFromString("outputs");
    pullback_name = PyUnicode_InternFromString("pullback");
    tensors_name = PyUnicode_InternFromString("tensors");
    if (!codes_name || !outputs_name || !pullback_name || !tensors_name || PyType_Ready(&StepperType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (!m) {
        return NULL;
    }
    Py_INCREF(&StepperType);
    if (PyModule_AddObject(m, "Stepper", (PyObject *)&StepperType) < 0) {
        Py_DECREF(&StepperType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
