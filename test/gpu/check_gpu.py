"""GPU checks of RsDLPack's CUDA paths, run on a machine with an NVIDIA GPU and Python with
torch, cupy and jax (CUDA builds). Needs no Rust there: it drives the prebuilt Python bridge
(librsdlpack_python.so, built with scripts/gpu_check.sh) through ctypes.

    python3 test/gpu/check_gpu.py test/gpu/lib/librsdlpack_python.so

(test/gpu/run.sh runs this, then the core's Rust GPU tests staged next to the library.)

Every check asserts; the last line reads "N passed, M failed, K skipped" and the exit status is
1 on any failure, 2 when the environment skipped every check (no torch or no GPU here: nothing
was proven), 0 otherwise. A check that needs a newer peer than the one installed is skipped with
the version named, and counted, but does not change the status. It takes several seconds (one
~1 s sleep kernel per ordering or release check); long-kernel checks are judged against that
kernel's own time, measured with CUDA events.

The release checks run one check in a child process with RSDLPACK_TEST_UNORDERED_RELEASES=1
(the library then orders no release; `--unordered-release-child` selects that child's work), to
show that the race they guard against is real and that the check detects it. Only a library
built with the `unordered-releases-for-tests` feature reads that variable (scripts/gpu_check.sh
builds it so); a shipped one ignores it, and that check then fails saying so.
"""

import ctypes
import json
import os
import pathlib
import subprocess
import sys
import time
import traceback

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
from rsdlpack_ctypes import (  # noqa: E402
    ELEMENT_CODE_FLOAT32,
    ELEMENT_CODE_FLOAT64,
    INDEX_ORDER_REVERSED,
    TARGET_CUDA_ARRAY,
    Bridge,
    ImportOptions,
    PlanOptions,
    first_element,
    shape_of,
)

KDLCUDA = 2
RESULTS = []
UNORDERED_CHILD = "--unordered-release-child"
CHILD = UNORDERED_CHILD in sys.argv[1:]
ARGS = [a for a in sys.argv[1:] if a != UNORDERED_CHILD]
LIBRARY = ARGS[0] if ARGS else str(pathlib.Path(__file__).parent / "lib" / "librsdlpack_python.so")

try:
    import torch
except ImportError as e:
    torch = None
    SKIP = f"torch is not importable here ({e})"
else:
    SKIP = None if torch.cuda.is_available() else "torch sees no GPU here"


class Skip(Exception):
    """Raised by a check that the installed peers cannot run (the reason names the version)."""


ENVIRONMENT_SKIPS = 0


def check(name):
    def run(fn):
        global ENVIRONMENT_SKIPS
        if CHILD:
            return fn  # the unordered child runs only its race, reported to the parent
        if SKIP is not None:
            RESULTS.append((name, None, SKIP))
            ENVIRONMENT_SKIPS += 1
            print(f"SKIP {name}: {SKIP}", flush=True)
            return fn
        try:
            detail = fn()
            RESULTS.append((name, True, detail or ""))
            print(f"PASS {name} {detail or ''}", flush=True)
        except Skip as reason:
            RESULTS.append((name, None, str(reason)))
            print(f"SKIP {name}: {reason}", flush=True)
        except Exception:
            RESULTS.append((name, False, traceback.format_exc()))
            print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
        return fn
    return run


def glibc_check(library):
    """Stops with a clear message when this machine's glibc is older than the staged library
    needs (scripts/gpu_check.sh writes the need next to it), rather than failing in dlopen."""
    needed_file = pathlib.Path(library).with_name("glibc_required.txt")
    if not needed_file.exists():
        return
    needed = needed_file.read_text().strip()
    here = os.confstr("CS_GNU_LIBC_VERSION").split()[-1]  # "glibc 2.35" -> "2.35"
    as_tuple = lambda v: tuple(int(p) for p in v.split("."))  # noqa: E731
    if as_tuple(here) < as_tuple(needed):
        print(f"{LIBRARY} needs glibc >= {needed}; this machine has {here}: rebuild it on a machine "
              f"with glibc <= {here} (scripts/gpu_check.sh)", flush=True)
        sys.exit(1)


glibc_check(LIBRARY)

# Loaded as Julia loads it (ccall: the GIL stays held during each call, so explicit releases run
# their deleters at once), and as a plain CDLL (the GIL released around each call: releases
# are queued).
lib = Bridge(LIBRARY, ctypes.CDLL)
lib_gil = Bridge(LIBRARY, ctypes.PyDLL)


def cuda_options(stream):
    return ImportOptions(has_stream=1, stream=stream, has_device=1, device_type=KDLCUDA, device_id=0, copy=-1)


def long_kernel(cycles):
    """Enqueues torch.cuda._sleep(cycles) on the current stream; returns a function giving the
    kernel's own duration in seconds (CUDA events around it; it waits for the kernel)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()

    def seconds():
        end.synchronize()
        return start.elapsed_time(end) / 1000.0

    return seconds


def sleep_cycles_for(seconds):
    """Clock cycles torch.cuda._sleep needs to spin for at least `seconds` on this GPU: warmed
    up first (lazy loading and clock ramp-up inflate a cold launch), then calibrated on kernels
    of >= 200 ms, at the fastest rate of three."""
    long_kernel(1_000_000)()
    cycles = 10_000_000
    while (taken := long_kernel(cycles)()) < 0.2:
        cycles = int(cycles * max(2.0, 0.25 / max(taken, 1e-6)))
    fastest = min(long_kernel(cycles)() for _ in range(3))
    return int(cycles * seconds / fastest)


if SKIP is None:
    torch.cuda.init()
    SLEEP = sleep_cycles_for(1.0)


@check("the driver is found")
def _():
    assert lib.lib.rsdlpack_cuda_driver_available() == 1


@check("torch CUDA tensors import zero-copy (strided view, pointer checked)")
def _():
    t = torch.arange(24, dtype=torch.float32, device="cuda").reshape(4, 6)[:, 1::2]
    stream = torch.cuda.current_stream().cuda_stream or 1
    tensor, error = lib.import_(t, cuda_options(stream))
    assert error is None, error
    assert first_element(tensor) == t.data_ptr()
    assert shape_of(tensor) == (list(t.shape), list(t.stride()))
    assert tensor.contents.dl_tensor.device.device_type == KDLCUDA
    lib.release(tensor)
    return f"at {t.data_ptr():#x}"


@check("cupy CUDA arrays import zero-copy")
def _():
    import cupy

    a = cupy.arange(12, dtype=cupy.float64).reshape(3, 4).T
    tensor, error = lib.import_(a, cuda_options(cupy.cuda.get_current_stream().ptr or 1))
    assert error is None, error
    assert first_element(tensor) == a.data.ptr
    assert shape_of(tensor) == ([4, 3], [s // 8 for s in a.strides])
    lib.release(tensor)


@check("jax CUDA arrays import zero-copy")
def _():
    import jax
    import jax.numpy as jnp

    gpu = jax.devices("gpu")[0]
    x = jax.device_put(jnp.arange(8.0, dtype=jnp.float32), gpu)
    x.block_until_ready()
    tensor, error = lib.import_(x, cuda_options(1))
    assert error is None, error
    assert first_element(tensor) == x.unsafe_buffer_pointer()
    lib.release(tensor)


def producer_tensor_written_slowly(n):
    """A tensor that a long kernel on stream P fills with 7 — not ready until the kernel ends."""
    P = torch.cuda.Stream()
    x = torch.zeros(n, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(P):
        kernel = long_kernel(SLEEP)
        x.fill_(7.0)
    # stream=-1: the exporter (not torch) will order consumers after P.
    tensor, error = lib.import_(x, ImportOptions(has_stream=1, stream=-1, copy=-1))
    assert error is None, error
    exporter, error = lib.export(tensor, P.cuda_stream)
    assert error is None, error
    return x, P, exporter, kernel


def warm_up(consume):
    """Runs `consume` once on a ready tensor so that its kernels are loaded (or, for CuPy,
    compiled) before anything is timed: CUDA's lazy module loading may wait for the running
    kernels of the context when a kernel is first launched, which would look like our wait."""
    x = torch.ones(1024, device="cuda")
    torch.cuda.synchronize()
    tensor, error = lib.import_(x, ImportOptions(has_stream=1, stream=-1, copy=-1))
    assert error is None, error
    exporter, error = lib.export(tensor, torch.cuda.current_stream().cuda_stream or 1)
    assert error is None, error
    consume(exporter)
    torch.cuda.synchronize()


def timed_consumer(consume, n):
    """Host seconds spent in `consume(exporter)` while the producer's kernel runs, whether that
    kernel was still running afterwards, and its own duration; `consume` returns (the array,
    its pointer, its sum)."""
    warm_up(consume)
    x, P, exporter, kernel = producer_tensor_written_slowly(n)
    t0 = time.perf_counter()
    result = consume(exporter)
    host = time.perf_counter() - t0
    still_running = not P.query()
    torch.cuda.synchronize()
    return x, result, host, still_running, kernel()


@check("torch consumer: ordered after the producer by an event, host not blocked")
def _():
    n = 1 << 22
    C = torch.cuda.Stream()

    def consume(exporter):
        with torch.cuda.stream(C):
            y = torch.from_dlpack(exporter)
            return y.data_ptr(), y.sum()

    x, (pointer, total), host, still_running, kernel = timed_consumer(consume, n)
    assert pointer == x.data_ptr(), "zero-copy"
    assert host < 0.5 * kernel, f"the host waited {host:.3f} s of the {kernel:.3f} s kernel (a device-wide or stream sync?)"
    assert still_running, "the producer kernel had finished: no proof that the host did not wait"
    assert total.item() == 7.0 * n, f"the consumer read {total.item()} (not ordered after the producer)"
    return f"host returned in {host * 1000:.1f} ms while the {kernel:.2f} s producer kernel ran"


@check("cupy consumer: ordered after the producer by an event, host not blocked")
def _():
    import cupy

    n = 1 << 22
    C = cupy.cuda.Stream(non_blocking=True)

    def consume(exporter):
        with C:
            z = cupy.from_dlpack(exporter)
            return z.data.ptr, z.sum()

    x, (pointer, total), host, still_running, kernel = timed_consumer(consume, n)
    assert pointer == x.data_ptr(), "zero-copy"
    assert host < 0.5 * kernel, f"the host waited {host:.3f} s of the {kernel:.3f} s kernel"
    assert still_running, "the producer kernel had finished: no proof that the host did not wait"
    assert float(total) == 7.0 * n, f"the consumer read {float(total)}"
    return f"host returned in {host * 1000:.1f} ms"


@check("torch CUDA import through the C exchange API: consumer stream ordered after torch's current_work_stream, host not blocked")
def _():
    class NoPythonProtocol(torch.Tensor):
        """Its __dlpack__ fails, so a successful import can only have used the C exchange API."""

        def __dlpack__(self, *args, **kwargs):
            raise AssertionError("__dlpack__ was called: the C exchange API was not used")

    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        raise Skip(f"torch {torch.__version__} has no __dlpack_c_exchange_api__ (DLPack 1.3 C exchange API)")
    n = 1 << 22
    P, C = torch.cuda.Stream(), torch.cuda.Stream()
    # Warm the consumer's kernels (lazy loading would otherwise wait for running kernels).
    torch.ones(16, device="cuda").sum().item()
    x = torch.zeros(n, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(P):
        kernel = long_kernel(SLEEP)
        x.fill_(7.0)
        # P is torch's current stream now: current_work_stream must name it.
        t0 = time.perf_counter()
        tensor, error = lib.import_(x.as_subclass(NoPythonProtocol), cuda_options(C.cuda_stream))
        host = time.perf_counter() - t0
    assert error is None, error
    assert first_element(tensor) == x.data_ptr(), "zero-copy"
    assert tensor.contents.dl_tensor.device.device_type == KDLCUDA
    # Read the imported memory on C, through an export consumed by torch on C.
    exporter, error = lib.export(tensor, C.cuda_stream)
    assert error is None, error
    with torch.cuda.stream(C):
        y = torch.from_dlpack(exporter)
        total = y.sum()
    producer_running = not P.query()
    consumer_waiting = not C.query()
    C.synchronize()
    kernel = kernel()
    assert host < 0.5 * kernel, f"the host waited {host:.3f} s of the {kernel:.3f} s kernel (a device-wide or stream sync?)"
    assert producer_running, "the producer kernel had finished: no proof that the host did not wait"
    assert consumer_waiting, "the consumer's read already ran: it did not wait for the producer's event"
    assert y.data_ptr() == x.data_ptr()
    assert total.item() == 7.0 * n, f"the consumer read {total.item()} (not ordered after torch's stream)"
    del y, exporter
    return f"host returned in {host * 1000:.1f} ms while the {kernel:.2f} s producer kernel ran"


@check("order_streams: the consumer stream waits, the host does not")
def _():
    P, C = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.zeros(1024, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(P):
        kernel = long_kernel(SLEEP)
        x.fill_(3.0)
    t0 = time.perf_counter()
    assert lib.order_streams(0, P.cuda_stream, C.cuda_stream) is None
    host = time.perf_counter() - t0
    with torch.cuda.stream(C):
        s = x.sum()
    assert not C.query(), "the consumer stream should be waiting on the producer's event"
    C.synchronize()
    kernel = kernel()
    assert host < 0.1 * kernel, f"order_streams took {host:.3f} s of the {kernel:.3f} s kernel"
    assert s.item() == 3.0 * 1024


@check("describe_stream: torch's stream has the current context, device and priority")
def _():
    libcuda = ctypes.CDLL("libcuda.so.1")
    current = ctypes.c_void_p()
    assert libcuda.cuCtxGetCurrent(ctypes.byref(current)) == 0
    s = torch.cuda.Stream(priority=-1)
    d, error = lib.describe_stream(s.cuda_stream)
    assert error is None, error
    assert d.context == current.value, (hex(d.context), hex(current.value or 0))
    assert d.device == torch.cuda.current_device()
    assert d.flags & 1 == 1, "torch streams are non-blocking"
    assert d.priority == s.priority, (d.priority, s.priority)
    _, (code, message) = lib.describe_stream(1)
    assert "default-stream alias" in message
    return f"context {d.context:#x}, device {d.device}, flags {d.flags}, priority {d.priority}"


@check("dl_device=(CPU, 0): a host copy of device memory, for NumPy")
def _():
    import numpy as np

    if tuple(int(p) for p in np.__version__.split(".")[:2]) < (2, 1):
        raise Skip(f"NumPy {np.__version__} has no from_dlpack(device=...) (NumPy >= 2.1)")
    t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4).t()
    tensor, error = lib.import_(t, cuda_options(torch.cuda.current_stream().cuda_stream or 1))
    assert error is None, error
    exporter, error = lib.export(tensor, torch.cuda.current_stream().cuda_stream or 1)
    assert error is None, error
    host = np.from_dlpack(exporter, device="cpu")
    assert host.tolist() == t.cpu().tolist()


@check("dl_device=(CPU, 0) after a long producer kernel: the copy waits for it, with the GIL released")
def _():
    import threading

    import numpy as np

    if tuple(int(p) for p in np.__version__.split(".")[:2]) < (2, 1):
        raise Skip(f"NumPy {np.__version__} has no from_dlpack(device=...) (NumPy >= 2.1)")
    n = 1 << 22
    warm_up(lambda exporter: np.from_dlpack(exporter, device="cpu"))
    x, P, exporter, kernel = producer_tensor_written_slowly(n)
    ticks, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    counter.start()
    time.sleep(0.01)
    before = ticks[0]
    t0 = time.perf_counter()
    host = np.from_dlpack(exporter, device="cpu")
    waited = time.perf_counter() - t0
    during = ticks[0] - before
    stop.set()
    counter.join()
    kernel = kernel()
    assert (host == 7.0).all(), f"the copy read {int((host != 7.0).sum())} elements before the producer wrote them"
    assert waited > 0.5 * kernel, f"the copy returned after {waited:.3f} s of the {kernel:.3f} s kernel: what did it wait for?"
    assert during >= 10, f"another Python thread ran {during} times in {waited:.2f} s: the GIL was held"
    return f"waited {waited:.2f} s; another thread ran {during} times meanwhile"


@check("dl_device=(CPU, 0) with a stream is refused for CUDA memory, as for host memory")
def _():
    t = torch.ones(4, device="cuda")
    tensor, error = lib.import_(t, cuda_options(torch.cuda.current_stream().cuda_stream or 1))
    assert error is None, error
    exporter, error = lib.export(tensor, torch.cuda.current_stream().cuda_stream or 1)
    assert error is None, error
    try:
        exporter.__dlpack__(stream=torch.cuda.current_stream().cuda_stream or 1, dl_device=(1, 0))
    except ValueError as e:
        assert "stream must be None" in str(e), e
    else:
        raise AssertionError("a host copy with a stream was accepted")


@check("managed memory copied to the host (copy=True) waits for its producer's kernel first")
def _():
    import cupy
    import numpy as np

    if tuple(int(p) for p in np.__version__.split(".")[:2]) < (2, 1):
        raise Skip(f"NumPy {np.__version__} has no from_dlpack(device=...) (NumPy >= 2.1)")
    n = 1 << 22
    memory = cupy.cuda.malloc_managed(n * 4)
    a = cupy.ndarray((n,), cupy.float32, cupy.cuda.MemoryPointer(memory, 0))
    a.fill(0)
    cupy.cuda.Device().synchronize()
    device_type = a.__dlpack_device__()[0]
    if int(device_type) != 13:
        raise Skip(f"cupy {cupy.__version__} exports managed memory as device type {int(device_type)}, not kDLCUDAManaged (13)")
    P = torch.cuda.Stream()

    class Memory:
        __cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (a.data.ptr, False), "version": 2}

    view = torch.as_tensor(Memory(), device="cuda")
    with torch.cuda.stream(P):
        kernel = long_kernel(SLEEP)
        view.fill_(7.0)
    tensor, error = lib.import_(a, ImportOptions(has_stream=1, stream=-1, copy=-1))
    assert error is None, error
    assert tensor.contents.dl_tensor.device.device_type == 13
    exporter, error = lib.export(tensor, P.cuda_stream)
    assert error is None, error
    t0 = time.perf_counter()
    host = np.from_dlpack(exporter, device="cpu", copy=True)
    waited = time.perf_counter() - t0
    kernel = kernel()
    assert (host == 7.0).all(), f"the host copy read {int((host != 7.0).sum())} elements before the producer wrote them"
    return f"waited {waited:.2f} s of the {kernel:.2f} s kernel"


def _exported_ones():
    """A CUDA tensor of ones, done, and the bridge's exporter of it (ordered on torch's current
    stream)."""
    x = torch.ones(1 << 20, device="cuda")
    torch.cuda.synchronize()
    tensor, error = lib.import_(x, ImportOptions(has_stream=1, stream=-1, copy=-1))
    assert error is None, error
    exporter, error = lib.export(tensor, torch.cuda.current_stream().cuda_stream or 1)
    assert error is None, error
    return x, exporter


@check("graph capture on the export path: a capturing producer is refused, a capturing consumer's capture stays valid")
def _():
    x, exporter = _exported_ones()
    graph = torch.cuda.CUDAGraph()
    capture_stream = torch.cuda.Stream()
    refused = None
    with torch.cuda.graph(graph, stream=capture_stream):
        # The consumer (torch, capturing): __dlpack__(stream=the capturing stream).
        y = torch.from_dlpack(exporter)
        total = y.sum()
        # A producer that is capturing: its memory has not been written by anything that runs.
        z = torch.ones(8, device="cuda")
        other, error = lib.import_(z, ImportOptions(has_stream=1, stream=-1, copy=-1))
        assert error is None, error
        refused = lib.export(other, torch.cuda.current_stream().cuda_stream)
    graph.replay()
    torch.cuda.synchronize()
    assert total.item() == x.numel(), total.item()
    exported, (code, message) = refused
    assert exported is None and "being captured" in message, (code, message)


@check("an export's consumer released during a capture: no event in the graph, the memory back at the flush")
def _():
    x, exporter = _exported_ones()
    graph = torch.cuda.CUDAGraph()
    capture_stream = torch.cuda.Stream()
    with torch.cuda.graph(graph, stream=capture_stream):
        # The consumer works on the capturing stream and releases its tensor there: its fence
        # falls back to the stream's context (an event would be a node of the graph).
        y = torch.from_dlpack(exporter)
        total = y.sum()
        del y
    graph.replay()  # raises had the capture been invalidated
    torch.cuda.synchronize()
    assert total.item() == x.numel(), total.item()
    before = lib.lib.rsdlpack_py_pending_releases()
    del exporter  # the last holder: the memory's release waits for the context's flush
    pending = lib.lib.rsdlpack_py_pending_releases()
    assert pending == before + 1, (before, pending)
    assert lib.lib.rsdlpack_py_flush_releases() >= 1, "the explicit flush runs it"
    assert lib.lib.rsdlpack_py_pending_releases() == 0


@check("a stream=-1 import released without a stream during a capture: queued, not a context sync that breaks it")
def _():
    x = torch.ones(1 << 20, device="cuda")
    torch.cuda.synchronize()
    result, error = lib_gil.import_plan(x, PlanOptions.of(target=1), ImportOptions(has_stream=1, stream=-1, copy=-1))
    assert error is None, error
    handle = result.plan.tensor
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = x * 2
        lib_gil.release_handle(handle)  # the conservative release: queued for the flush
        probe, error = lib_gil.import_plan(torch.arange(2.0))  # an ordinary call's drain
        assert error is None, error
        lib_gil.release_handle(probe.plan.tensor)
        pending = lib.lib.rsdlpack_py_pending_releases()
    graph.replay()  # raises had the capture been invalidated
    torch.cuda.synchronize()
    assert pending >= 1, "the conservative release ran inside the capture"
    assert lib.lib.rsdlpack_py_flush_releases() >= 1, "the explicit flush runs it"
    assert lib.lib.rsdlpack_py_pending_releases() == 0
    assert y.sum().item() == 2 * x.numel()


@check("two GPUs: a queued release of a device-1 tensor is flushed after device 1's consumer stream")
def _():
    if torch.cuda.device_count() < 2:
        raise Skip(f"{torch.cuda.device_count()} GPU here; this check needs two")
    with torch.cuda.device(1):
        C = torch.cuda.Stream()
        x = torch.ones(1 << 20, device="cuda:1")
        torch.cuda.synchronize()
        options = ImportOptions(has_stream=1, stream=C.cuda_stream, has_device=1, device_type=KDLCUDA, device_id=1, copy=-1)
        tensor, error = lib_gil.import_(x, options)
        assert error is None, error
        with torch.cuda.stream(C):
            kernel = long_kernel(SLEEP)
        t0 = time.perf_counter()
        lib.release(tensor)  # GIL released around the call: queued, its event recorded on device 1's C
        pending = lib.lib.rsdlpack_py_pending_releases()
        assert lib.lib.rsdlpack_py_flush_releases() >= 1
        host = time.perf_counter() - t0
        kernel = kernel()
    assert pending >= 1
    assert host > 0.5 * kernel, f"the flush returned after {host:.3f} s of device 1's {kernel:.3f} s kernel"
    return f"the flush waited {host:.2f} s"


@check("a share whose stream is kept records at each __dlpack__: writes after the share are ordered; without the flag they are not")
def _():
    from rsdlpack_abi import CALL_REFUSE_WITHOUT_GIL, SHARE_STREAM_KEPT

    n = 1 << 22
    totals = {}
    for kept in (True, False):
        P, C = torch.cuda.Stream(), torch.cuda.Stream()
        buffer = torch.zeros(n, device="cuda")
        torch.cuda.synchronize()
        flags = CALL_REFUSE_WITHOUT_GIL | (SHARE_STREAM_KEPT if kept else 0)
        shared, error = lib_gil.share(buffer.data_ptr(), [n], [1], ELEMENT_CODE_FLOAT32, 8_000_000 + int(kept),
                                      device=(KDLCUDA, 0), stream=P.cuda_stream, flags=flags)
        assert error is None, error
        exporter, _ = shared
        with torch.cuda.stream(P):  # written after the share, as `M .= 7` in Julia
            kernel = long_kernel(SLEEP)
            buffer.fill_(7.0)
        with torch.cuda.stream(C):
            view = torch.from_dlpack(exporter)
            totals[kept] = view.sum()
        torch.cuda.synchronize()
        kernel()
        del view, exporter
    lib.lib.rsdlpack_py_flush_releases()
    lib.take_released_roots()
    assert totals[True].item() == 7.0 * n, f"kept: the consumer read {totals[True].item()} (not ordered after the write)"
    assert totals[False].item() != 7.0 * n, "without the flag the consumer waited for a write made after the share: the check proves nothing"
    return f"kept: {totals[True].item():.0f}; once at the share: {totals[False].item():.0f}"


@check("a CUDA import's deleter called with the GIL held does not wait for the consumer's kernel: it queues")
def _():
    C = torch.cuda.Stream()
    x = torch.ones(1 << 20, device="cuda")
    torch.cuda.synchronize()
    tensor, error = lib_gil.import_(x, cuda_options(C.cuda_stream))
    assert error is None, error
    with torch.cuda.stream(C):
        kernel = long_kernel(SLEEP)
    t0 = time.perf_counter()
    lib_gil.release(tensor)  # the re-wrapped tensor's deleter, with the GIL held
    host = time.perf_counter() - t0
    pending = lib.lib.rsdlpack_py_pending_releases()
    kernel = kernel()
    assert host < 0.5 * kernel, f"the deleter waited {host:.3f} s of the {kernel:.3f} s kernel with the GIL held"
    assert pending == 1, f"{pending} releases queued, expected this one"
    assert lib.lib.rsdlpack_py_flush_releases() == 1
    assert lib.lib.rsdlpack_py_pending_releases() == 0
    return f"the deleter returned in {host * 1000:.1f} ms"


@check("Julia's one-call import plans CUDA tensors for a CuArray, refuses them for an Array")
def _():
    t = torch.arange(24, dtype=torch.float32, device="cuda").reshape(4, 6)[:, ::2]
    stream = torch.cuda.current_stream().cuda_stream or 1
    result, error = lib.import_plan(t, PlanOptions.of(target=1), cuda_options(stream))
    assert error is None, error
    plan = result.plan
    assert (plan.kind, plan.device_type, plan.device_id) == (0, KDLCUDA, 0)
    assert plan.dims_() == [4, 3]
    assert plan.parent_address == t.data_ptr(), (hex(plan.parent_address), hex(t.data_ptr()))
    lib.release_handle(plan.tensor)
    # Typed and dense: row-major in the producer's order would need a device copy.
    _, (code, message) = lib.import_plan(t.contiguous(), PlanOptions.of(target=1, element_code=11, ndims=2, dense=1),
                                         cuda_options(stream))
    assert code == 2 and "copies on the host only" in message, message
    # An Array of CUDA memory: refused by the core, naming the device (the Julia Array path asks
    # the producer for dl_device=(CPU, 0) instead).
    _, (code, message) = lib.import_plan(t, PlanOptions.of(target=0), ImportOptions(has_stream=1, stream=stream, copy=-1))
    assert code == 2 and "a host array (Array) cannot hold" in message, message
    lib.lib.rsdlpack_py_flush_releases()
    return f"parent at {plan.parent_address:#x}"




# ---------------------------------------------------------------------------------------------
# Release ordering. An imported CUDA tensor's release waits for the work enqueued on the stream
# its import named (and, for rsdlpack_imported_release_after, on the caller's stream) before
# the producer's deleter runs. The race: torch's caching allocator hands a freed block at once
# to the next tensor allocated on the stream the block came from, so a Julia kernel still
# reading the imported memory would read the new tensor's values.

RACE_N = 1 << 24  # 64 MiB of float32


def aliasing_view(address, n):
    """A torch tensor over `n` float32 at `address` that owns nothing (CUDA array interface)."""
    class Memory:
        __cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (address, False), "version": 2}
    return torch.as_tensor(Memory(), device="cuda")


def release_race(release, read_on_caller_stream=False):
    """Imports a torch tensor of ones for a consumer stream C (the import's stream, as Julia's
    CUDA.stream()), lets torch drop its own reference (the import then holds the block), and
    enqueues the consumer's work: a ~1 s kernel, then a read of the imported memory (on C, or on
    a second stream K when `read_on_caller_stream`). Then `release(handle, K)` runs, and at once
    torch allocates a tensor of the same size on the stream the block came from and writes -1.

    Returns (how many elements the read saw corrupted, whether torch reused the block, the
    host's seconds in `release`, what `release` returned, the long kernel's own seconds)."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # the freed block is then the only one of its size torch holds
    C, K = torch.cuda.Stream(), torch.cuda.Stream()
    reader = K if read_on_caller_stream else C
    x = torch.ones(RACE_N, device="cuda")  # on torch's current stream
    address = x.data_ptr()
    result, error = lib_gil.import_plan(x, PlanOptions.of(target=1), cuda_options(C.cuda_stream))
    assert error is None, error
    assert result.plan.parent_address == address
    handle = result.plan.tensor
    del x, result  # the import holds torch's only reference: the deleter frees the block
    view = aliasing_view(address, RACE_N)
    with torch.cuda.stream(reader):
        kernel = long_kernel(SLEEP)  # the long kernel ...
        copy = view.clone()  # ... then the read of the imported memory
    del view
    t0 = time.perf_counter()
    outcome = release(handle, K.cuda_stream)
    host = time.perf_counter() - t0
    y = torch.empty(RACE_N, device="cuda")  # torch allocating and writing at once
    y.fill_(-1.0)
    reused = y.data_ptr() == address
    torch.cuda.synchronize()
    corrupted = int((copy != 1.0).sum().item())
    del y, copy
    return corrupted, reused, host, outcome, kernel()


def explicit_release(handle, _caller):
    """rsdlpack_imported_release with the GIL held, as Julia's error paths call it."""
    lib_gil.release_handle(handle)


def release_after_caller(handle, caller):
    """rsdlpack_imported_release_after(handle, caller), as Julia's unsafe_free! of a CuArray."""
    return lib_gil.release_after(handle, caller)


EXPORT_ROOT = [7_000_000]


TORCH_EXCHANGE_API = SKIP is None and hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
NO_TORCH_EXCHANGE_API = f"torch {torch.__version__ if torch else '-'} has no __dlpack_c_exchange_api__ (DLPack 1.3 C exchange API)"


def export_release_race(into=None):
    """The export side's race. A buffer standing in for a Julia CuArray (CUDA.jl's pool reuses
    its block as soon as the root comes back) is shared under a root id; torch takes it on its
    stream C (`__dlpack__(stream=C)`; with `into=torch.Tensor`, `share(A, torch.Tensor)`
    through torch's C exchange API while C is torch's current stream, the stream the API's
    contract says it works on), enqueues a ~1 s kernel then a read of it, and drops the tensor
    (and the exporter) at once. The "Julia" side polls for the root (an ordinary bridge call
    drains the queue each time) and, the moment it comes back, writes -1 into the buffer on its
    own stream W, as a new Julia array of the same size in the reused block would be written.

    Returns (elements the read saw corrupted, host seconds until the root came back, the
    kernel's own seconds)."""
    torch.cuda.synchronize()
    EXPORT_ROOT[0] += 1
    root = EXPORT_ROOT[0]
    buffer = torch.ones(RACE_N, device="cuda")
    C, W = torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()
    written_on = torch.cuda.current_stream().cuda_stream or 1
    with torch.cuda.stream(C):
        kernel = long_kernel(SLEEP)
        if into is None:
            shared, error = lib_gil.share(buffer.data_ptr(), [RACE_N], [1], ELEMENT_CODE_FLOAT32, root,
                                          device=(KDLCUDA, 0), stream=written_on)
            assert error is None, error
            exporter, _ = shared
            view = torch.from_dlpack(exporter)
        else:
            shared, error = lib_gil.share(buffer.data_ptr(), [RACE_N], [1], ELEMENT_CODE_FLOAT32, root,
                                          device=(KDLCUDA, 0), stream=written_on, into=into)
            assert error is None, error
            view, exporter = shared[0], None
            assert isinstance(view, torch.Tensor) and view.data_ptr() == buffer.data_ptr(), "zero-copy"
        copy = view.clone()
    del view, exporter, shared  # torch calls the deleter now, without waiting for C
    t0 = time.perf_counter()
    while True:
        probe, error = lib_gil.import_plan(torch.arange(2.0))  # an ordinary call drains the queue
        assert error is None, error
        lib_gil.release_handle(probe.plan.tensor)
        if root in lib.take_released_roots():
            break
        assert time.perf_counter() - t0 < 30, "the shared array's root never came back"
        time.sleep(0.001)
    came_back = time.perf_counter() - t0
    with torch.cuda.stream(W):
        buffer.fill_(-1.0)
    torch.cuda.synchronize()
    corrupted = int((copy != 1.0).sum().item())
    return corrupted, came_back, kernel()


if CHILD:
    # Run by the parent with RSDLPACK_TEST_UNORDERED_RELEASES=1: the same races, unordered.
    assert SKIP is None, SKIP
    corrupted, reused, host, _, kernel = release_race(explicit_release)
    export_corrupted, export_came_back, export_kernel = export_release_race()
    into_corrupted, into_came_back, into_kernel = (export_release_race(into=torch.Tensor) if TORCH_EXCHANGE_API
                                                   else (None, None, None))
    print(json.dumps({"corrupted": corrupted, "reused": reused, "host": host, "kernel": kernel,
                      "export_corrupted": export_corrupted, "export_came_back": export_came_back,
                      "export_kernel": export_kernel, "into_corrupted": into_corrupted,
                      "into_came_back": into_came_back, "into_kernel": into_kernel}), flush=True)
    sys.exit(0)


@check("export-side release: a shared array's root comes back only after torch's kernel on its stream; the reused block is not written under it")
def _():
    corrupted, came_back, kernel = export_release_race()
    assert corrupted == 0, f"torch's read saw {corrupted} elements written after the root came back"
    assert came_back > 0.5 * kernel, f"the root came back after {came_back:.3f} s, before the {kernel:.3f} s kernel ended"
    return f"the root came back after {came_back:.2f} s"


@check("share into torch.Tensor (C exchange API): the root comes back only after torch's kernel on its current stream; the reused block is not written under it")
def _():
    if not TORCH_EXCHANGE_API:
        raise Skip(NO_TORCH_EXCHANGE_API)
    corrupted, came_back, kernel = export_release_race(into=torch.Tensor)
    assert corrupted == 0, f"torch's read saw {corrupted} elements written after the root came back"
    assert came_back > 0.5 * kernel, f"the root came back after {came_back:.3f} s, before the {kernel:.3f} s kernel ended"
    return f"the root came back after {came_back:.2f} s"


@check("explicit release: waits for the consumer's kernel on the import's stream; torch reuses the block uncorrupted")
def _():
    corrupted, reused, host, _, kernel = release_race(explicit_release)
    assert reused, "torch did not reuse the freed block: the check proves nothing"
    assert corrupted == 0, f"the kernel read {corrupted} overwritten elements: the deleter ran before it finished"
    assert host > 0.5 * kernel, f"the release returned after {host:.3f} s, before the {kernel:.3f} s kernel ended"
    return f"the release waited {host:.2f} s"


@check("release_after (unsafe_free! of a CuArray): waits for the caller's stream too")
def _():
    corrupted, reused, host, outcome, _ = release_race(release_after_caller, read_on_caller_stream=True)
    assert outcome is None, outcome
    assert reused, "torch did not reuse the freed block: the check proves nothing"
    assert corrupted == 0, f"the kernel on the caller's stream read {corrupted} overwritten elements"
    return f"the release waited {host:.2f} s"


@check("without the caller's stream, a read on another stream is not waited for (and the race is detected)")
def _():
    corrupted, reused, host, _, _ = release_race(explicit_release, read_on_caller_stream=True)
    assert reused, "torch did not reuse the freed block: the check proves nothing"
    assert corrupted > 0, "the read on a stream the release was not told of came out intact: the race was not provoked"
    return f"{corrupted} of {RACE_N} elements overwritten, the release took {host * 1000:.1f} ms"


@check("queued release (finalizer): recorded at once, kept queued while the kernel runs, released once it is done")
def _():
    pending = {}

    def queue_then_call(handle, _caller):
        lib.release_later(handle)
        assert lib.lib.rsdlpack_py_pending_releases() >= 1
        # An ordinary bridge call drains the queue without waiting: this release is not ready.
        probe, error = lib_gil.import_plan(torch.arange(2.0))
        assert error is None, error
        lib_gil.release_handle(probe.plan.tensor)
        pending["while_running"] = lib.lib.rsdlpack_py_pending_releases()

    corrupted, reused, host, _, kernel = release_race(queue_then_call)
    assert pending["while_running"] == 1, pending
    assert not reused, "the block was handed to torch while the kernel still read it"
    assert corrupted == 0, f"the kernel read {corrupted} overwritten elements"
    assert host < 0.5 * kernel, f"queueing and an ordinary call took {host:.3f} s of the {kernel:.3f} s kernel: they must not wait for the GPU"
    probe, _ = lib_gil.import_plan(torch.arange(2.0))  # the kernel is done: this call drains it
    lib_gil.release_handle(probe.plan.tensor)
    assert lib.lib.rsdlpack_py_pending_releases() == 0
    return f"queued and probed in {host * 1000:.1f} ms"


@check("queued release then rsdlpack_py_flush_releases: the flush waits for the kernel; torch reuses the block uncorrupted")
def _():
    def queue_then_flush(handle, _caller):
        lib.release_later(handle)
        assert lib.lib.rsdlpack_py_flush_releases() >= 1

    corrupted, reused, host, _, kernel = release_race(queue_then_flush)
    assert reused, "torch did not reuse the freed block: the check proves nothing"
    assert corrupted == 0, f"the kernel read {corrupted} overwritten elements"
    assert host > 0.5 * kernel, f"the flush returned after {host:.3f} s, before the {kernel:.3f} s kernel ended"
    return f"the flush waited {host:.2f} s"


@check("with release ordering disabled (RSDLPACK_TEST_UNORDERED_RELEASES=1), the same races (import side, export side, share into torch.Tensor) corrupt the kernel's input")
def _():
    env = dict(os.environ, RSDLPACK_TEST_UNORDERED_RELEASES="1")
    child = subprocess.run([sys.executable, __file__, LIBRARY, UNORDERED_CHILD], env=env,
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stdout + child.stderr
    answer = json.loads(child.stdout.strip().splitlines()[-1])
    assert answer["reused"], f"torch did not reuse the freed block: the check proves nothing ({answer})"
    assert answer["corrupted"] > 0, (f"unordered, the kernel still read intact data: the race was not provoked, or "
                                     f"the library was built without the unordered-releases-for-tests feature "
                                     f"(scripts/gpu_check.sh builds it with it) ({answer})")
    assert answer["host"] < 0.5 * answer["kernel"], answer
    assert answer["export_corrupted"] > 0, (f"unordered, the shared array's root came back at once but torch's read "
                                            f"was intact: the export race was not provoked ({answer})")
    assert answer["export_came_back"] < 0.5 * answer["export_kernel"], answer
    if answer["into_corrupted"] is None:  # the share-into check above was skipped, saying why
        return (f"{answer['corrupted']} of {RACE_N} elements overwritten; export side: {answer['export_corrupted']} "
                f"overwritten; into torch.Tensor not run ({NO_TORCH_EXCHANGE_API})")
    assert answer["into_corrupted"] > 0, (f"unordered, the root of an array shared into torch.Tensor came back at "
                                          f"once but torch's read was intact: the race was not provoked ({answer})")
    assert answer["into_came_back"] < 0.5 * answer["into_kernel"], answer
    return (f"{answer['corrupted']} of {RACE_N} elements overwritten, the release took {answer['host'] * 1000:.1f} ms; "
            f"export side: {answer['export_corrupted']} overwritten; into torch.Tensor: "
            f"{answer['into_corrupted']} overwritten")



def julia_share_cuda(memory, root_id, stream):
    """Shares CUDA memory as Julia's `share(A, torch.Tensor; order=:reversed)` shares a CuArray
    whose last writes were enqueued on `stream` (its task stream): Julia's column-major array of
    the reversed dims. Returns the torch tensor that torch's C exchange API made."""
    dims = list(reversed(memory.shape))
    strides, step = [], 1
    for d in dims:
        strides.append(step)
        step *= d
    code = {torch.float32: ELEMENT_CODE_FLOAT32, torch.float64: ELEMENT_CODE_FLOAT64}[memory.dtype]
    (tensor, _), error = lib_gil.share(memory.data_ptr(), dims, strides, code, root_id=root_id,
                                       order=INDEX_ORDER_REVERSED, device=(KDLCUDA, 0), stream=stream,
                                       into=torch.Tensor)
    assert error is None, error
    return tensor


@check("differentiable call on CUDA (rsdlpack_autodiff): an MLP's gradients equal torch's, inputs read after Julia's writes")
def _():
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
    import rsdlpack_autodiff as ad

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(), torch.nn.Linear(128, 10)).cuda()
    module = ad.Module(mlp)
    params = [p.detach().clone() for p in module.initial_parameters()]  # Julia's CuArrays
    x_values = torch.randn(256, 64, device="cuda")
    x = torch.zeros(256, 64, device="cuda")
    J = torch.cuda.Stream()  # Julia's task stream
    torch.cuda.synchronize()
    with torch.cuda.stream(J):
        kernel = long_kernel(SLEEP)
        x.copy_(x_values)  # Julia's last write to x: queued behind a ~1 s kernel on its stream
    shared = [julia_share_cuda(m, 80_000 + k, J.cuda_stream) for k, m in enumerate([*params, x])]
    assert [t.data_ptr() for t in shared] == [m.data_ptr() for m in [*params, x]], "zero-copy"
    forward = module.forward(True, *shared)
    y = forward.outputs[0]
    # Julia imports the output on its stream (ordered after torch's work), as a view in place.
    result, error = lib_gil.import_plan(y, PlanOptions.of(target=TARGET_CUDA_ARRAY, order=INDEX_ORDER_REVERSED),
                                        cuda_options(J.cuda_stream))
    assert error is None, error
    assert result.plan.parent_address == y.data_ptr()
    lib_gil.release_handle(result.plan.tensor)
    cotangent = torch.ones(256, 10, device="cuda")
    grads = forward.pullback(julia_share_cuda(cotangent, 80_100, J.cuda_stream))
    kernel()
    torch.cuda.synchronize()
    # torch's own, on the values Julia wrote.
    leaf = x_values.clone().requires_grad_()
    mlp.train()
    want_y = mlp(leaf)
    want = torch.autograd.grad(want_y, [*mlp.parameters(), leaf], torch.ones_like(want_y))
    assert torch.allclose(y, want_y.detach(), atol=1e-5), "the forward read x before Julia's write landed"
    for k, (got, expected) in enumerate(zip(grads.tensors, want)):
        assert got is not None and got.is_cuda and torch.allclose(got, expected, atol=1e-5), k
        assert grads.devices[k] == KDLCUDA
    return f"forward and pullback ordered after a {kernel():.2f} s kernel on Julia's stream"

passed = sum(ok is True for _, ok, _ in RESULTS)
failed = sum(ok is False for _, ok, _ in RESULTS)
skipped = sum(ok is None for _, ok, _ in RESULTS)
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 2 if ENVIRONMENT_SKIPS else 0)
