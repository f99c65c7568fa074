"""The CI lint of the Julia code (fatou, configured by fatou.toml and scripts/fatou-package.toml)
must find real mistakes, and must find none in the package."""

import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
FATOU = pathlib.Path(sys.executable).parent / "fatou"
PACKAGE_CONFIG = REPO / "scripts" / "fatou-package.toml"


def lint(root, *config):
    if not FATOU.exists():
        pytest.fail(f"fatou is not installed in the venv ({FATOU}); scripts/requirements.txt has it")
    result = subprocess.run([str(FATOU), "lint", "--color", "never", "--output", "concise", *config, "."],
                            cwd=root, capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr  # findings and the summary


def both_passes(root):
    """scripts/test.sh's two runs: fatou.toml (found from root), then the package-mode pass."""
    return lint(root), lint(root, "--config", str(PACKAGE_CONFIG))


BROKEN = {
    "Project.toml": 'name = "Broken"\nuuid = "0b3e2a8c-55a1-4d6e-9a5e-1c1f2d3e4f50"\n\n'
                    '[compat]\njulia = "1.10"\n',
    # The package's layout: an entry file including sources kept in julia/.
    "src/Broken.jl": 'module Broken\nimport NotADependency\ninclude("../julia/a.jl")\n'
                     'include("../julia/b.jl")\nend\n',
    "julia/a.jl": "helper(x) = x + 1\npublic helper\n",       # `public` needs Julia 1.11
    "julia/b.jl": "uses_helper(x) = helper(x) + helpr(x)\n",  # helper resolves, helpr does not
    # A call with the wrong number of arguments, in an extension-like module.
    "ext/BrokenExt.jl": "module BrokenExt\nscale(x, k) = k * x\ntwice(x) = scale(x)\nend\n",
}


@pytest.fixture
def broken_package(tmp_path):
    for name, text in BROKEN.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    # The repository's own rule selection, with this package's entry points.
    config = (REPO / "fatou.toml").read_text()
    config, count = re.subn(r"entry-points = \[.*?\]", 'entry-points = ["src/Broken.jl", "ext/BrokenExt.jl"]',
                            config, flags=re.S)
    assert count == 1
    (tmp_path / "fatou.toml").write_text(config)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)  # bounds fatou's config search
    return tmp_path


def test_real_mistakes_fail_the_lint(broken_package):
    (main_status, main), (package_status, package) = both_passes(broken_package)
    assert main_status != 0 and package_status != 0, main + package
    found = main + package
    assert "julia/b.jl:1:30: warning[undefined-name] `helpr` is not defined" in found, found
    assert "`helper` is not defined" not in found, found  # defined in another included file
    assert "ext/BrokenExt.jl:3:12: warning[call-arity] no method of `scale` takes 1" in found, found
    assert "julia/a.jl:2:1: error[julia-version-compat]" in found, found
    assert "src/Broken.jl:2:8: warning[unresolved-import] `NotADependency`" in found, found


def test_the_package_lints_clean():
    for status, output in both_passes(REPO):
        assert status == 0, output
        # Every Julia file of the package was checked: src, julia, ext, deps, test.
        checked = re.search(r"checked (\d+) file\(s\): clean", output)
        assert checked and int(checked[1]) >= 17, output
