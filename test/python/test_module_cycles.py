"""The module-cycle check (scripts/module_cycles.py) must be able to fail, and must read the
paths a crate really uses: not comments, strings or tests."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "module_cycles.py"


def run(*directories):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, directories)], capture_output=True, text=True)


def crate(tmp_path, files):
    src = tmp_path / "src"
    for name, text in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    return src


LIB = "pub mod low;\npub mod mid;\npub mod top;\n#[cfg(test)]\nmod helpers;\npub use low::Thing;\n"


def test_a_cycle_fails_and_names_where(tmp_path):
    src = crate(
        tmp_path,
        {
            "lib.rs": LIB,
            "low.rs": "pub struct Thing;\nfn f() -> crate::Thing { crate::top::make() }\n",
            "mid.rs": "use crate::{low::Thing, top};\n",
            "top/mod.rs": "mod inner;\npub fn make() -> crate::low::Thing { crate::low::Thing }\n",
            "top/inner.rs": "use super::super::mid;\n",
            "helpers.rs": "use crate::top;\n",
        },
    )
    result = run(src)
    assert result.returncode == 1, result.stdout
    assert "CYCLE among low, mid, top" in result.stdout, result.stdout
    assert "low -> top: src/low.rs:2" in result.stdout, result.stdout
    # grouped imports and `super::super::` up to the crate root are edges too
    assert "mid -> low, top" in result.stdout and "top -> low, mid" in result.stdout, result.stdout
    assert "helpers" not in result.stdout  # a #[cfg(test)] module is not a node


def test_tests_comments_and_strings_are_not_edges(tmp_path):
    src = crate(
        tmp_path,
        {
            "lib.rs": LIB,
            "low.rs": (
                "//! See [`crate::top::make`].\n"
                "pub struct Thing;\n"
                '/// `crate::top` /* crate::top */\nconst S: &str = "crate::top::make";\n'
                "const C: char = '{';\n"
                "#[cfg(test)]\nmod tests {\n    use crate::{top, mid};\n    fn f() { crate::top::make(); }\n}\n"
                "#[cfg(test)]\nfn g() { crate::mid::h(); }\n"
                "pub fn after() -> Thing { Thing }\n"
            ),
            "mid.rs": "use crate::low::Thing;\npub fn h() {}\n",
            "top/mod.rs": "mod inner;\npub fn make() {}\n",
            "top/inner.rs": "use super::make;\nuse crate::mid::h;\n",
            "helpers.rs": "",
        },
    )
    result = run(src)
    assert result.returncode == 0, result.stdout
    assert "low -> (nothing)" in result.stdout, result.stdout
    assert "from the bottom up: low | mid | top" in result.stdout, result.stdout


def test_the_core_and_the_bridges_have_no_cycle():
    result = run(ROOT / "src", ROOT / "bridges" / "python" / "src", ROOT / "bridges" / "julia" / "src")
    assert result.returncode == 0, result.stdout
    assert result.stdout.count("no cycle") == 3, result.stdout
