"""test/gpu/check_gpu.py, the GPU run's ctypes checks, where there is no GPU (CI): it loads the
bridge, then reports every check as skipped, naming why, and exits 2 (nothing proven), never 0."""

import pathlib
import subprocess
import sys

import pytest

from conftest import library_path

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "gpu" / "check_gpu.py"


def test_without_a_gpu_every_check_is_skipped_visibly(bridge):
    if bridge.lib.rsdlpack_cuda_driver_available() == 1:
        pytest.skip("a CUDA driver is present: test/gpu/run.sh runs check_gpu.py on this machine")
    result = subprocess.run([sys.executable, str(SCRIPT), library_path()], capture_output=True, text=True,
                            timeout=600)
    lines = result.stdout.strip().splitlines()
    assert result.returncode == 2, result.stdout + result.stderr
    assert lines[-1].startswith("0 passed, 0 failed, ") and lines[-1].endswith(" skipped"), lines[-1]
    checks = lines[:-1]
    assert len(checks) == int(lines[-1].split(", ")[2].split()[0]) and len(checks) >= 17, lines
    assert all(line.startswith("SKIP ") and ("GPU" in line or "torch" in line) for line in checks), lines
    assert any("release ordering disabled" in line for line in checks), lines


def test_the_unordered_release_switch_is_only_in_feature_builds():
    # The shipped build (deps/build.jl's, scripts/test.sh's) cannot turn release ordering off:
    # the variable's name is not even in it; scripts/gpu_check.sh builds the one that can.
    assert b"RSDLPACK_TEST_UNORDERED_RELEASES" not in pathlib.Path(library_path()).read_bytes()
    script = (pathlib.Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.sh").read_text()
    assert "build_python_bridge --features unordered-releases-for-tests" in script
    manifest = (pathlib.Path(__file__).resolve().parents[2] / "deps" / "build.toml").read_text()
    assert "unordered-releases-for-tests" not in manifest
