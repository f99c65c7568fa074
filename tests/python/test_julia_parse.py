"""The CI check that parses every .jl file must be able to fail."""

import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "parse_julia.py"


def run(directory):
    return subprocess.run([sys.executable, str(SCRIPT), str(directory)], capture_output=True, text=True)


def test_a_syntax_error_fails_the_check(tmp_path):
    (tmp_path / "good.jl").write_text("f(x) = x + 1\n")
    (tmp_path / "bad.jl").write_text("function g(x\n    x +\nend\n")
    result = run(tmp_path)
    assert result.returncode == 1
    assert "bad.jl:1:1" in result.stdout and "julia-parse: 1 passed, 1 failed" in result.stdout


def test_the_package_parses():
    result = run(SCRIPT.parents[1] / "julia")
    assert result.returncode == 0, result.stdout
