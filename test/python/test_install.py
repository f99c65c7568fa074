"""A simulated `Pkg.add(url=…)` + `Pkg.build("RsDLPack")` on a clean depot, without Julia.

Pkg installs the repository's tracked files into a read-only directory and runs deps/build.jl,
which runs the cargo steps of deps/build.toml with the target directories in the depot's
scratch space. Here: the tracked files (`git ls-files`) are copied to a temporary directory
made read-only, and the same steps run from there with their targets in another temporary
directory (or RSDLPACK_INSTALL_TARGET, which scripts/test.sh points at target/install-check to
reuse compiled dependencies; the package's own crates are rebuilt from the copy every time).

What this proves: the build needs nothing outside the package's tracked files (a path reaching
outside it, or an untracked file, fails the build), the lock files are committed and current
(`--locked`), and nothing is written into the package tree — checked by comparing every file's
content and mode before and after, since the read-only bits do not stop root.

The jlrs bridge needs a Julia to link, which CI lacks: its step runs as `cargo check` with
DOCS_RS=1 (jlrs's way to compile without Julia) — the same manifest, lock file and flags. The
Python bridge's step is the real release build.
"""

import hashlib
import os
import pathlib
import shutil
import stat
import subprocess

import pytest

tomllib = pytest.importorskip("tomllib", reason="needs Python >= 3.11 (tomllib)")

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD_TOML = REPO / "deps" / "build.toml"


def tracked_files():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    return [name for name in listing.stdout.decode().split("\0") if name]


def make_read_only(root):
    for path in sorted(root.rglob("*"), reverse=True) + [root]:
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def snapshot(root):
    """Every path under root with its mode and content hash."""
    state = {}
    for path in sorted(root.rglob("*")):
        mode = path.lstat().st_mode
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        state[str(path.relative_to(root))] = (mode, digest)
    return state


def step_command(step, config, package, target, julia_available):
    """The command and environment deps/build.jl composes for `step` (see its cargo_build);
    `config` is build.toml's cargo configuration file, relative to the package."""
    args = list(step["args"])
    env = dict(os.environ)
    for name in step["env_remove"]:
        env.pop(name, None)
    for name, value in step["env"].items():
        env[name] = value.replace("{julia_dir}", str(package / "no-julia-here"))
    if step["name"] == "julia_bridge" and not julia_available:
        args[0] = "check"  # no libjulia to link: type-check, as scripts/test.sh does
        env["DOCS_RS"] = "1"
    env["CARGO_TARGET_DIR"] = str(target)
    command = [
        "cargo", *args, "--config", str(package / config),
        "--manifest-path", str(package / step["manifest"]), "--target-dir", str(target),
    ]
    return command, env


def test_the_build_runs_from_a_read_only_copy_of_the_tracked_files(tmp_path):
    package = tmp_path / "package"
    scratch = pathlib.Path(os.environ.get("RSDLPACK_INSTALL_TARGET") or tmp_path / "scratch")
    for name in tracked_files():
        source = REPO / name
        if source.is_symlink() or not source.is_file():
            continue  # a tracked file deleted in the work tree, or a link: not installed either
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, package / name)
    make_read_only(package)
    before = snapshot(package)

    build = tomllib.loads(BUILD_TOML.read_text())
    steps = build["library"]
    assert [step["name"] for step in steps] == ["julia_bridge", "python_bridge"]
    assert (package / build["config"]).is_file(), "build.toml names a config file not shipped"
    try:
        for step in steps:
            target = scratch / "target" / step["name"]
            command, env = step_command(step, build["config"], package, target, julia_available=False)
            result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
            assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stderr[-6000:]}"
            if command[1] == "build":
                built = target / "release" / f"lib{step['crate']}.so"
                assert built.is_file(), f"{built} missing after {' '.join(command)}"
        assert snapshot(package) == before, "the build wrote into the package tree"
    finally:
        for path in [package, *package.rglob("*")]:
            if path.is_dir():
                path.chmod(path.stat().st_mode | stat.S_IWUSR)  # let pytest remove tmp_path


def test_build_jl_runs_the_steps_of_build_toml():
    """deps/build.jl reads deps/build.toml and composes the command the test above runs."""
    build_jl = (REPO / "deps" / "build.jl").read_text()
    assert 'joinpath(@__DIR__, "build.toml")' in build_jl
    assert 'config = joinpath(PACKAGE, BUILD["config"])' in build_jl
    assert (
        '`$CARGO $(step["args"]) --config $config --manifest-path $manifest --target-dir $target`'
        in build_jl
    )
    assert 'env["CARGO_TARGET_DIR"] = target' in build_jl
    assert "Scratch.get_scratch!" in build_jl
    for step in tomllib.loads(BUILD_TOML.read_text())["library"]:
        assert "--locked" in step["args"], step["name"]
