"""Julia's `share` of a Reactant array (ext/RsDLPackReactantExt.jl), without Julia or Reactant:
rsdlpack_py_share called as julia/share.jl's share_array calls it with the extension's methods,
over a stand-in for a CPU XLA buffer; and the extension checked against Project.toml, the README
and share_array.

The call, argument by argument, as the Julia code builds it for a ConcretePJRTArray `x`:
  address   array_address(x): XLA.unsafe_buffer_pointer of x's one buffer, after the host wait
  dims      size(x), Julia's dims (XLA's shape is their reverse, src/xla/PJRT/Buffer.jl)
  strides   strides(x) = Base.size_to_strides(1, size(x)...) (Reactant's): column-major
  stream    producer_stream(x): the AbstractArray method, 0 (the extension defines none)
  device    array_device(x): (kDLCPU, 0) on the "cpu" platform, (kDLCUDA, hardware id) on "cuda"
  order, read_only  as for any array: the `order` keyword; ReadOnlyArray(x) is read-only
  root_id   root!(share_root(x)), the root (x, x.data)
The stand-in for the buffer is a C-contiguous NumPy array of XLA's shape: XLA's default
major-to-minor layout, in which Reactant keeps its buffers.
"""

import gc
import pathlib
import re

import numpy as np
import pytest

from rsdlpack_abi import ERROR_CODE_INVALID
from rsdlpack_ctypes import ACCESS_READ_ONLY, ACCESS_WRITABLE, ELEMENT_CODES, INDEX_ORDER_PRODUCER, INDEX_ORDER_REVERSED
from test_project import PROJECT, admits

REPO = pathlib.Path(__file__).resolve().parents[2]
EXTENSION = (REPO / "ext" / "RsDLPackReactantExt.jl").read_text()
KDLCPU, KDLCUDA = 1, 2
# EnzymeAD/Reactant.jl's Project.toml (the same in every tag the extension was traced in).
REACTANT_UUID = "3c362404-f566-11ee-1572-e11a4b42c853"


def julia_strides(dims):
    """Base.size_to_strides(1, dims...): column-major strides in elements."""
    strides, step = [], 1
    for d in dims:
        strides.append(step)
        step *= d
    return strides


def share_reactant(bridge, xla_buffer, root_id, order=INDEX_ORDER_PRODUCER, read_only=ACCESS_WRITABLE,
                   address=None):
    """rsdlpack_py_share as share_array calls it for a ConcretePJRTArray on Reactant's "cpu"
    platform whose XLA buffer is `xla_buffer` (its address, unless `address` is given)."""
    dims = list(reversed(xla_buffer.shape))
    return bridge.share(xla_buffer.ctypes.data if address is None else address, dims, julia_strides(dims),
                        ELEMENT_CODES[str(xla_buffer.dtype)], root_id=root_id, order=order, read_only=read_only,
                        device=(KDLCPU, 0), stream=0)


def julia_array(xla_buffer):
    """The Julia array `x` whose buffer that is, in NumPy terms: x[i, j] == xla[j-1, i-1]."""
    return xla_buffer.transpose()


XLA_SHAPES = [(3, 2), (4, 3, 2), (5,), ()]


@pytest.mark.parametrize("shape", XLA_SHAPES, ids=str)
def test_numpy_sees_the_julia_indices_over_the_buffer_itself(bridge, shape):
    xla = np.arange(np.prod(shape, dtype=int), dtype=np.float32).reshape(shape)
    (exporter, _), error = share_reactant(bridge, xla, root_id=301)
    assert error is None, error
    n = np.from_dlpack(exporter)
    assert n.shape == tuple(reversed(shape)) and n.ctypes.data == xla.ctypes.data
    assert np.array_equal(n, julia_array(xla))
    if n.ndim:
        n[(0,) * (n.ndim - 1) + (n.shape[-1] - 1,)] = -1  # x[1, …, end] = -1: XLA's [end, …, 0]
        assert xla[(xla.shape[0] - 1,) + (0,) * (xla.ndim - 1)] == -1, "the same memory, writable"
    del n, exporter
    gc.collect()
    bridge.take_released_roots()


def test_reversed_order_is_xlas_own_row_major_view(bridge):
    xla = np.arange(24, dtype=np.int64).reshape(4, 3, 2)
    (exporter, _), error = share_reactant(bridge, xla, root_id=302, order=INDEX_ORDER_REVERSED)
    assert error is None, error
    r = np.from_dlpack(exporter)
    assert r.shape == xla.shape and r.flags.c_contiguous and np.array_equal(r, xla)


def test_torch_reads_the_buffer_in_place(bridge):
    torch = pytest.importorskip("torch", reason="torch is in scripts/requirements.txt")
    xla = np.arange(6, dtype=np.float64).reshape(3, 2)
    (exporter, _), error = share_reactant(bridge, xla, root_id=303)
    assert error is None, error
    t = torch.from_dlpack(exporter)
    assert t.shape == (2, 3) and t.stride() == (1, 2) and t.data_ptr() == xla.ctypes.data
    assert t.tolist() == julia_array(xla).tolist()


def test_a_read_only_array_is_shared_read_only(bridge):
    xla = np.arange(6, dtype=np.float32).reshape(3, 2)
    (exporter, _), error = share_reactant(bridge, xla, root_id=304, read_only=ACCESS_READ_ONLY)
    assert error is None, error
    n = np.from_dlpack(exporter)
    assert not n.flags.writeable and np.array_equal(n, julia_array(xla))


def test_the_root_is_released_once_every_consumer_let_go(bridge):
    gc.collect()
    bridge.take_released_roots()
    xla = np.arange(6, dtype=np.float32).reshape(3, 2)
    (exporter, _), error = share_reactant(bridge, xla, root_id=305)
    assert error is None, error
    n = np.from_dlpack(exporter)
    del exporter
    gc.collect()
    assert bridge.take_released_roots() == [], "NumPy's array holds the buffer"
    del n
    gc.collect()
    assert bridge.take_released_roots() == [305]
    assert bridge.take_released_roots() == []


def test_an_empty_buffer_may_have_no_address_and_a_full_one_must(bridge):
    # XLA may answer a null pointer for an empty buffer: still a valid empty tensor.
    empty = np.zeros((3, 0), dtype=np.float32)
    (exporter, _), error = share_reactant(bridge, empty, root_id=306, address=0)
    assert error is None, error
    assert np.from_dlpack(exporter).shape == (0, 3)
    full = np.zeros((3, 2), dtype=np.float32)
    result, error = share_reactant(bridge, full, root_id=307, address=0)
    assert result is None and error[0] == ERROR_CODE_INVALID, error
    gc.collect()
    bridge.take_released_roots()


def traced_range():
    """The first and last Reactant tags the extension's header says each name was traced in."""
    m = re.search(r"traced in every tag from v(\d+\.\d+\.\d+) to v(\d+\.\d+\.\d+)", EXTENSION)
    assert m, "ext/RsDLPackReactantExt.jl must name the tags its Reactant names were traced in"
    return m[1], m[2]


def test_compat_admits_every_0_2_release_from_the_first_traced_tag():
    assert PROJECT["weakdeps"]["Reactant"] == REACTANT_UUID
    assert PROJECT["extensions"]["RsDLPackReactantExt"] == "Reactant"
    low, high = traced_range()
    spec = PROJECT["compat"]["Reactant"]
    major, minor, patch = (int(p) for p in low.split("."))
    assert admits(spec, low) and not admits(spec, f"{major}.{minor}.{patch - 1}")
    # Every later 0.2 release too (a weak dependency's bound binds every environment that has
    # RsDLPack), guarded by the extension's check of its non-public names; not 0.3.
    assert admits(spec, high) and admits(spec, f"{major}.{minor}.{int(high.split('.')[2]) + 1}")
    assert admits(spec, f"{major}.{minor}.999") and not admits(spec, f"{major}.{minor + 1}.0")
    docs = (REPO / "docs" / "src" / "reactant.md").read_text()
    assert f"traced in every tag from {low} to {high}" in docs, "docs/src/reactant.md names the traced range"


def code_lines(text):
    """The extension's code without its comments and docstrings (names quoted there don't count)."""
    text = re.sub(r'^"""\n.*?^"""\n', "", text, flags=re.S | re.M)
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def test_every_non_public_reactant_name_is_in_the_checked_list():
    code = code_lines(EXTENSION)
    listed = re.search(r"const NON_PUBLIC_NAMES = \((.*?)\n\)", code, re.S)[1]
    paths = {tuple(re.findall(r":(\w+)", group)) for group in re.findall(r"\(([^()]*)\)", listed)}
    # Each name reached below the Reactant module: XLA.f and Sharding.f, through xla() or getfield.
    used = {("XLA", name) for name in re.findall(r"\bXLA\.(\w+)", code)}
    used |= {("Sharding", name) for name in re.findall(r':Sharding\)\.(\w+)', code)}
    assert used, "no XLA or Sharding name found in the extension: has the file changed shape?"
    for path in used:
        assert path in paths, f"Reactant.{'.'.join(path)} is used but not in NON_PUBLIC_NAMES"
        assert path[:1] in paths, f"Reactant.{path[0]} itself must be listed"
    # Reactant's submodules are reached only through the checked names, never bound at load.
    assert "Reactant.XLA" not in code and "Reactant.Sharding" not in code
    assert "xla() = getfield(Reactant, :XLA)" in code
    fields = set(re.findall(r":(\w+)", re.search(r"const CONCRETE_PJRT_FIELDS = \((.*?)\)", code)[1]))
    read = set(re.findall(r"\bx\.(\w+)", code))
    assert read and read <= fields, f"fields of ConcretePJRTArray read but not checked: {read - fields}"
    # The check runs before anything else a share does, and __init__ fills what it reads.
    body = code[code.index("function whole_buffer"):]
    assert body.index("check_names()") < body.index("x.donated")
    address = code[code.index("function RsDLPack.array_address"):]
    assert address.index("whole_buffer(x)") < address.index("xla()")
    device = code[code.index("function RsDLPack.array_device(x::ConcretePJRTArray)"):]
    assert device.index("whole_buffer(x)") < device.index("xla()")
    assert "append!(empty!(MISSING), missing_names(Reactant, ConcretePJRTArray))" in code
    assert re.search(r"isempty\(MISSING\) \|\| @warn", code)
    assert re.search(r"isempty\(MISSING\) && return nothing\n\s*throw\(DLPackError\(", code)


def test_views_and_reshapes_of_a_reactant_array_are_refused_by_name():
    code = code_lines(EXTENSION)
    for wrapper in ("SubArray", "Base.ReshapedArray"):
        assert re.search(rf"RsDLPack\.array_device\(::{re.escape(wrapper)}\{{<:Any,<:Any,<:ConcretePJRTArray\}}\) = "
                         r"throw\(DLPackError\(:buffer", code), wrapper
    # share_array asks for the device (which refuses them) before anything reads their pointer.
    share = (REPO / "julia" / "share.jl").read_text()
    body = share[share.index("function share_array"):]
    assert body.index("array_device(B)") < body.index("array_address(B)")


def test_the_extension_builds_the_call_this_file_makes():
    # The device table above: CPU buffers as (kDLCPU, 0), CUDA ones by their hardware id.
    assert re.search(r'platform == "cpu" && return \(KDLCPU, Int32\(0\)\)', EXTENSION)
    assert re.search(r'platform == "cuda" && return \(KDLCUDA, Int32\(XLA\.get_local_hardware_id\(', EXTENSION)
    # Stream 0: no producer_stream method, so the AbstractArray one (0) applies.
    assert "producer_stream" not in EXTENSION
    for hook in ("array_device", "array_address", "share_root"):
        assert re.search(rf"^(function )?RsDLPack\.{hook}\(x::ConcretePJRTArray", EXTENSION, re.M), hook
    # share_array asks for the address (the extension's host wait, which may throw) before it
    # roots anything, and roots share_root's answer.
    share = (REPO / "julia" / "share.jl").read_text()
    body = share[share.index("function share_array"):]
    assert body.index("array_address(B)") < body.index("root!(share_root(B))")
    assert "share_root(A::AbstractArray) = A" in share


def test_the_julia_tests_run_where_reactant_is():
    runtests = (REPO / "test" / "runtests.jl").read_text()
    guarded = runtests[runtests.index('Base.find_package("Reactant")'):]
    assert guarded.index("@test_skip") < guarded.index('include("reactant.jl")')
    fatou = (REPO / "fatou.toml").read_text()
    assert '"test/reactant.jl"' in fatou and '"ext/RsDLPackReactantExt.jl"' in fatou
