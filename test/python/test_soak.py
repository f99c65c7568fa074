"""scripts/soak.py (run by scripts/soak.sh, a million cycles) in a few thousand cycles, so that
CI keeps it working; and its self-test: leaked exporter references must fail it."""

import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "soak.py"


def soak(*args):
    # RSDLPACK_PYTHON_LIB comes from the environment, as for the other tests (conftest.py).
    return subprocess.run([sys.executable, str(SCRIPT), "--warmup", "400", "--samples", "2", *args],
                          capture_output=True, text=True)


def test_a_short_soak_passes(bridge):
    result = soak("--cycles", "4000")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "soak: passed" in result.stdout
    assert "roots not returned 0, reference count changes of the arrays [0, 0, 0, 0, 0]" in result.stdout


def test_the_soak_fails_when_references_leak(bridge):
    result = soak("--cycles", "2000", "--leak-exporters")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "soak: FAILED" in result.stdout and "shared roots never returned" in result.stdout
    assert "reference counts changed: [0, 0, 0, 0, 1200]" in result.stdout, result.stdout
