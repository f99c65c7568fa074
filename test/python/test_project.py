"""Project.toml against what it promises, read without Julia: compat bounds as Pkg reads them
(every dependency bounded above, as General's AutoMerge requires; julia exactly the versions
the JLL is built for, which jlrs 0.23 supports: its jlrs-compat crate's range, read from the
crate cargo resolves), the extensions mirrored by their files (each trigger a weak
dependency with compat, each module named as its entry and loading its trigger, each linted by
fatou's first pass), and the test environment's NumPy declared the CondaPkg way.

Pkg's compat syntax (pkgdocs "Compatibility"): comma-separated specifiers form a union; caret is
the default (`1.2` is [1.2.0, 2.0.0), `0.9.22` is [0.9.22, 0.10.0)); `~1.2` is [1.2.0, 1.3.0);
`=1.2.3` is exact; `a - b` is a hyphen range whose missing trailing numbers in `b` are wildcards
(`1.10 - 1.13` is [1.10.0, 1.14.0)).
"""

import json
import pathlib
import re
import subprocess

import pytest

tomllib = pytest.importorskip("tomllib", reason="needs Python >= 3.11 (tomllib)")

REPO = pathlib.Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "Project.toml").read_text())
INFINITY = (1 << 62,)

# From JuliaRegistries/General, C/CUDACore/Package.toml (and CUDACore/Project.toml in CUDA.jl 6).
CUDACORE_UUID = "bd0ed864-bdfe-4181-a5ed-ce625a5fdea2"


def version(text):
    parts = tuple(int(p) for p in text.split("."))
    return parts, len(parts)


def padded(parts):
    return tuple(parts) + (0,) * (3 - len(parts))


def bump(parts, index):
    """The smallest version above every version starting with parts[:index + 1]."""
    parts = padded(parts)
    return padded(parts[:index] + (parts[index] + 1,))


def spec_ranges(spec):
    """Half-open [lower, upper) ranges of a Pkg compat specifier, as 3-tuples."""
    ranges = []
    for clause in (c.strip() for c in spec.split(",")):
        if m := re.fullmatch(r"(\S+)\s+-\s+(\S+)", clause):
            (low, _), (high, n) = version(m[1]), version(m[2])
            ranges.append((padded(low), bump(high, n - 1) if n < 3 else bump(high, 2)))
        elif clause.startswith("="):
            v, _ = version(clause[1:])
            ranges.append((padded(v), bump(v, 2)))
        elif clause.startswith("~"):
            v, n = version(clause[1:])
            ranges.append((padded(v), bump(v, 0 if n == 1 else 1)))
        else:
            v, n = version(clause.lstrip("^"))
            first_nonzero = next((i for i, p in enumerate(v) if p != 0), n - 1)
            ranges.append((padded(v), bump(v, min(first_nonzero, n - 1))))
    return ranges


def admits(spec, text):
    v = padded(version(text)[0])
    return any(low <= v < high for low, high in spec_ranges(spec))


def test_the_compat_reader_reads_pkgs_examples():
    # pkgdocs' own examples.
    assert spec_ranges("1.2.3") == [((1, 2, 3), (2, 0, 0))]
    assert spec_ranges("0.2.3") == [((0, 2, 3), (0, 3, 0))]
    assert spec_ranges("0.0.3") == [((0, 0, 3), (0, 0, 4))]
    assert spec_ranges("~1.2") == [((1, 2, 0), (1, 3, 0))]
    assert spec_ranges("~1") == [((1, 0, 0), (2, 0, 0))]
    assert spec_ranges("1.2.3 - 4.5") == [((1, 2, 3), (4, 6, 0))]
    assert spec_ranges("1.2 - 4") == [((1, 2, 0), (5, 0, 0))]
    assert spec_ranges("1.2.3 - 4.5.6") == [((1, 2, 3), (4, 5, 7))]
    assert spec_ranges("1.2, 3") == [((1, 2, 0), (2, 0, 0)), ((3, 0, 0), (4, 0, 0))]


def jlrs_minor_range():
    """(MIN_MINOR_VERSION, MAX_MINOR_VERSION) of the jlrs-compat crate the jlrs bridge resolves
    (crates/build_utils/jlrs_compat in jlrs): the Julia versions jlrs 0.23 builds for."""
    manifest = REPO / "bridges" / "julia" / "Cargo.toml"
    result = subprocess.run(["cargo", "metadata", "--format-version", "1", "--manifest-path", str(manifest)],
                            capture_output=True, text=True)
    assert result.returncode == 0, f"cargo metadata for the jlrs bridge failed:\n{result.stderr[-2000:]}"
    packages = {p["name"]: p for p in json.loads(result.stdout)["packages"]}
    assert packages["jlrs"]["version"].startswith("0.23."), packages["jlrs"]["version"]
    source = (pathlib.Path(packages["jlrs-compat"]["manifest_path"]).parent / "src" / "lib.rs").read_text()
    low = int(re.search(r"pub const MIN_MINOR_VERSION: u32 = (\d+);", source)[1])
    high = int(re.search(r"pub const MAX_MINOR_VERSION: u32 = (\d+);", source)[1])
    return low, high


def test_julia_is_bounded_to_what_jlrs_and_the_jll_support():
    julia = PROJECT["compat"]["julia"]
    assert spec_ranges(julia) == [((1, 10, 0), (1, 14, 0))]
    # The JLL is built for exactly these versions (its julia_compat is libjulia_julia_compat of
    # them, "~1.10, ~1.11, ~1.12, ~1.13"), and jlrs 0.23 supports 1.10-1.13.
    recipe = (REPO / "deps" / "binarybuilder" / "build_tarballs.jl").read_text()
    built = re.search(r"julia_versions = \[(.*?)\]", recipe)[1]
    minors = sorted(int(m) for m in re.findall(r'v"1\.(\d+)"', built))
    jll_compat = ", ".join(f"~1.{m}" for m in minors)
    for minor in range(8, 16):
        assert admits(julia, f"1.{minor}.0") == admits(jll_compat, f"1.{minor}.0"), minor
    jlrs = re.search(r'jlrs = \{ version = "=(0\.23\.\d+)"', (REPO / "bridges" / "julia" / "Cargo.toml").read_text())
    assert jlrs, "the jlrs bridge pins jlrs 0.23; a new jlrs moves the julia bound"
    # Every minor the compat admits is one jlrs builds for (it would build a newer one as its
    # newest, with a warning, and refuse an older one).
    low, high = jlrs_minor_range()
    assert minors == list(range(low, high + 1)), (minors, low, high)


def test_every_dependency_has_an_upper_bounded_compat():
    names = {*PROJECT["deps"], *PROJECT.get("weakdeps", {}), *PROJECT.get("extras", {})}
    compat = PROJECT["compat"]
    assert names | {"julia"} == set(compat), "every dependency (stdlibs too) and julia need [compat]"
    for name, spec in compat.items():
        for _, upper in spec_ranges(spec):
            assert upper < INFINITY, f"{name} = {spec!r} has no upper bound"


def test_the_front_ends_and_cuda_bounds():
    compat = PROJECT["compat"]
    # PythonCall's finalizers check PyGILState_Check before decref only from 0.9.22; the
    # PythonCall test child runs two threads.
    assert not admits(compat["PythonCall"], "0.9.21") and admits(compat["PythonCall"], "0.9.22")
    assert admits(compat["PythonCall"], "0.9.34") and not admits(compat["PythonCall"], "0.10.0")
    # CUDA.jl 5.4-5.x (CuStream has its `valid` field from 5.4) and 6.x; CUDACore 6.0-6.3 traced.
    assert not admits(compat["CUDA"], "5.3.9") and admits(compat["CUDA"], "5.4.0")
    assert admits(compat["CUDA"], "5.11.3") and admits(compat["CUDA"], "6.3.0")
    assert not admits(compat["CUDA"], "7.0.0")
    assert admits(compat["CUDACore"], "6.0.0") and admits(compat["CUDACore"], "6.3.0")
    assert not admits(compat["CUDACore"], "7.0.0")
    # CondaPkg reads [dev.deps] from 0.2.33 (CondaPkg.jl #198).
    assert not admits(compat["CondaPkg"], "0.2.32") and admits(compat["CondaPkg"], "0.2.36")


def extension_triggers():
    for name, triggers in PROJECT["extensions"].items():
        yield name, [triggers] if isinstance(triggers, str) else triggers


def test_every_extension_is_mirrored_by_its_file():
    fatou = tomllib.loads((REPO / "fatou.toml").read_text())
    entry_points = set(fatou["project"]["entry-points"])
    assert PROJECT["weakdeps"]["CUDACore"] == CUDACORE_UUID
    for name, triggers in extension_triggers():
        path = REPO / "ext" / f"{name}.jl"
        assert path.is_file(), f"{name}: Julia loads ext/{name}.jl, which is missing"
        text = path.read_text()
        assert re.search(rf"^module {name}$", text, re.M), f"{path.name} must define module {name}"
        assert f"ext/{name}.jl" in entry_points, f"fatou.toml's entry points must list ext/{name}.jl"
        for trigger in triggers:
            assert trigger in PROJECT["weakdeps"], f"{name}'s trigger {trigger} is not a weak dependency"
            assert trigger in PROJECT["compat"], trigger
            assert re.search(rf"^using {trigger}: {trigger}\b", text, re.M), \
                f"{path.name} must load its trigger {trigger}"
    # Every other file in ext/ is included by an extension (shared methods).
    entries = {f"{name}.jl" for name, _ in extension_triggers()}
    for path in (REPO / "ext").glob("*.jl"):
        if path.name not in entries:
            assert any(f'include("{path.name}")' in (REPO / "ext" / e).read_text() for e in entries), path.name


def test_cuda_6_reached_through_cudacore_and_cuda_5_through_cuda():
    # Array packages on CUDA.jl 6 depend on CUDACore alone: an extension triggered by it.
    assert dict(extension_triggers())["RsDLPackCUDACoreExt"] == ["CUDACore"]
    assert dict(extension_triggers())["RsDLPackCUDAExt"] == ["CUDA"]
    core = (REPO / "ext" / "RsDLPackCUDACoreExt.jl").read_text()
    cuda = (REPO / "ext" / "RsDLPackCUDAExt.jl").read_text()
    # One implementation: both include it; under CUDA.jl 6 (which loads CUDACore) only the
    # CUDACore extension defines the methods, since two definitions would overwrite each other.
    assert 'include("cuda_methods.jl")' in core and 'include("cuda_methods.jl")' in cuda
    assert "@static if !isdefined(CUDA, :CUDACore)" in cuda
    body = cuda[cuda.index("@static if"):]
    assert body.index('include("cuda_methods.jl")') < body.index("\nend\n")
    assert "const CUDA = CUDACore" in core
    methods = (REPO / "ext" / "cuda_methods.jl").read_text()
    assert not re.search(r"^(using|import) CUDA\b", methods, re.M), "the entry modules bring in CUDA's names"


def test_the_test_environment_declares_numpy_for_condapkg():
    conda = tomllib.loads((REPO / "CondaPkg.toml").read_text())
    # Only for the package's own tests and development: users get nothing installed.
    assert set(conda) == {"dev"}, conda
    assert "numpy" in conda["dev"]["deps"]
    assert "CondaPkg" in PROJECT["targets"]["test"]


def test_the_stridedviews_bounds_are_the_tags_its_extension_traced():
    compat = PROJECT["compat"]["StridedViews"]
    assert PROJECT["extensions"]["RsDLPackStridedViewsExt"] == "StridedViews"
    for traced in ("0.4.0", "0.4.6", "0.5.0", "0.5.2"):
        assert admits(compat, traced), traced
    # 0.3 and older: another parent normalisation (the Array itself on Julia 1.11), not traced.
    assert not admits(compat, "0.3.2") and not admits(compat, "0.6.0")
    header = " ".join((REPO / "ext" / "RsDLPackStridedViewsExt.jl").read_text().replace("#", " ").split())
    assert "traced at every tag of the [compat] range, v0.4.0 through v0.4.6 and v0.5.0 through v0.5.2" in header
