"""The CI check that parses every .jl file must be able to fail."""

import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "parse_julia.py"


def run(*directories):
    """No directories: the package's own (src, julia, ext, deps, test)."""
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, directories)], capture_output=True, text=True)


def test_a_syntax_error_fails_the_check(tmp_path):
    (tmp_path / "good.jl").write_text("f(x) = x + 1\n")
    (tmp_path / "bad.jl").write_text("function g(x\n    x +\nend\n")
    result = run(tmp_path)
    assert result.returncode == 1
    assert "bad.jl:1:1" in result.stdout and "julia-parse: 1 passed, 1 failed" in result.stdout


def test_the_package_parses():
    result = run()
    assert result.returncode == 0, result.stdout
    # src/RsDLPack.jl, julia/*.jl, ext/*.jl, deps/build.jl, test/*.jl: all of them were found.
    parsed = int(result.stdout.split("parsed ")[1].split()[0])
    assert parsed >= 16, result.stdout
