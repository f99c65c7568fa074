"""The README's Julia examples are calls the Julia test suite makes.

Every line of every ```julia block in README.md (comments and surrounding blanks stripped) must
appear, as a whole line, in test/runtests.jl or a file it includes (recursively, by static
`include("…")`), with comments stripped there too. The tests that hold these lines
(test/readme_pythoncall.jl, test/readme_pycall.jl, test/cuda.jl) check what each line claims,
so an example in the README cannot drift from a tested call: edit both together.

No Julia runs here; the Julia suite runs wherever `julia` is (scripts/test.sh).
"""

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[2]
README = REPO / "README.md"
# Documentation pages held to the same rule: every Julia line a call the suite makes.
TESTED_PAGES = [REPO / "docs" / "src" / "autodiff.md"]
RUNTESTS = REPO / "test" / "runtests.jl"

FENCE = re.compile(r"^```julia[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
INCLUDE = re.compile(r'\binclude\(\s*"([^"]+)"\s*\)')


def strip_comment(line):
    """The line without its `#` comment (a `#` inside a "string" is kept), and without
    surrounding blanks."""
    in_string = False
    escaped = False
    for i, char in enumerate(line):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "#":
            return line[:i].strip()
    return line.strip()


def readme_lines(text):
    """(line number in the README, code) for each non-blank code line of its julia blocks."""
    found = []
    for block in FENCE.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        for offset, line in enumerate(block.group(1).splitlines()):
            code = strip_comment(line)
            if code:
                found.append((first + offset, code))
    return found


def suite_files(entry):
    """The entry file and every file it includes, recursively."""
    seen = []
    pending = [entry.resolve()]
    while pending:
        path = pending.pop()
        if path in seen or not path.is_file():
            continue
        seen.append(path)
        for name in INCLUDE.findall(path.read_text()):
            pending.append((path.parent / name).resolve())
    return seen


def suite_lines(files):
    lines = set()
    for path in files:
        for line in path.read_text().splitlines():
            code = strip_comment(line)
            if code:
                lines.add(code)
    return lines


def untested(readme_text, files):
    """README lines (number, code) that no test file holds."""
    tested = suite_lines(files)
    return [(number, code) for number, code in readme_lines(readme_text) if code not in tested]


def test_every_readme_julia_line_is_a_tested_call():
    files = suite_files(RUNTESTS)
    names = {path.name for path in files}
    assert {"runtests.jl", "cuda.jl", "readme_pythoncall.jl", "readme_pycall.jl"} <= names, names
    lines = readme_lines(README.read_text())
    assert len(lines) >= 30, f"only {len(lines)} Julia lines found in README.md: is the fence still ```julia?"
    missing = untested(README.read_text(), files)
    assert not missing, "README.md Julia lines not found verbatim in the test suite:\n" + "\n".join(
        f"  README.md:{number}: {code}" for number, code in missing
    )


def test_a_drifted_readme_line_fails():
    files = suite_files(RUNTESTS)
    text = README.read_text()
    original = "A = from_dlpack(a)"
    assert original + " " in text
    drifted = text.replace(original + " ", "A = from_dlpack(a; copy=true) ", 1)
    missing = untested(drifted, files)
    assert [code for _, code in missing] == ["A = from_dlpack(a; copy=true)"], missing


def test_comments_do_not_count_and_includes_are_followed(tmp_path):
    (tmp_path / "runtests.jl").write_text('x = 1  # y = 2\ninclude("sub/more.jl")\n')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "more.jl").write_text('s = "a # not a comment"\n#= z = 3\n')
    files = suite_files(tmp_path / "runtests.jl")
    readme = "```julia\nx = 1   # a different comment\ns = \"a # not a comment\"\ny = 2\n```\n"
    assert [code for _, code in untested(readme, files)] == ["y = 2"]
    assert readme_lines("```text\npkg> add X\n```\n") == []


def test_every_julia_line_of_the_tested_doc_pages_is_a_tested_call():
    files = suite_files(RUNTESTS)
    assert "autodiff_example.jl" in {path.name for path in files}
    for page in TESTED_PAGES:
        text = page.read_text()
        lines = readme_lines(text)
        assert len(lines) >= 20, f"only {len(lines)} Julia lines found in {page.name}"
        missing = untested(text, files)
        assert not missing, f"{page.name} Julia lines not found verbatim in the test suite:\n" + "\n".join(
            f"  {page.name}:{number}: {code}" for number, code in missing
        )
