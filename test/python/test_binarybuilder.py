"""The bash part of the BinaryBuilder recipe (deps/binarybuilder/build.sh), run against a
simulated BinaryBuilder prefix, without BinaryBuilder.

BinaryBuilder clones the source into $WORKSPACE/srcdir/RsDLPack and runs the script with
$prefix, $libdir, $target, $rust_target, $dlext, $nproc and bb_target set (and cargo's
CARGO_BUILD_TARGET). Here: the tracked files are copied to <tmp>/srcdir/RsDLPack, the same
variables are set for this machine (x86_64-linux-gnu), and the script must leave the libraries
exactly where the recipe's products (deps/binarybuilder/build_tarballs.jl) say: $libdir, under
their product names.

What it cannot do here: link the jlrs bridge, which needs a libjulia (BinaryBuilder installs
libjulia_jll's for each Julia version in $WORKSPACE/destdir). RSDLPACK_BB_JLRS_CHECK_ONLY=1 makes
that step `DOCS_RS=1 cargo check` — the same manifest, lock file and flags — as
test_install.py does; the Python bridge is the real release build, installed and checked.
CARGO_BUILD_TARGET is left unset so that the cargo target directories of test_install.py
(RSDLPACK_INSTALL_TARGET, which scripts/test.sh sets) are reused, keeping CI's time small; the
script finds cargo's output either way.
"""

import os
import pathlib
import re
import shutil
import subprocess

import pytest

from test_install import make_read_only, tracked_files

REPO = pathlib.Path(__file__).resolve().parents[2]
RECIPE = REPO / "deps" / "binarybuilder" / "build_tarballs.jl"
SCRIPT = REPO / "deps" / "binarybuilder" / "build.sh"


def recipe_products():
    """(library name, variable name) of each LibraryProduct in the recipe."""
    return re.findall(r'LibraryProduct\("(\w+)", :(\w+)', RECIPE.read_text())


def test_the_recipe_reads_the_script_and_names_both_products():
    recipe = RECIPE.read_text()
    assert 'read(joinpath(@__DIR__, "build.sh"), String)' in recipe
    assert recipe_products() == [("librsdlpack_julia", "librsdlpack_julia"),
                                 ("librsdlpack_python", "librsdlpack_python")]
    # The jlrs bridge once per Julia version, as Yggdrasil's R/rustfft and P/peppi_jlrs do.
    assert 'julia_versions = [v"1.10", v"1.11", v"1.12"]' in recipe
    assert "vcat(libjulia_platforms.(julia_versions)...)" in recipe
    assert 'BuildDependency("libjulia_jll")' in recipe
    assert "compilers=[:c, :rust]" in recipe
    # The names the package looks for (julia/library.jl, JLL_PRODUCTS).
    library_jl = (REPO / "julia" / "library.jl").read_text()
    for _, variable in recipe_products():
        assert f":{variable}_path" in library_jl, variable


def test_the_build_script_installs_the_products_into_a_simulated_prefix(tmp_path):
    if shutil.which("cargo") is None:
        pytest.fail("cargo is not on PATH")
    workspace = tmp_path / "workspace"
    source = workspace / "srcdir" / "RsDLPack"
    for name in tracked_files():
        path = REPO / name
        if path.is_symlink() or not path.is_file():
            continue
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, source / name)
    make_read_only(source)  # as in test_install.py: the build writes nothing into the source
    prefix = workspace / "destdir"
    libdir = prefix / "lib"
    tools = tmp_path / "tools"  # BinaryBuilder's install_license, as a stand-in
    tools.mkdir()
    (tools / "install_license").write_text(
        '#!/bin/sh\nmkdir -p "$prefix/share/licenses/RsDLPack" && cp "$@" "$prefix/share/licenses/RsDLPack/"\n')
    (tools / "install_license").chmod(0o755)
    targets = pathlib.Path(os.environ.get("RSDLPACK_INSTALL_TARGET") or tmp_path / "scratch") / "target"

    env = dict(os.environ)
    env.pop("CARGO_BUILD_TARGET", None)
    env.update({
        "WORKSPACE": str(workspace),
        "prefix": str(prefix),
        "libdir": str(libdir),
        "bindir": str(prefix / "bin"),
        "includedir": str(prefix / "include"),
        "target": "x86_64-linux-gnu",
        "bb_target": "x86_64-linux-gnu",
        "bb_full_target": "x86_64-linux-gnu-cxx11-julia_version+1.11.0",
        "rust_target": "x86_64-unknown-linux-gnu",
        "dlext": "so",
        "nproc": str(os.cpu_count() or 1),
        "CARGO_TARGET_DIR": str(targets),
        "RSDLPACK_BB_JLRS_CHECK_ONLY": "1",
        "PATH": f"{tools}{os.pathsep}{env['PATH']}",
    })
    try:
        result = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert result.returncode == 0, f"build.sh failed:\n{result.stderr[-6000:]}"
        installed = sorted(p.name for p in libdir.iterdir())
        # The Python bridge where its product says; the jlrs bridge was only checked here.
        assert installed == ["librsdlpack_python.so"], installed
        library = libdir / "librsdlpack_python.so"
        assert os.access(library, os.X_OK)
        symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True)
        if symbols.returncode == 0:
            assert "rsdlpack_py_import_plan" in symbols.stdout
        needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True)
        if needed.returncode == 0:
            assert "libpython" not in needed.stdout, "the Python bridge must not link libpython"
    finally:
        for path in [source, *source.rglob("*")]:
            if path.is_dir():
                path.chmod(path.stat().st_mode | 0o200)  # let pytest remove tmp_path
