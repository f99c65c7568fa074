/*
 * The shipped library, timed as its callers call it: a C program that embeds CPython, holds
 * the GIL on its main thread (as Julia's PyCall and PythonCall do), loads
 * librsdlpack_python.so with dlopen and calls the entry points of include/rsdlpack.h, beside
 * NumPy's own from_dlpack called through the C API. The in-process Rust bench (exchange.rs)
 * links the bridge's code into the test binary instead, inlined differently and with pyo3
 * already attached, so it reads lower: this is the measure that counts.
 *
 *     bash scripts/bench.sh        (builds this with the venv interpreter's headers and library)
 *     target/bench/shipped path/to/librsdlpack_python.so [profile-import|profile-julia|profile-share]
 *
 * Every row is the median of 31 rounds of 20000 calls, the competitors alternating round by
 * round. A NumPy float32 array of 12 elements (the Rust bench shows the costs do not depend
 * on size); a 16x16 one for the round trips.
 */
#include <Python.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rsdlpack.h"

/* The DLPack 1.x ABI, as much of it as a producer of a host tensor needs. */
typedef struct {
    void *data;
    int32_t device_type, device_id;
    int32_t ndim;
    uint8_t code, bits;
    uint16_t lanes;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} Tensor;
typedef struct Managed {
    uint32_t major, minor;
    void *manager_ctx;
    void (*deleter)(struct Managed *);
    uint64_t flags;
    Tensor tensor;
} Managed;

enum { ROUNDS = 31, CALLS = 20000, COMPETITORS = 9 };

static struct {
    int (*import)(PyObject *, const RsdlImportOptions *, DLManagedTensorVersioned **, char **);
    void (*release)(DLManagedTensorVersioned *);
    int (*import_plan)(PyObject *, const RsdlImportOptions *, const RsdlPlanOptions *,
                       RsdlImportResult *, char **);
    void (*imported_release)(void *);
    int (*export_)(DLManagedTensorVersioned *, PyObject **, char **);
    int (*share)(const RsdlArrayExport *, RsdlShareResult *, char **);
    size_t (*take_released_roots)(uint64_t *, size_t);
} lib;

static PyObject *array, *square, *from_dlpack, *dlpack_name, *kw_version, *kw_version_device,
    *version, *cpu;
static const RsdlImportOptions CPU = {.has_device = 1, .device_type = 1, .copy = -1};
/* What Julia's from_dlpack(Array, a) asks of the planner. */
static const RsdlPlanOptions JULIA_ARRAY = {.element_code = -1, .ndims = -1, .copy = -1};
static float backing[256];
static const int64_t dims[2] = {16, 16}, strides[2] = {1, 16};

static void check(int code, const char *what) {
    if (code != 0) {
        fprintf(stderr, "%s failed with code %d\n", what, code);
        exit(1);
    }
}

static void drop(PyObject *object) {
    if (object == NULL) {
        PyErr_Print();
        exit(1);
    }
    Py_DECREF(object);
}

static void numpy(void) { drop(PyObject_CallOneArg(from_dlpack, array)); }

static void floor_plain(void) {
    PyObject *args[] = {array, version};
    drop(PyObject_VectorcallMethod(dlpack_name, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                   kw_version));
}

static void floor_device(void) {
    PyObject *args[] = {array, version, cpu};
    drop(PyObject_VectorcallMethod(dlpack_name, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                   kw_version_device));
}

static void import_with(const RsdlImportOptions *options) {
    DLManagedTensorVersioned *tensor = NULL;
    check(lib.import(array, options, &tensor, NULL), "rsdlpack_py_import");
    lib.release(tensor);
}
static void ours(void) { import_with(NULL); }
static void ours_device(void) { import_with(&CPU); }

static void julia(void) {
    RsdlImportResult result;
    check(lib.import_plan(array, &CPU, &JULIA_ARRAY, &result, NULL), "rsdlpack_py_import_plan");
    lib.imported_release(result.plan.tensor);
}

static void free_managed(Managed *managed) { free(managed); }

/* A host tensor owned by C, handed to rsdlpack_py_export and consumed by NumPy. */
static void export_round_trip(void) {
    Managed *managed = malloc(sizeof(Managed) + 4 * sizeof(int64_t));
    int64_t *meta = (int64_t *)(managed + 1);
    memcpy(meta, dims, sizeof dims);
    memcpy(meta + 2, (int64_t[]){16, 1}, sizeof dims);
    *managed = (Managed){.major = 1, .minor = 3, .deleter = free_managed,
                         .tensor = {.data = backing, .device_type = 1, .ndim = 2, .code = 2,
                                    .bits = 32, .lanes = 1, .shape = meta, .strides = meta + 2}};
    PyObject *exporter = NULL;
    check(lib.export_((DLManagedTensorVersioned *)managed, &exporter, NULL), "rsdlpack_py_export");
    drop(PyObject_CallOneArg(from_dlpack, exporter));
    Py_DECREF(exporter);
}

/* Julia's share of a 16x16 Float32 array, consumed by NumPy; roots taken back as Julia does. */
static void share(void) {
    static uint64_t next_root = 1;
    RsdlArrayExport description = {.address = (size_t)backing, .dims = dims, .strides = strides,
                              .ndims = 2, .root_id = next_root++, .element_code = 11,
                              .device_type = 1};
    RsdlShareResult result;
    check(lib.share(&description, &result, NULL), "rsdlpack_py_share");
    if (result.released_roots > 0) {
        uint64_t batch[64];
        lib.take_released_roots(batch, 64);
    }
    drop(PyObject_CallOneArg(from_dlpack, result.exporter));
    Py_DECREF(result.exporter);
}

static void numpy_round_trip(void) { drop(PyObject_CallOneArg(from_dlpack, square)); }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int ascending(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *symbol(void *handle, const char *name) {
    void *found = dlsym(handle, name);
    if (found == NULL) {
        fprintf(stderr, "%s: %s\n", name, dlerror());
        exit(1);
    }
    return found;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s librsdlpack_python.so [profile-import|profile-julia|profile-share]\n",
                argv[0]);
        return 2;
    }
    Py_Initialize();
    void *handle = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    *(void **)&lib.import = symbol(handle, "rsdlpack_py_import");
    *(void **)&lib.release = symbol(handle, "rsdlpack_tensor_release");
    *(void **)&lib.import_plan = symbol(handle, "rsdlpack_py_import_plan");
    *(void **)&lib.imported_release = symbol(handle, "rsdlpack_imported_release");
    *(void **)&lib.export_ = symbol(handle, "rsdlpack_py_export");
    *(void **)&lib.share = symbol(handle, "rsdlpack_py_share");
    *(void **)&lib.take_released_roots = symbol(handle, "rsdlpack_py_take_released_roots");

    PyObject *np = PyImport_ImportModule("numpy");
    if (np == NULL) {
        PyErr_Print();
        return 1;
    }
    array = PyObject_CallMethod(np, "ones", "(i)s", 12, "float32");
    square = PyObject_CallMethod(np, "ones", "(ii)s", 16, 16, "float32");
    from_dlpack = PyObject_GetAttrString(np, "from_dlpack");
    dlpack_name = PyUnicode_InternFromString("__dlpack__");
    kw_version = Py_BuildValue("(s)", "max_version");
    kw_version_device = Py_BuildValue("(ss)", "max_version", "dl_device");
    version = Py_BuildValue("(ii)", 1, 3);
    cpu = Py_BuildValue("(ii)", 1, 0);
    if (!array || !square || !from_dlpack || !dlpack_name || !kw_version || !version || !cpu) {
        PyErr_Print();
        return 1;
    }

    if (argc > 2) { /* one competitor in a loop, for perf record */
        void (*loop)(void) = strcmp(argv[2], "profile-julia") == 0   ? julia
                             : strcmp(argv[2], "profile-share") == 0 ? share
                                                                     : ours_device;
        for (long i = 0; i < 20000000; i++) {
            loop();
        }
        return 0;
    }

    static const char *names[COMPETITORS] = {
        "np.from_dlpack", "floor",  "floor+dev", "ours",         "ours+dev",
        "julia",          "export", "share",     "numpy 16x16"};
    void (*competitors[COMPETITORS])(void) = {numpy,       floor_plain, floor_device,
                                              ours,        ours_device, julia,
                                              export_round_trip, share, numpy_round_trip};
    static double samples[COMPETITORS][ROUNDS];
    for (int c = 0; c < COMPETITORS; c++) {
        for (int i = 0; i < CALLS / 10; i++) {
            competitors[c](); /* warm up */
        }
    }
    for (int round = 0; round < ROUNDS; round++) {
        for (int c = 0; c < COMPETITORS; c++) {
            double start = now();
            for (int i = 0; i < CALLS; i++) {
                competitors[c]();
            }
            samples[c][round] = (now() - start) / CALLS;
        }
    }
    double median[COMPETITORS];
    for (int c = 0; c < COMPETITORS; c++) {
        qsort(samples[c], ROUNDS, sizeof(double), ascending);
        median[c] = samples[c][ROUNDS / 2];
        printf("%16s %6.0f ns\n", names[c], median[c]);
    }
    double np_ns = median[0];
    printf("import (rsdlpack_py_import + release) vs np.from_dlpack: %.2fx; beyond the floor: %.0f ns\n",
           median[3] / np_ns, median[3] - median[1]);
    printf("  with dl_device=(CPU, 0), what from_dlpack(Array, ...) passes: %.2fx; beyond the floor: %.0f ns\n",
           median[4] / np_ns, median[4] - median[1]);
    printf("Julia's path (rsdlpack_py_import_plan + rsdlpack_imported_release): %.2fx; beyond the floor: %.0f ns\n",
           median[5] / np_ns, median[5] - median[1]);
    printf("export round trip (rsdlpack_py_export -> np.from_dlpack) vs NumPy -> NumPy: %.2fx\n",
           median[6] / median[8]);
    printf("Julia's share (rsdlpack_py_share -> np.from_dlpack) vs NumPy -> NumPy: %.2fx\n",
           median[7] / median[8]);
    return 0;
}
