"""Parses every .jl file under the given directories with tree-sitter-julia; exits 1 on any
syntax error, naming the file, line and column. (No Julia exists on the CI machines; this is
the check that the Julia code is at least well-formed.)"""

import pathlib
import sys

import tree_sitter
import tree_sitter_julia

# The Julia package's directories (the repository root is the package).
ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE_DIRS = ("src", "julia", "ext", "deps", "test", "docs")

parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_julia.language()))


def problems(node):
    if node.type == "ERROR" or node.is_missing:
        yield node
        return
    for child in node.children:
        yield from problems(child)


def main(roots):
    files = sorted(p for root in roots for p in pathlib.Path(root).rglob("*.jl"))
    bad = 0
    for path in files:
        tree = parser.parse(path.read_bytes())
        found = list(problems(tree.root_node))
        for node in found[:5]:
            row, column = node.start_point
            kind = "missing " + node.type if node.is_missing else "syntax error"
            print(f"{path}:{row + 1}:{column + 1}: {kind}")
        bad += bool(found)
    print(f"parsed {len(files)} Julia files")
    print(f"julia-parse: {len(files) - bad} passed, {bad} failed")
    return 1 if bad or not files else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or [str(ROOT / d) for d in PACKAGE_DIRS]))
