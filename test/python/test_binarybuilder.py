"""The BinaryBuilder recipe (deps/binarybuilder/build_tarballs.jl), as Yggdrasil will run it, and
its inline bash script run against a simulated BinaryBuilder prefix, without BinaryBuilder.

BinaryBuilder clones the source into $WORKSPACE/srcdir/RsDLPack.jl (GitSource names the
directory after the URL) and runs the script with $prefix, $libdir, $target, $rust_target,
$dlext, $nproc and bb_target set (and cargo's CARGO_BUILD_TARGET). Here: the script is taken out
of the recipe's raw triple-quoted `script` string as Julia reads it, the tracked files are copied to
<tmp>/srcdir/RsDLPack.jl, the same variables are set for this machine (x86_64-linux-gnu), and the
script must leave the libraries exactly where the recipe's products say, and the license where
BinaryBuilder's audit looks.

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
import sys

import pytest

tomllib = pytest.importorskip("tomllib", reason="needs Python >= 3.11 (tomllib)")

from test_install import make_read_only, tracked_files

REPO = pathlib.Path(__file__).resolve().parents[2]
RECIPE = REPO / "deps" / "binarybuilder" / "build_tarballs.jl"
sys.path.insert(0, str(REPO / "scripts"))
import update_recipe_commit  # noqa: E402


def recipe_script(recipe_text):
    """The recipe's raw triple-quoted `script` string, as Julia reads it: the newline after the opening
    quotes dropped, no escapes (a raw string's only one, a backslash before a quote, is refused),
    no indentation to strip (every line starts at column 0 or the block is refused)."""
    m = re.search(r'^script = raw"""\n(.*?)^"""$', recipe_text, re.M | re.S)
    assert m, "the recipe has no `script = raw\"\"\"` block closed at column 0"
    body = m[1]
    assert '\\"' not in body, "a backslash before a quote: Julia's raw string would change it"
    lines = [line for line in body.splitlines() if line.strip()]
    assert any(not line[0].isspace() for line in lines), "Julia would strip a common indentation"
    return body


def recipe_products():
    """(library name, variable name) of each LibraryProduct in the recipe."""
    return re.findall(r'LibraryProduct\("(\w+)", :(\w+)', RECIPE.read_text())


def test_the_recipe_is_written_as_yggdrasil_runs_it():
    recipe = RECIPE.read_text()
    # Yggdrasil runs a recipe with no environment: the source is literal, nothing is read from ENV
    # or from a second file, and libjulia's helpers come from Yggdrasil's own tree.
    assert "ENV" not in recipe and "read(" not in recipe
    sources = re.findall(r'GitSource\(\s*"([^"]+)",\s*"([0-9a-f]{40})"\s*\)', recipe)
    assert len(sources) == 1, sources
    url, _ = sources[0]
    assert url.endswith("/RsDLPack.jl.git"), url  # General's AutoMerge wants /Name.jl.git
    assert "cd $WORKSPACE/srcdir/RsDLPack.jl\n" in recipe_script(recipe)  # GitSource's directory
    assert 'include("../../L/libjulia/common.jl")' in recipe
    assert recipe_products() == [("librsdlpack_julia", "librsdlpack_julia"),
                                 ("librsdlpack_python", "librsdlpack_python")]
    # The jlrs bridge once per Julia version, as Yggdrasil's R/rustfft and P/peppi_jlrs do.
    assert 'julia_versions = [v"1.10", v"1.11", v"1.12", v"1.13"]' in recipe
    assert "vcat(libjulia_platforms.(julia_versions)...)" in recipe
    assert 'BuildDependency("libjulia_jll")' in recipe
    assert 'Dependency("Libiconv_jll"; platforms=filter(Sys.isapple, platforms))' in recipe
    call = recipe[recipe.index("build_tarballs(ARGS"):]
    assert "compilers=[:c, :rust]" in call
    assert 'preferred_gcc_version=v"10"' in call
    assert "julia_compat=libjulia_julia_compat(julia_versions)" in call
    assert "preferred_rust_version" not in recipe  # no pin without a reason
    assert "lock_microarchitecture" not in recipe
    # The platform list of docs/src/distribution.md: 64-bit Linux, macOS, x86_64 FreeBSD.
    assert re.search(r'is_kept\(p\) = \(Sys\.islinux\(p\) && arch\(p\) in \("x86_64", "aarch64"\)\) \|\| '
                     r'Sys\.isapple\(p\) \|\|\s+\(Sys\.isfreebsd\(p\) && arch\(p\) == "x86_64"\)', recipe)
    assert "filter!(is_kept, platforms)" in recipe
    # The license is installed in every build, and exists.
    assert re.search(r"^install_license LICENSE$", recipe_script(recipe), re.M)
    assert "MIT License" in (REPO / "LICENSE").read_text()
    # The names the package looks for (julia/jll.jl, JLL_PRODUCTS).
    jll_jl = (REPO / "julia" / "jll.jl").read_text()
    for _, variable in recipe_products():
        assert f":{variable}_path" in jll_jl, variable


def pinned_commit():
    return re.search(r'GitSource\(\s*"[^"]+",\s*"([0-9a-f]{40})"\s*\)', RECIPE.read_text())[1]


def git_show(commit, path):
    """The file at `path` in `commit` (`git show <commit>:<path>`), or None where it has none."""
    result = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=REPO, capture_output=True, text=True)
    return result.stdout if result.returncode == 0 else None


def test_the_pinned_commit_has_what_the_script_needs():
    # BinaryBuilder builds the pinned commit, not this tree: a stale pin fails here, not in
    # Yggdrasil's CI (install_license aborts under set -e without a LICENSE; musl and Apple need
    # the config's target sections).
    commit = pinned_commit()
    exists = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=REPO, capture_output=True)
    assert exists.returncode == 0, (
        f"the recipe pins {commit}, which this repository does not have (a shallow clone, or a "
        f"commit never pushed): pin a commit of this history (scripts/update_recipe_commit.py)")
    license_text = git_show(commit, "LICENSE")
    assert license_text is not None and "MIT License" in license_text, f"{commit} has no MIT LICENSE"
    pinned = git_show(commit, ".cargo/config.toml")
    assert pinned is not None, f"{commit} has no .cargo/config.toml"
    pinned_targets = tomllib.loads(pinned).get("target", {})
    current_targets = tomllib.loads((REPO / ".cargo" / "config.toml").read_text())["target"]
    # Every target section of the working tree, with the same flags: a pin older than a change
    # to the config builds without it.
    assert pinned_targets == current_targets, (
        f"the pinned commit's .cargo/config.toml differs from this tree's in its target sections: "
        f"pin a newer commit (scripts/update_recipe_commit.py)\npinned: {pinned_targets}\nhere: {current_targets}")
    for section in ("cfg(target_env = \"musl\")", "cfg(target_os = \"macos\")", "x86_64-unknown-freebsd"):
        assert section in pinned_targets, section
    # The files the script builds from.
    for path in ("Cargo.lock", "bridges/julia/Cargo.toml", "bridges/julia/Cargo.lock"):
        assert git_show(commit, path) is not None, f"{commit} has no {path}"


def test_a_stale_pin_is_caught():
    # The first commit of the history has neither the LICENSE nor the config's target sections.
    first = subprocess.run(["git", "rev-list", "--max-parents=0", "HEAD"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()[0]
    config = git_show(first, ".cargo/config.toml")
    assert git_show(first, "LICENSE") is None or config is None or \
        tomllib.loads(config).get("target") != tomllib.loads((REPO / ".cargo" / "config.toml").read_text())["target"]


def test_the_script_extraction_reads_what_julia_would():
    text = 'x = 1\nscript = raw"""\ncd $WORKSPACE\necho "${libdir}"\n"""\n'
    assert recipe_script(text) == 'cd $WORKSPACE\necho "${libdir}"\n'
    with pytest.raises(AssertionError, match="backslash"):
        recipe_script('script = raw"""\necho \\"x\\"\n"""\n')
    with pytest.raises(AssertionError, match="indentation"):
        recipe_script('script = raw"""\n    a\n    b\n"""\n')


def test_the_release_script_rewrites_the_commit(tmp_path):
    recipe = tmp_path / "build_tarballs.jl"
    recipe.write_text(RECIPE.read_text())
    head = update_recipe_commit.resolve_commit("HEAD")
    # Two commits where the history has them (a shallow clone may have one).
    listed = subprocess.run(["git", "rev-list", "--max-count=2", "HEAD"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split()
    for commit in reversed(listed):
        assert update_recipe_commit.main([commit[:10], "--recipe", str(recipe)]) == 0
        text = recipe.read_text()
        assert re.findall(r'GitSource\(\s*"[^"]+",\s*"([0-9a-f]{40})"', text) == [commit]
        # Nothing else changes.
        assert text == RECIPE.read_text().replace(
            re.search(r'GitSource\(\s*"[^"]+",\s*"([0-9a-f]{40})"', RECIPE.read_text())[1], commit)
    assert update_recipe_commit.main(["no-such-commit-name", "--recipe", str(recipe)]) == 1
    with pytest.raises(update_recipe_commit.RecipeError, match="40 lowercase hex"):
        update_recipe_commit.rewrite(recipe.read_text(), "abc")
    with pytest.raises(update_recipe_commit.RecipeError, match="exactly one GitSource"):
        update_recipe_commit.rewrite('GitSource("u", "' + "0" * 40 + '")\nGitSource("v", "' + "1" * 40 + '")', head)
    assert recipe.read_text().count(head) == 1


def test_the_build_script_installs_the_products_into_a_simulated_prefix(tmp_path):
    if shutil.which("cargo") is None:
        pytest.fail("cargo is not on PATH")
    workspace = tmp_path / "workspace"
    source = workspace / "srcdir" / "RsDLPack.jl"
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
        script = tmp_path / "script.sh"
        script.write_text(recipe_script(RECIPE.read_text()))
        result = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert result.returncode == 0, f"the recipe's script failed:\n{result.stderr[-6000:]}"
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
        # BinaryBuilder's audit wants the license in $prefix/share/licenses/<name>.
        assert (prefix / "share" / "licenses" / "RsDLPack" / "LICENSE").read_text() == (REPO / "LICENSE").read_text()
    finally:
        for path in [source, *source.rglob("*")]:
            if path.is_dir():
                path.chmod(path.stat().st_mode | 0o200)  # let pytest remove tmp_path
