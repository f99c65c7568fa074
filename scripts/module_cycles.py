"""Lists the edges between the top-level modules of a Rust crate, or between the Python modules
of a directory of scripts, and fails on a cycle.

The layering rule (docs/src/architecture.md): arrows only point down, inside a crate too. An
edge `a -> b` is any path from module `a` into top-level module `b`: `use crate::b::…`,
`crate::b::x` in an expression or a type, `super::…::b` that climbs to the crate root, and
`crate::Name` where the crate root re-exports `Name` from `b` (`pub use b::Name` in lib.rs).
Comments (doc links included), string literals and `#[cfg(test)]` items (test modules, inline
or in their own files) are not read: tests may reach any module. The crate root (lib.rs) only
declares and re-exports, and is not a node.

In a directory without lib.rs, each `*.py` file is a module, and an edge `a -> b` is an
`import b` or `from b import …` anywhere in `a` (inside functions too: a deferred import is
still a cycle).

    python scripts/module_cycles.py [DIR ...] [--doc FILE ...]     (default: src, the core crate)

Prints each module's edges, then either an order from the bottom up or each set of modules in a
cycle with the file and line of every edge inside it; exits 1 on any cycle, 2 on a crate it
cannot read. With `--doc`, each fenced block in FILE that follows a line
`<!-- module order: DIR -->` must list DIR's modules from the top down, one level per line
that does not start with a space (`a, b` then a description after two spaces, or alone): exits
1, printing the block's first column as it should be, when it does not.
"""

import argparse
import ast
import dataclasses
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(text):
    """The source with comments, string and char literals blanked (newlines kept, so that line
    numbers hold)."""
    out = []
    i, n = 0, len(text)

    def blank(segment):
        out.append(re.sub(r"[^\n]", " ", segment))

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(text[i:j])
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(text[i:j])
            i = j
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (i == 0 or not re.match(r"\w", text[i - 1])):
            end = text.find('"' + m.group(1), m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            blank(text[i:j])
            i = j
        elif c == '"' or (c == "b" and text.startswith('b"', i) and (i == 0 or not re.match(r"\w", text[i - 1]))):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            blank(text[i : j + 1])
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}') or a lifetime ('a): only the first is blanked.
            if text.startswith("\\", i + 1):
                j = text.find("'", i + 3)
                j = n if j < 0 else j + 1
            elif i + 2 < n and text[i + 2] == "'":
                j = i + 3
            else:
                out.append(c)
                i += 1
                continue
            blank(text[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


TOKEN = re.compile(
    r"#!?\[(?P<attr>[^\]]*)\]"  # an attribute (cfg(...) has no brackets inside)
    r"|(?P<path>(?:(?:crate|super|self|" + IDENT + r")\s*::\s*)+(?:" + IDENT + r")?)"
    r"|(?P<open>\{)|(?P<close>\})|(?P<semi>;)"
    r"|(?P<word>" + IDENT + r")"
)


@dataclasses.dataclass
class Edge:
    source: str
    target: str
    where: str
    more: list = dataclasses.field(default_factory=list)


def group_heads(text, start):
    """The first segment of each path in the `{…}` group opening at text[start]: `{a::x, b}` ->
    [a, b] (nested groups are read only for their own heads)."""
    depth, j, heads, expect = 0, start, [], True
    while j < len(text):
        c = text[j]
        if c == "{":
            depth += 1
            expect = depth == 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                break
        elif c == "," and depth == 1:
            expect = True
        elif expect and depth == 1 and (m := re.compile(IDENT).match(text, j)):
            heads.append(m.group(0))
            expect = False
            j = m.end()
            continue
        j += 1
    return heads


class Crate:
    def __init__(self, src):
        self.src = pathlib.Path(src)
        lib = self.src / "lib.rs"
        if not lib.is_file():
            raise SystemExit(f"module-cycles: {lib} not found")
        self.edges = {}  # (source, target) -> first Edge
        self.modules = {}  # top-level module -> file
        self.reexports = {}  # a name the root re-exports -> its top-level module
        self.files = []  # (file, module path, directory of its child modules)
        self.parse_root(lib)
        for name, path in list(self.modules.items()):
            self.files.append((path, [name], self.child_dir(path, name)))
        i = 0
        while i < len(self.files):
            self.read(*self.files[i])
            i += 1

    def child_dir(self, path, name):
        return path.parent if path.name == "mod.rs" else path.parent / name

    def module_file(self, directory, name):
        for candidate in (directory / f"{name}.rs", directory / name / "mod.rs"):
            if candidate.is_file():
                return candidate
        raise SystemExit(f"module-cycles: no file for module {name} in {directory}")

    def parse_root(self, lib):
        text = strip(lib.read_text())
        for item, test in items(text):
            if test:
                continue
            if m := re.match(r"(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", item):
                self.modules[m.group(1)] = self.module_file(self.src, m.group(1))
        for item, test in items(text):
            m = re.match(r"pub(?:\([^)]*\))?\s+use\s+(" + IDENT + r")\s*::\s*(.*);", item, re.S)
            if test or not m or m.group(1) not in self.modules:
                continue
            rest = m.group(2).strip()
            names = group_heads(rest, 0) if rest.startswith("{") else [rest.split("::")[-1].split()[-1]]
            for name in names:
                self.reexports[name] = m.group(1)

    def read(self, path, module_path, child_dir):
        text = strip(path.read_text())
        top = module_path[0]
        stack = []  # per open brace: the inline module it opens, or None
        inline = []  # names of the open inline modules
        skip_depth = None  # inside a #[cfg(test)] item: the brace depth to leave it at
        pending_test = False
        mod_next = None
        for m in TOKEN.finditer(text):
            kind = m.lastgroup
            line = text.count("\n", 0, m.start()) + 1
            if kind == "open":
                stack.append(mod_next)
                if mod_next is not None:
                    inline.append(mod_next)
                mod_next = None
                continue
            if kind == "close":
                if stack and stack.pop() is not None:
                    inline.pop()
                if skip_depth is not None and len(stack) == skip_depth:
                    skip_depth = None
                continue
            if kind == "semi":
                if skip_depth is not None and len(stack) == skip_depth:
                    skip_depth = None
                mod_next = None
                continue
            if skip_depth is not None:
                continue
            if kind == "attr":
                if re.fullmatch(r"\s*cfg\s*\(\s*test\s*\)\s*", m.group("attr")):
                    pending_test = True
                continue
            if pending_test:
                # The item this attribute applies to starts here: skip it whole.
                pending_test = False
                skip_depth = len(stack)
                continue
            if kind == "word":
                if m.group(0) == "mod" and (n := re.compile(r"\s*(" + IDENT + r")\s*([;{])").match(text, m.end())):
                    if n.group(2) == ";":
                        directory = child_dir.joinpath(*inline)
                        child = self.module_file(directory, n.group(1))
                        full = module_path + inline + [n.group(1)]
                        self.files.append((child, full, self.child_dir(child, n.group(1))))
                    else:
                        mod_next = n.group(1)
                continue
            # A path: where does it land, seen from the crate root?
            segments = [s.strip() for s in m.group("path").split("::")]
            if not segments[-1]:
                # `a::{…}`: the group's brace is left to the brace count (read below).
                segments[-1] = "{" if text.startswith("{", m.end()) else ""
            here = module_path + inline
            if segments[0] == "crate":
                rest = segments[1:]
            elif segments[0] == "super":
                k = 0
                while k < len(segments) and segments[k] == "super":
                    k += 1
                if k < len(here):
                    continue  # stays inside this top-level module
                rest = segments[k:]
            else:
                continue
            if text[m.start() - 3 : m.start()].strip() == "in" or not rest or not rest[0]:
                continue  # pub(in crate::x) is a visibility, not a use
            heads = group_heads(text, m.end()) if rest[0] == "{" else [rest[0]]
            for head in heads:
                target = head if head in self.modules else self.reexports.get(head)
                if target and target != top:
                    where = f"{path.relative_to(self.src.parent)}:{line}"
                    edge = self.edges.setdefault((top, target), Edge(top, target, where))
                    if edge.where != where and where not in edge.more:
                        edge.more.append(where)


def items(text):
    """The top-level items of a stripped file, each with whether #[cfg(test)] applies to it."""
    out, depth, start, test = [], 0, 0, False
    for m in re.finditer(r"#!?\[[^\]]*\]|[{};]", text):
        tok = m.group(0)
        if tok.startswith("#"):
            if depth == 0 and re.fullmatch(r"#\[\s*cfg\s*\(\s*test\s*\)\s*\]", tok):
                test = True
            if depth == 0 and tok.startswith("#!"):
                start = m.end()
            continue
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
        if depth == 0 and tok in ";}":
            item = re.sub(r"#!?\[[^\]]*\]", "", text[start : m.end()]).strip()
            out.append((item, test))
            start, test = m.end(), False
    return out


def cycles(nodes, edges):
    """The strongly connected components with more than one module (Tarjan)."""
    graph = {node: sorted({b for (a, b) in edges if a == node}) for node in nodes}
    index, low, on, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return found


def bottom_up(nodes, edges):
    order, done = [], set()
    while len(done) < len(nodes):
        ready = sorted(n for n in nodes if n not in done and all(b in done for (a, b) in edges if a == n))
        order.append(ready)
        done.update(ready)
    return order


class Scripts:
    """The Python modules of one directory and the imports between them."""

    def __init__(self, directory):
        self.src = pathlib.Path(directory)
        self.modules = {path.stem: path for path in sorted(self.src.glob("*.py"))}
        if not self.modules:
            raise SystemExit(f"module-cycles: {self.src} holds neither lib.rs nor *.py files")
        self.edges = {}
        for name, path in self.modules.items():
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    targets = [alias.name.split(".")[0] for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    targets = [node.module.split(".")[0]]
                else:
                    continue
                for target in targets:
                    if target in self.modules and target != name:
                        where = f"{path.relative_to(self.src.parent)}:{node.lineno}"
                        edge = self.edges.setdefault((name, target), Edge(name, target, where))
                        if edge.where != where:
                            edge.more.append(where)


def graph_of(directory):
    return Crate(directory) if (pathlib.Path(directory) / "lib.rs").is_file() else Scripts(directory)


def documented_orders(doc):
    """{directory: (line of the marker, [[modules of a level], …] from the top down)} of `doc`."""
    lines = pathlib.Path(doc).read_text().splitlines()
    found = {}
    for i, line in enumerate(lines):
        m = re.fullmatch(r"\s*<!--\s*module order:\s*(\S+)\s*-->\s*", line)
        if not m:
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        levels = []
        for row in lines[j + 1 :]:
            if row.startswith("```"):
                break
            if row.strip() and not row[0].isspace():
                levels.append([name.strip() for name in re.split(r"\s{2,}", row.strip())[0].split(",") if name.strip()])
        found[m.group(1)] = (i + 1, levels)
    return found


def check(src):
    crate = graph_of(src)
    nodes = sorted(crate.modules)
    edges = crate.edges
    print(f"module-cycles: {src}: {len(nodes)} top-level modules, {len(edges)} edges")
    for node in nodes:
        targets = sorted(b for (a, b) in edges if a == node)
        print(f"  {node} -> {', '.join(targets) if targets else '(nothing)'}")
    found = cycles(nodes, edges)
    for component in found:
        print(f"CYCLE among {', '.join(component)}; the edges between them:")
        for (a, b), edge in sorted(edges.items()):
            if a in component and b in component:
                more = f" (and {len(edge.more)} more)" if edge.more else ""
                print(f"  {a} -> {b}: {edge.where}{more}")
    if found:
        return None
    order = bottom_up(nodes, edges)
    print("  no cycle; from the bottom up: " + " | ".join(", ".join(level) for level in order))
    return order


def check_doc(doc, orders):
    """Whether every module order `doc` writes down is the one found (`orders`: directory as
    given on the command line -> levels from the bottom up)."""
    ok = True
    for directory, (line, levels) in documented_orders(doc).items():
        where = f"{doc}:{line}"
        if directory not in orders:
            print(f"module-cycles: {where}: the order of {directory}, which was not checked in this run")
            ok = False
            continue
        expected = [list(level) for level in reversed(orders[directory])]
        if levels != expected:
            print(f"module-cycles: {where}: the order of {directory} is stale; from the top down it is:")
            for level in expected:
                print("  " + ", ".join(level))
            ok = False
        else:
            print(f"module-cycles: {where}: the order of {directory} is current")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", nargs="*", default=[str(ROOT / "src")],
                        help="a crate's src directory (holding lib.rs), or a directory of Python scripts")
    parser.add_argument("--doc", action="append", default=[], help="a Markdown file with module orders to check")
    args = parser.parse_args()
    orders, ok = {}, True
    for src in args.src:
        order = check(src)
        ok = order is not None and ok
        if order is not None:
            # Named in a document as a path from the repository root (absolute outside it).
            resolved = pathlib.Path(src).resolve()
            orders[str(resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved)] = order
    for doc in args.doc:
        ok = check_doc(doc, orders) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
