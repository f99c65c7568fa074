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
 * on size); a 16x16 one for the round trips; Julia's one call on each layout beside
 * np.from_dlpack of the same view; and, where torch imports, a 3x4 torch tensor beside
 * torch's own C exchange API, and shares into torch beside torch.from_dlpack(ndarray).
 */
#include <Python.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rsdlpack.h"

/* Callgrind's client requests (valgrind's header; no-ops when not run under valgrind): the
 * `budget` mode counts each path's instructions alone (scripts/budgets.sh). */
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define HAVE_CALLGRIND 1
#endif
#endif

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

enum { ROUNDS = 31, CALLS = 20000, MAX_ROWS = 40 };

/* The DLPack 1.3 C exchange API table (dlpack.h), as much of it as these rows call. */
typedef struct {
    uint32_t major, minor;
    void *prev_api;
    void *managed_tensor_allocator;
    int (*from_py_object)(void *object, Managed **out);
    int (*to_py_object)(Managed *tensor, void **out);
    void *dltensor_from_py_object;
    void *current_work_stream;
} ExchangeApi;

static struct {
    int (*import)(PyObject *, const RsdlImportOptions *, DLManagedTensorVersioned **, char **);
    void (*release)(DLManagedTensorVersioned *);
    int (*import_plan)(PyObject *, const RsdlImportOptions *, const RsdlPlanOptions *,
                       RsdlImportResult *, char **);
    /* Julia's entry (julia/python_bridge.jl); absent from older libraries, which are then
     * timed through rsdlpack_py_import_plan. */
    int (*import_plan_with_flags)(PyObject *, const RsdlImportOptions *, const RsdlPlanOptions *,
                                  uint32_t, RsdlImportResult *, char **);
    /* A differentiable call's results in one call; absent from older libraries (rows left out). */
    int (*import_plans)(PyObject *, const RsdlImportOptions *, const RsdlPlanOptions *, uint32_t,
                        RsdlImportResult *, size_t, char **);
    void (*imported_release)(void *);
    int (*export_)(DLManagedTensorVersioned *, PyObject **, char **);
    int (*share)(const RsdlArrayExport *, RsdlShareResult *, char **);
    /* Absent from libraries older than the entry point: its rows are then left out. */
    int (*share_into)(const RsdlArrayExport *, PyObject *, RsdlShareResult *, char **);
    size_t (*take_released_roots)(uint64_t *, size_t);
} lib;

static PyObject *array, *square, *from_dlpack, *dlpack_name, *kw_version, *kw_version_device,
    *version, *cpu;
static const RsdlImportOptions CPU = {.has_device = 1, .device_type = 1, .copy = -1};
/* What Julia's from_dlpack(Array, a) asks of the planner. */
static const RsdlPlanOptions JULIA_ARRAY = {.element_code = -1, .ndims = -1, .copy = -1};
/* The flags it passes for an Array (julia/import.jl, import_flags(true)). */
static const uint32_t JULIA_FLAGS = RSDLPACK_CALL_REFUSE_WITHOUT_GIL | RSDLPACK_PLAN_WRITABLE_TYPE;
static float backing[256];
static const int64_t dims[2] = {16, 16}, strides[2] = {1, 16};

/* Julia's one call per layout: C order, transposed and stepped, 3x4 and 1024x1024. */
enum { LAYOUTS = 6 };
static const char *layout_names[LAYOUTS] = {"C 3x4",        "transposed 3x4",
                                            "stepped 3x4",  "C 1024^2",
                                            "transposed 1024^2", "stepped 1024^2"};
static PyObject *layouts[LAYOUTS];
static PyObject *layout; /* the one the current row times */

/* torch, where it imports; `torch_tuple` holds TUPLE of its tensors (a differentiable call's
 * results: the output and the gradients of an MLP's four parameters). */
enum { TUPLE = 5 };
static PyObject *torch_tensor, *torch_type, *torch_from_dlpack, *torch_tuple;
static const ExchangeApi *torch_api;

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

static void import_from(PyObject *object, const RsdlImportOptions *options) {
    DLManagedTensorVersioned *tensor = NULL;
    check(lib.import(object, options, &tensor, NULL), "rsdlpack_py_import");
    lib.release(tensor);
}
static void ours(void) { import_from(array, NULL); }
static void ours_device(void) { import_from(array, &CPU); }

static void julia_from(PyObject *object) {
    RsdlImportResult result;
    if (lib.import_plan_with_flags) {
        check(lib.import_plan_with_flags(object, &CPU, &JULIA_ARRAY, JULIA_FLAGS, &result, NULL),
              "rsdlpack_py_import_plan_with_flags");
    } else {
        check(lib.import_plan(object, &CPU, &JULIA_ARRAY, &result, NULL), "rsdlpack_py_import_plan");
    }
    lib.imported_release(result.plan.tensor);
}
static void julia(void) { julia_from(array); }
static void julia_layout(void) { julia_from(layout); }
static void numpy_layout(void) { drop(PyObject_CallOneArg(from_dlpack, layout)); }

static void free_managed(Managed *managed) { free(managed); }

/* A row-major 16x16 float32 host tensor over `backing`, owned by C (freed by its deleter). */
static Managed *host_tensor(void) {
    Managed *managed = malloc(sizeof(Managed) + 4 * sizeof(int64_t));
    int64_t *meta = (int64_t *)(managed + 1);
    memcpy(meta, dims, sizeof dims);
    memcpy(meta + 2, (int64_t[]){16, 1}, sizeof dims);
    *managed = (Managed){.major = 1, .minor = 3, .deleter = free_managed,
                         .tensor = {.data = backing, .device_type = 1, .ndim = 2, .code = 2,
                                    .bits = 32, .lanes = 1, .shape = meta, .strides = meta + 2}};
    return managed;
}

/* A host tensor owned by C, handed to rsdlpack_py_export and consumed by NumPy. */
static void export_round_trip(void) {
    Managed *managed = host_tensor();
    PyObject *exporter = NULL;
    check(lib.export_((DLManagedTensorVersioned *)managed, &exporter, NULL), "rsdlpack_py_export");
    drop(PyObject_CallOneArg(from_dlpack, exporter));
    Py_DECREF(exporter);
}

/* Julia's share of a 16x16 Float32 array; roots taken back as Julia does. */
static RsdlArrayExport shared_array(void) {
    static uint64_t next_root = 1;
    return (RsdlArrayExport){.address = (size_t)backing, .dims = dims, .strides = strides,
                             .ndims = 2, .root_id = next_root++, .element_code = 11,
                             .device_type = 1};
}

static void take_roots(const RsdlShareResult *result) {
    if (result->released_roots > 0) {
        uint64_t batch[64];
        lib.take_released_roots(batch, 64);
    }
}

static void share_to(PyObject *consumer) {
    RsdlArrayExport description = shared_array();
    RsdlShareResult result;
    check(lib.share(&description, &result, NULL), "rsdlpack_py_share");
    take_roots(&result);
    drop(PyObject_CallOneArg(consumer, result.exporter));
    Py_DECREF(result.exporter);
}
static void share(void) { share_to(from_dlpack); }
static void share_torch(void) { share_to(torch_from_dlpack); }

/* share(A, torch.Tensor): the torch tensor made through torch's own C exchange API. */
static void share_into_torch(void) {
    RsdlArrayExport description = shared_array();
    RsdlShareResult result;
    check(lib.share_into(&description, torch_type, &result, NULL), "rsdlpack_py_share_into");
    take_roots(&result);
    Py_DECREF(result.exporter);
}

static void numpy_round_trip(void) { drop(PyObject_CallOneArg(from_dlpack, square)); }
static void torch_round_trip(void) { drop(PyObject_CallOneArg(torch_from_dlpack, square)); }

/* torch's floor: its own managed_tensor_from_py_object_no_sync and the tensor's deleter. */
static void torch_floor(void) {
    Managed *tensor = NULL;
    check(torch_api->from_py_object(torch_tensor, &tensor), "managed_tensor_from_py_object_no_sync");
    tensor->deleter(tensor);
}
/* torch's floor for a share into it: its own managed_tensor_to_py_object_no_sync on a C-owned
 * 16x16 tensor, and the torch tensor's release (which calls the deleter). */
static void torch_to_py_floor(void) {
    void *object = NULL;
    check(torch_api->to_py_object(host_tensor(), &object), "managed_tensor_to_py_object_no_sync");
    Py_DECREF((PyObject *)object);
}
static void ours_torch(void) { import_from(torch_tensor, NULL); }
static void julia_torch(void) { julia_from(torch_tensor); }
/* Julia's import of a call's results: the tuple in one call, each handle released. */
static void julia_torch_tuple(void) {
    RsdlImportResult results[TUPLE];
    check(lib.import_plans(torch_tuple, &CPU, &JULIA_ARRAY, JULIA_FLAGS, results, TUPLE, NULL),
          "rsdlpack_py_import_plans");
    for (int k = 0; k < TUPLE; k++) {
        lib.imported_release(results[k].plan.tensor);
    }
}
/* Its floor: torch's own call and deleter once per tensor. */
static void torch_floor_tuple(void) {
    for (int k = 0; k < TUPLE; k++) {
        torch_floor();
    }
}

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

/* The rows: each a competitor and, for the layout rows, the object it is timed on. */
typedef struct {
    const char *name;
    void (*run)(void);
    PyObject *layout;
    double median;
} Row;
static Row rows[MAX_ROWS];
static int row_count;

static int add(const char *name, void (*run)(void), PyObject *on) {
    rows[row_count] = (Row){.name = name, .run = run, .layout = on};
    return row_count++;
}

static void run_row(Row *row) {
    layout = row->layout;
    row->run();
}

/* Every row, the competitors alternating round by round; each row's median. */
static void measure(void) {
    static double samples[MAX_ROWS][ROUNDS];
    for (int r = 0; r < row_count; r++) {
        for (int i = 0; i < CALLS / 10; i++) {
            run_row(&rows[r]); /* warm up */
        }
    }
    for (int round = 0; round < ROUNDS; round++) {
        for (int r = 0; r < row_count; r++) {
            layout = rows[r].layout;
            void (*run)(void) = rows[r].run;
            double start = now();
            for (int i = 0; i < CALLS; i++) {
                run();
            }
            samples[r][round] = (now() - start) / CALLS;
        }
    }
    for (int r = 0; r < row_count; r++) {
        qsort(samples[r], ROUNDS, sizeof(double), ascending);
        rows[r].median = samples[r][ROUNDS / 2];
        printf("%26s %6.0f ns\n", rows[r].name, rows[r].median);
    }
}

/* The paths scripts/budgets.sh budgets, each with the peer's own call it is read against
 * (benches/budgets.toml): our code's instructions are a path's count less its floor's. */
typedef struct {
    const char *name;
    void (*run)(void);
    PyObject **on; /* the layout the path is run on, or NULL */
    int needs_torch;
} Path;

/* budget N, under `valgrind --tool=callgrind --instr-atstart=no`: each path warmed up, then
 * run N and 2N times, each batch's instructions dumped alone ("PATH xCALLS"); a batch's
 * difference divided by N is the path's instructions per call, start-up and warm-up apart. */
static int budget(long calls, int torch) {
#ifdef HAVE_CALLGRIND
    if (!RUNNING_ON_VALGRIND) {
        fprintf(stderr, "budget: run under valgrind --tool=callgrind --instr-atstart=no "
                        "(scripts/budgets.sh)\n");
        return 2;
    }
    static const Path paths[] = {
        {"numpy floor", floor_plain, NULL, 0},
        {"numpy import", ours, NULL, 0},
        {"julia numpy", julia, NULL, 0},
        {"julia numpy stepped 3x4", julia_layout, &layouts[2], 0},
        {"numpy round trip", numpy_round_trip, NULL, 0},
        {"share round trip", share, NULL, 0},
        {"export round trip", export_round_trip, NULL, 0},
        {"torch floor", torch_floor, NULL, 1},
        {"torch import", ours_torch, NULL, 1},
        {"julia torch", julia_torch, NULL, 1},
        {"torch floor x5", torch_floor_tuple, NULL, 1},
        {"julia torch tuple of 5", julia_torch_tuple, NULL, 1},
        {"torch to_py floor", torch_to_py_floor, NULL, 1},
        {"share into torch", share_into_torch, NULL, 1},
    };
    CALLGRIND_START_INSTRUMENTATION;
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        if ((paths[p].needs_torch && !torch) || (paths[p].run == julia_torch_tuple && !lib.import_plans)) {
            continue;
        }
        layout = paths[p].on ? *paths[p].on : NULL;
        for (int i = 0; i < 100; i++) {
            paths[p].run(); /* warm-up: first-call work (caches, type lookups) not counted */
        }
        CALLGRIND_ZERO_STATS;
        for (long batch = calls; batch <= 2 * calls; batch += calls) {
            for (long i = 0; i < batch; i++) {
                paths[p].run();
            }
            char name[96];
            snprintf(name, sizeof name, "%s x%ld", paths[p].name, batch);
            CALLGRIND_DUMP_STATS_AT(name);
        }
    }
    CALLGRIND_STOP_INSTRUMENTATION;
    return 0;
#else
    (void)calls;
    (void)torch;
    fprintf(stderr, "budget: built without valgrind's <valgrind/callgrind.h>\n");
    return 2;
#endif
}

/* torch.Tensor and its exchange table, or a message saying why the torch rows are left out. */
static int load_torch(void) {
    PyObject *torch = PyImport_ImportModule("torch");
    if (torch == NULL) {
        PyErr_Clear();
        printf("NOT RUN: the torch rows (torch does not import here)\n");
        return 0;
    }
    torch_type = PyObject_GetAttrString(torch, "Tensor");
    torch_from_dlpack = PyObject_GetAttrString(torch, "from_dlpack");
    torch_tensor = PyObject_CallMethod(torch, "ones", "(ii)", 3, 4);
    torch_tuple = PyTuple_New(TUPLE);
    for (int k = 0; torch_tuple && torch_tensor && k < TUPLE; k++) {
        Py_INCREF(torch_tensor);
        PyTuple_SET_ITEM(torch_tuple, k, torch_tensor);
    }
    PyObject *capsule = torch_type ? PyObject_GetAttrString(torch_type, "__dlpack_c_exchange_api__")
                                   : NULL;
    torch_api = capsule ? PyCapsule_GetPointer(capsule, "dlpack_exchange_api") : NULL;
    if (!torch_type || !torch_from_dlpack || !torch_tensor || !torch_tuple || !torch_api) {
        PyErr_Clear();
        printf("NOT RUN: the torch rows (this torch has no __dlpack_c_exchange_api__)\n");
        return 0;
    }
    return 1;
}

/* NumPy's arrays: the 12-element one, the 16x16 one, and the layouts. */
static int load_numpy(void) {
    PyObject *np = PyImport_ImportModule("numpy");
    if (np == NULL) {
        return 0;
    }
    array = PyObject_CallMethod(np, "ones", "(i)s", 12, "float32");
    square = PyObject_CallMethod(np, "ones", "(ii)s", 16, 16, "float32");
    from_dlpack = PyObject_GetAttrString(np, "from_dlpack");
    PyObject *views = PyDict_New();
    PyDict_SetItemString(views, "np", np);
    PyObject *made = PyRun_String(
        "[np.ones((3, 4), 'float32'), np.ones((4, 3), 'float32').T,\n"
        " np.ones((6, 8), 'float32')[::2, ::2], np.ones((1024, 1024), 'float32'),\n"
        " np.ones((1024, 1024), 'float32').T, np.ones((2048, 2048), 'float32')[::2, ::2]]",
        Py_eval_input, views, views);
    if (!array || !square || !from_dlpack || !made) {
        return 0;
    }
    for (int i = 0; i < LAYOUTS; i++) {
        layouts[i] = PyList_GetItem(made, i);
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr,
                "usage: %s librsdlpack_python.so "
                "[profile-import|profile-julia|profile-layout-K|profile-numpy-layout-K|profile-numpy|"
                "profile-share|profile-export|profile-torch|profile-torch-import|profile-torch-floor|"
                "profile-share-into|budget N]\n",
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
    *(void **)&lib.import_plan_with_flags = dlsym(handle, "rsdlpack_py_import_plan_with_flags");
    *(void **)&lib.imported_release = symbol(handle, "rsdlpack_imported_release");
    *(void **)&lib.import_plans = dlsym(handle, "rsdlpack_py_import_plans");
    *(void **)&lib.export_ = symbol(handle, "rsdlpack_py_export");
    *(void **)&lib.share = symbol(handle, "rsdlpack_py_share");
    *(void **)&lib.share_into = dlsym(handle, "rsdlpack_py_share_into");
    *(void **)&lib.take_released_roots = symbol(handle, "rsdlpack_py_take_released_roots");

    dlpack_name = PyUnicode_InternFromString("__dlpack__");
    kw_version = Py_BuildValue("(s)", "max_version");
    kw_version_device = Py_BuildValue("(ss)", "max_version", "dl_device");
    version = Py_BuildValue("(ii)", 1, 3);
    cpu = Py_BuildValue("(ii)", 1, 0);
    if (!load_numpy() || !dlpack_name || !kw_version || !version || !cpu) {
        PyErr_Print();
        return 1;
    }
    int torch = load_torch();

    if (argc > 3 && strcmp(argv[2], "budget") == 0) {
        return budget(atol(argv[3]), torch);
    }
    if (argc > 2) { /* one competitor in a loop, for perf record */
        const char *which = argv[2];
        /* profile-layout-K: Julia's one call on layout K (0..5, in layout_names order);
         * profile-numpy-layout-K: np.from_dlpack of it; profile-numpy: NumPy -> NumPy 16x16. */
        if (strncmp(which, "profile-layout-", 15) == 0) {
            layout = layouts[atoi(which + 15) % LAYOUTS];
        }
        if (strncmp(which, "profile-numpy-layout-", 21) == 0) {
            layout = layouts[atoi(which + 21) % LAYOUTS];
        }
        void (*loop)(void) = strncmp(which, "profile-layout-", 15) == 0 ? julia_layout
                             : strncmp(which, "profile-numpy-layout-", 21) == 0 ? numpy_layout
                             : strcmp(which, "profile-numpy") == 0 ? numpy_round_trip
                             : strcmp(which, "profile-julia") == 0   ? julia
                             : strcmp(which, "profile-share") == 0 ? share
                             : strcmp(which, "profile-export") == 0 ? export_round_trip
                             : strcmp(which, "profile-torch") == 0 && torch ? julia_torch
                             : strcmp(which, "profile-torch-import") == 0 && torch ? ours_torch
                             : strcmp(which, "profile-torch-floor") == 0 && torch ? torch_floor
                             : strcmp(which, "profile-share-into") == 0 && torch && lib.share_into
                                 ? share_into_torch
                                 : ours_device;
        /* RSDLPACK_BENCH_CALLS: fewer calls, e.g. for callgrind (BENCHMARKS.md, Method). */
        const char *calls = getenv("RSDLPACK_BENCH_CALLS");
        long count = calls ? atol(calls) : 20000000;
        for (long i = 0; i < count; i++) {
            loop();
        }
        return 0;
    }

    int np_row = add("np.from_dlpack", numpy, NULL);
    int floor_row = add("floor", floor_plain, NULL);
    add("floor+dev", floor_device, NULL);
    int ours_row = add("ours", ours, NULL);
    int ours_device_row = add("ours+dev", ours_device, NULL);
    int julia_row = add("julia", julia, NULL);
    int export_row = add("export", export_round_trip, NULL);
    int share_row = add("share", share, NULL);
    int square_row = add("numpy 16x16", numpy_round_trip, NULL);
    int layout_rows[LAYOUTS];
    for (int i = 0; i < LAYOUTS; i++) {
        layout_rows[i] = add(layout_names[i], numpy_layout, layouts[i]);
        add("  julia", julia_layout, layouts[i]);
    }
    int torch_rows = row_count;
    if (torch) {
        add("torch C API floor", torch_floor, NULL);
        add("ours torch", ours_torch, NULL);
        add("julia torch", julia_torch, NULL);
        add("torch.from_dlpack 16x16", torch_round_trip, NULL);
        add("share -> torch.from_dlpack", share_torch, NULL);
        add("torch to_py floor", torch_to_py_floor, NULL);
        if (lib.share_into) {
            add("share_into torch.Tensor", share_into_torch, NULL);
        }
    }
    measure();

    double np_ns = rows[np_row].median, floor_ns = rows[floor_row].median;
    printf("import (rsdlpack_py_import + release) vs np.from_dlpack: %.2fx; beyond the floor: %.0f ns\n",
           rows[ours_row].median / np_ns, rows[ours_row].median - floor_ns);
    printf("  with dl_device=(CPU, 0), what from_dlpack(Array, ...) passes: %.2fx; beyond the floor: %.0f ns\n",
           rows[ours_device_row].median / np_ns, rows[ours_device_row].median - floor_ns);
    printf("Julia's path (rsdlpack_py_import_plan_with_flags + rsdlpack_imported_release): %.2fx; beyond the floor: %.0f ns\n",
           rows[julia_row].median / np_ns, rows[julia_row].median - floor_ns);
    for (int i = 0; i < LAYOUTS; i++) {
        printf("  Julia's path vs np.from_dlpack, %s: %.2fx\n", layout_names[i],
               rows[layout_rows[i] + 1].median / rows[layout_rows[i]].median);
    }
    printf("export round trip (rsdlpack_py_export -> np.from_dlpack) vs NumPy -> NumPy: %.2fx\n",
           rows[export_row].median / rows[square_row].median);
    printf("Julia's share (rsdlpack_py_share -> np.from_dlpack) vs NumPy -> NumPy: %.2fx\n",
           rows[share_row].median / rows[square_row].median);
    if (torch) {
        double floor_torch = rows[torch_rows].median, torch_np = rows[torch_rows + 3].median;
        printf("torch import (rsdlpack_py_import + release): %.0f ns beyond torch's C API floor\n",
               rows[torch_rows + 1].median - floor_torch);
        printf("Julia's path on a torch tensor: %.0f ns beyond torch's C API floor\n",
               rows[torch_rows + 2].median - floor_torch);
        printf("share -> torch.from_dlpack vs torch.from_dlpack(ndarray): %.2fx\n",
               rows[torch_rows + 4].median / torch_np);
        double to_py = rows[torch_rows + 5].median;
        if (lib.share_into) {
            double into = rows[torch_rows + 6].median;
            printf("share_into torch.Tensor vs torch.from_dlpack(ndarray): %.2fx; vs torch's C API "
                   "import floor: %.2fx; %.0f ns beyond torch's own managed_tensor_to_py_object_no_sync\n",
                   into / torch_np, into / floor_torch, into - to_py);
        } else {
            printf("NOT RUN: share_into (this library has no rsdlpack_py_share_into)\n");
        }
    }
    return 0;
}
