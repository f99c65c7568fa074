"""The module-cycle check (scripts/module_cycles.py) must be able to fail, and must read the
paths a crate really uses: not comments, strings or tests."""

import pathlib
import re
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


def test_a_python_import_cycle_fails_even_inside_a_function(tmp_path):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "reader.py").write_text("import re\nimport writer.sub as w\n")
    (scripts / "writer.py").write_text("def f():\n    from reader import x\n    return x\n")
    (scripts / "alone.py").write_text("import os\n")
    result = run(scripts)
    assert result.returncode == 1, result.stdout
    assert "CYCLE among reader, writer" in result.stdout, result.stdout
    assert "writer -> reader: scripts/writer.py:2" in result.stdout, result.stdout
    assert "alone -> (nothing)" in result.stdout, result.stdout  # os is not a sibling module

    (scripts / "writer.py").write_text("import alone\n")
    result = run(scripts)
    assert result.returncode == 0, result.stdout
    assert "from the bottom up: alone | writer | reader" in result.stdout, result.stdout


def test_a_documented_order_is_checked(tmp_path):
    src = crate(tmp_path, {"lib.rs": LIB, "low.rs": "pub struct Thing;\n", "mid.rs": "use crate::low::Thing;\n",
                           "top/mod.rs": "use crate::mid;\n", "helpers.rs": ""})
    marker = f"<!-- module order: {src.relative_to(ROOT) if src.is_relative_to(ROOT) else src} -->"
    doc = tmp_path / "doc.md"
    doc.write_text(f"Modules:\n\n{marker}\n```\ntop       the top\nmid, low  two at once\n```\n")
    result = subprocess.run([sys.executable, str(SCRIPT), str(src), "--doc", str(doc)], capture_output=True, text=True)
    assert result.returncode == 1, result.stdout
    assert "is stale; from the top down it is:\n  top\n  mid\n  low\n" in result.stdout, result.stdout

    doc.write_text(f"Modules:\n\n{marker}\n```\ntop       the top\nmid\n          described below\nlow\n```\n")
    result = subprocess.run([sys.executable, str(SCRIPT), str(src), "--doc", str(doc)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
    assert "is current" in result.stdout, result.stdout


def test_the_tree_has_no_cycle_and_the_architecture_order_is_current():
    directories = ("src", "bridges/python/src", "bridges/julia/src", "scripts", "test/python", "test")
    result = subprocess.run([sys.executable, str(SCRIPT), *(str(ROOT / d) for d in directories),
                             "--doc", str(ROOT / "docs" / "src" / "architecture.md")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
    assert result.stdout.count("no cycle") == len(directories), result.stdout
    assert re.search(r"architecture.md:\d+: the order of src is current", result.stdout), result.stdout
