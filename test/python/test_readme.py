"""The Julia examples of the README and of the reference pages (docs/src/*.md) are calls the
Julia test suite makes, and their relative links lead to files that exist.

Every line of every ```julia block in README.md and in each docs/src page (comments and
surrounding blanks stripped) must appear, as a whole line, in test/runtests.jl or a file it
includes (recursively, by static `include("…")`), with comments stripped there too. The tests
that hold these lines (test/readme_pythoncall.jl, test/readme_pycall.jl, test/cuda.jl,
test/reactant.jl, test/jll.jl) check what each line claims, so an example cannot drift from a
tested call: edit both together.

No Julia runs here; the Julia suite runs wherever `julia` is (scripts/test.sh).
"""

import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
README = REPO / "README.md"
# Documentation pages held to the same rule: every Julia line a call the suite makes.
TESTED_PAGES = [REPO / "docs" / "src" / "autodiff.md"]
RUNTESTS = REPO / "test" / "runtests.jl"
PAGES = sorted((REPO / "docs" / "src").glob("*.md"))
# The pages the README's reference moved to (each has Julia examples).
REFERENCE_PAGES = {"usage.md", "pyconvert.md", "strided.md", "cuda.md", "reactant.md"}
README_MAX_LINES = 240

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
    assert {"runtests.jl", "cuda.jl", "readme_pythoncall.jl", "readme_pycall.jl", "reactant.jl"} <= names, names
    lines = readme_lines(README.read_text())
    assert len(lines) >= 20, f"only {len(lines)} Julia lines found in README.md: is the fence still ```julia?"
    missing = untested(README.read_text(), files)
    assert not missing, "README.md Julia lines not found verbatim in the test suite:\n" + "\n".join(
        f"  README.md:{number}: {code}" for number, code in missing
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda path: path.name)
def test_every_docs_page_julia_line_is_a_tested_call(page):
    files = suite_files(RUNTESTS)
    text = page.read_text()
    if page.name in REFERENCE_PAGES:
        assert readme_lines(text), f"{page.name} has no ```julia block: is the fence still ```julia?"
    missing = untested(text, files)
    assert not missing, f"{page.name} Julia lines not found verbatim in the test suite:\n" + "\n".join(
        f"  docs/src/{page.name}:{number}: {code}" for number, code in missing
    )


def test_the_readme_is_a_short_guide():
    text = README.read_text()
    assert len(text.splitlines()) <= README_MAX_LINES, "README.md is the short guide: reference goes to docs/src"
    for heading in ("## Install (Julia)", "## A first example", "## Run a PyTorch model on Julia arrays", "## Limits"):
        assert heading in text, heading
    # The two set-up commands, the install URL, what the build needs, torch for both front-ends.
    assert "    bash scripts/demo.sh\n" in text and "    bash scripts/test.sh\n" in text
    assert "this repository's URL" in text and "pkg> add <url>" in text
    assert "C compiler" in text and "Rust toolchain" in text
    assert 'CondaPkg.add_pip("torch")' in text and "JULIA_PYTHONCALL_EXE" in text and "JULIA_CONDAPKG_BACKEND=Null" in text
    assert 'ENV["PYTHON"]' in text and 'Pkg.build("PyCall")' in text
    model = text[text.index("## Run a PyTorch model on Julia arrays"):]
    assert "pywith(torch.no_grad()) do _" in model and model.count("order=:reversed") >= 4
    assert "using CUDA: CuArray" in model


def test_the_reference_site_lists_every_page():
    make = (REPO / "docs" / "make.jl").read_text()
    listed = set(re.findall(r'"(\w+\.md)"', make))
    assert listed == {page.name for page in PAGES}, listed ^ {page.name for page in PAGES}
    project = (REPO / "docs" / "Project.toml").read_text()
    assert 'Documenter = "e30172f5-a6a5-5a46-863b-614d45cd2de4"' in project
    assert 'RsDLPack = "e39e7394-b1de-5ddc-b46b-e59802a2fc19"' in project


LINK = re.compile(r"\]\(([^)\s]+)\)")


def broken_links(path):
    """The relative links of a Markdown file (not URLs, not anchors alone) whose file is missing."""
    broken = []
    for target in LINK.findall(path.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (path.parent / target.split("#", 1)[0]).exists():
            broken.append(target)
    return broken


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda path: path.name)
def test_relative_links_lead_to_files(path):
    assert not broken_links(path), f"{path.name} links to missing files: {broken_links(path)}"


def test_a_broken_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[a](exists.md) [b](missing.md#x) [c](https://example.org) [d](#anchor)\n")
    (tmp_path / "exists.md").write_text("")
    assert broken_links(page) == ["missing.md#x"]


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
