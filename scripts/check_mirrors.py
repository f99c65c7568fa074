"""Checks the two hand mirrors of the C structs, and every other copy of the ABI's constants,
against the generated header.

include/rsdlpack.h (cbindgen, from the Rust) is the reference. Its structs are parsed (field
name, C type, array length) and laid out by ctypes, which follows the platform's C ABI. Then:

- the ctypes classes of test/python/rsdlpack_ctypes.py: each header struct `RsdlX` must have a
  class `X` whose `_fields_` have the same names in the same order, and the same kind (signed
  or unsigned integer of a width, pointer, nested struct, fixed array), offset and size, and
  the same struct size and alignment;
- the Julia structs of julia/python_bridge.jl (parsed with tree-sitter-julia, Julia types
  mapped to C sizes and alignments, laid out by C's rules, which Julia's isbits structs
  follow): the same, for every header struct Julia passes to the library;
- the ABI's constants (the header's enums and #defines): julia/abi.jl and
  test/python/rsdlpack_abi.py must be exactly what scripts/abi_constants.py generates from the
  header (the Julia sources and the ctypes mirror use their names, never the numbers);
- what Julia pairs with those constants: `MIRRORED_STRUCTS` (`RSDL_STRUCT_ID_*` => mirror, which
  Julia checks `rsdlpack_struct_size` against at load) names every struct id and the struct of
  its name, as `rsdlpack_struct_size`'s documented numbering does; `ERROR_KINDS` gives every
  `RSDL_ERROR_CODE_*` the kind of its name (`:not_dlpack`); `ELEMENT_TYPES` lists the Julia
  types in `RSDL_ELEMENT_CODE_*` order, each named as its code (`Float32`, `BFLOAT16`);
- the error-code tables of docs/src/usage.md and docs/src/c_abi.md: each code with the Julia kind of
  its name, every code once;

Names must match exactly (the mirrors use the Rust field names). Prints each mismatch, naming
the struct, the field and both sides, and exits 1; exits 0 and prints a summary otherwise.

    python scripts/check_mirrors.py [--header H] [--ctypes F] [--julia F ...] [--julia-abi F]
                                    [--ctypes-abi F] [--docs F ...]
"""

import argparse
import ctypes
import importlib.util
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import abi_constants  # noqa: E402
from c_header import C_SCALARS, Field, Layout, MirrorError, c_type, header_layouts, parse_header  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
HEADER = ROOT / "include" / "rsdlpack.h"
CTYPES_MIRROR = ROOT / "test" / "python" / "rsdlpack_ctypes.py"
JULIA_MIRRORS = tuple(ROOT / "julia" / name for name in ("python_bridge.jl", "arrays.jl", "errors.jl", "eltypes.jl"))
# Generated from the header by scripts/abi_constants.py.
JULIA_ABI = ROOT / "julia" / "abi.jl"
CTYPES_ABI = ROOT / "test" / "python" / "rsdlpack_abi.py"
# Prose with an error-code table.
DOCS = (ROOT / "docs" / "src" / "usage.md", ROOT / "docs" / "src" / "c_abi.md")

# Header name → mirror name: the mirrors drop C's namespace prefix.
PREFIX = "Rsdl"
# Header structs that Julia does not mirror, and why.
NOT_IN_JULIA = {
    "RsdlStreamDescription": "Julia builds CUDA streams through the jlrs bridge, not this C API",
}


def mirror_name(header_name):
    return header_name[len(PREFIX):] if header_name.startswith(PREFIX) else header_name


# ---------------------------------------------------------------------------------------------
# The ctypes mirror

def load_module(path, name=None):
    spec = importlib.util.spec_from_file_location(name or f"mirror_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ctypes_kind(ctype, class_to_header):
    if isinstance(ctype, type) and issubclass(ctype, ctypes.Array):
        return f"{ctypes_kind(ctype._type_, class_to_header)}[{ctype._length_}]"
    if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure):
        return f"struct {class_to_header.get(ctype.__name__, PREFIX + ctype.__name__)}"
    if isinstance(ctype, type) and issubclass(ctype, (ctypes._Pointer, ctypes._CFuncPtr)):
        return "pointer"
    code = getattr(ctype, "_type_", None)
    if code in ("P", "O", "z", "Z"):
        return "pointer"
    if code == "?":
        return "bool"
    if code in ("f", "d"):
        return f"float{8 * ctypes.sizeof(ctype)}"
    if isinstance(code, str) and code in "bBhHiIlLqQc":
        signed = code in "bhilqc"
        return f"{'int' if signed else 'uint'}{8 * ctypes.sizeof(ctype)}"
    raise MirrorError(f"ctypes: unknown field type {ctype!r}")


def ctypes_layouts(path, header_names, abi_path=CTYPES_ABI):
    # The mirror imports its constants as `rsdlpack_abi`: from `abi_path`, whatever sys.path holds.
    saved = sys.modules.get("rsdlpack_abi")
    sys.modules["rsdlpack_abi"] = load_module(abi_path, "rsdlpack_abi")
    try:
        module = load_module(path)
    finally:
        if saved is None:
            del sys.modules["rsdlpack_abi"]
        else:
            sys.modules["rsdlpack_abi"] = saved
    class_to_header = {mirror_name(n): n for n in header_names}
    layouts = {}
    for header_name in header_names:
        cls = getattr(module, mirror_name(header_name), None)
        if not (isinstance(cls, type) and issubclass(cls, ctypes.Structure)):
            continue
        fields = []
        for entry in cls._fields_:
            field, ctype = entry[0], entry[1]
            descriptor = getattr(cls, field)
            declared = getattr(ctype, "__name__", repr(ctype))
            fields.append(Field(field, ctypes_kind(ctype, class_to_header), descriptor.offset,
                                ctypes.sizeof(ctype), declared))
        layouts[header_name] = Layout(cls.__name__, tuple(fields), ctypes.sizeof(cls), ctypes.alignment(cls))
    return layouts, module


# ---------------------------------------------------------------------------------------------
# The Julia mirror

# Julia's C-compatible scalar types on 64-bit Linux and macOS: (size, kind).
JULIA_SCALARS = {
    "Int8": (1, "int8"), "Int16": (2, "int16"), "Int32": (4, "int32"), "Int64": (8, "int64"),
    "UInt8": (1, "uint8"), "UInt16": (2, "uint16"), "UInt32": (4, "uint32"), "UInt64": (8, "uint64"),
    "Int": (8, "int64"), "UInt": (8, "uint64"),
    "Cchar": (1, "int8"), "Cuchar": (1, "uint8"), "Cshort": (2, "int16"), "Cushort": (2, "uint16"),
    "Cint": (4, "int32"), "Cuint": (4, "uint32"), "Clong": (8, "int64"), "Culong": (8, "uint64"),
    "Clonglong": (8, "int64"), "Culonglong": (8, "uint64"),
    "Csize_t": (8, "uint64"), "Cssize_t": (8, "int64"), "Cintmax_t": (8, "int64"), "Cuintmax_t": (8, "uint64"),
    "Cptrdiff_t": (8, "int64"),
    "Bool": (1, "bool"), "Float32": (4, "float32"), "Float64": (8, "float64"),
    "Cfloat": (4, "float32"), "Cdouble": (8, "float64"),
}
JULIA_POINTERS = ("Ptr", "Cstring")


def julia_tree(paths):
    """Structs (name → [(field, type node)]) and constants (name → value node) of the files."""
    import tree_sitter
    import tree_sitter_julia

    parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_julia.language()))
    structs, constants = {}, {}
    for path in paths:
        root = parser.parse(pathlib.Path(path).read_bytes()).root_node
        for node in root.children:
            if node.type == "struct_definition":
                head = next(c for c in node.children if c.type == "type_head")
                name = head.children[0].text.decode()
                fields = []
                for child in node.children:
                    if child.type == "macrocall_expression":   # @atomic x::T
                        child = next((c for c in child.children if c.type == "macro_argument_list"), child)
                        child = next((c for c in child.children if c.type == "typed_expression"), child)
                    if child.type == "typed_expression":
                        fields.append((child.children[0].text.decode(), child.children[-1]))
                    elif child.type == "identifier":
                        fields.append((child.text.decode(), None))   # untyped: Any
                structs[name] = fields
            elif node.type == "const_statement":
                assignment = next((c for c in node.children if c.type == "assignment"), None)
                if assignment is not None and assignment.children[0].type == "identifier":
                    constants[assignment.children[0].text.decode()] = assignment.children[-1]
    return structs, constants


def julia_integer(node, constants):
    text = node.text.decode()
    if node.type == "identifier" and text in constants:
        return julia_integer(constants[text], constants)
    if node.type == "call_expression" and node.children[0].text.decode() in JULIA_SCALARS:   # Int32(1)
        args = [c for c in node.children[1].children if c.type not in ("(", ")", ",")]
        if len(args) == 1:
            return julia_integer(args[0], constants)
    try:
        return int(text, 0)
    except ValueError:
        raise MirrorError(f"Julia: `{text}` is not an integer constant") from None


def julia_type(node, structs, constants, layouts, name_to_header, seen=()):
    """(size, align, kind) of a Julia field type."""
    if node is None:
        raise MirrorError("Julia: an untyped field (Any) has no C layout")
    text = node.text.decode()
    if node.type == "identifier":
        if text in JULIA_SCALARS:
            size, kind = JULIA_SCALARS[text]
            return size, size, kind
        if text in JULIA_POINTERS:
            return 8, 8, "pointer"
        if text in constants:
            return julia_type(constants[text], structs, constants, layouts, name_to_header, seen)
        if text in structs:
            layout = julia_layout(text, structs, constants, layouts, name_to_header, seen)
            return layout.size, layout.align, f"struct {name_to_header.get(text, PREFIX + text)}"
    if node.type == "parametrized_type_expression":
        head = node.children[0].text.decode()
        args = [c for c in node.children[1].children if c.type not in ("{", "}", ",")]
        if head == "Ptr":
            return 8, 8, "pointer"
        if head == "NTuple" and len(args) == 2:
            count = julia_integer(args[0], constants)
            size, align, kind = julia_type(args[1], structs, constants, layouts, name_to_header, seen)
            return size * count, align, f"{kind}[{count}]"
    raise MirrorError(f"Julia: unknown field type `{text}` (add it to check_mirrors.py's JULIA_SCALARS)")


def julia_layout(name, structs, constants, layouts, name_to_header, seen=()):
    """C layout of a Julia struct: each field at the next multiple of its alignment."""
    if name in layouts:
        return layouts[name]
    if name in seen:
        raise MirrorError(f"Julia: struct {name} contains itself")
    offset, align, fields = 0, 1, []
    for field, node in structs[name]:
        try:
            size, field_align, kind = julia_type(node, structs, constants, layouts, name_to_header, seen + (name,))
        except MirrorError as e:
            raise MirrorError(f"{e} (field {name}.{field})") from None
        offset = -(-offset // field_align) * field_align
        fields.append(Field(field, kind, offset, size, node.text.decode() if node else "Any"))
        offset += size
        align = max(align, field_align)
    layouts[name] = Layout(name, tuple(fields), -(-offset // align) * align, align)
    return layouts[name]


def julia_layouts(paths, header_names):
    structs, constants = julia_tree(paths)
    name_to_header = {mirror_name(n): n for n in header_names}
    layouts, out = {}, {}
    for header_name in header_names:
        name = mirror_name(header_name)
        if name in structs:
            out[header_name] = julia_layout(name, structs, constants, layouts, name_to_header)
    return out, constants


def param_kind(declaration, structs):
    """Kind of a C parameter or return type (`const struct RsdlX *name` → pointer to struct RsdlX)."""
    words = declaration.replace("*", " * ").split()
    if words and words[-1] not in ("*",) and len(words) > 1 and words[-1] not in C_SCALARS \
            and words[-1] not in structs and words[-1] != "void":
        words = words[:-1]   # the parameter's name
    stars = words.count("*")
    words = [w for w in words if w not in ("const", "struct", "*")]
    if stars == 1 and len(words) == 1 and words[0] in structs:
        return f"pointer to struct {words[0]}"
    if stars:
        return "pointer"
    if words == ["void"]:
        return "void"
    return c_type(" ".join(words), structs, {})[1]


class Recorder:
    """Stands in for the loaded library: records what the Bridge sets on each function."""

    def __init__(self, path):
        self.functions = {}

    def __getattr__(self, name):
        return self.functions.setdefault(name, type("Function", (), {})())


def ctypes_argument_kind(ctype, class_to_header):
    if ctype is None:
        return "void"
    if isinstance(ctype, type) and issubclass(ctype, ctypes._Pointer) \
            and issubclass(ctype._type_, ctypes.Structure) and ctype._type_.__name__ in class_to_header:
        return f"pointer to struct {class_to_header[ctype._type_.__name__]}"
    return ctypes_kind(ctype, class_to_header)


def compare_functions(module, structs, functions):
    """The argtypes and restype the ctypes Bridge declares, against the header's prototypes."""
    class_to_header = {mirror_name(n): n for n in structs}
    recorder = module.Bridge("(no library)", Recorder).lib
    problems, checked = [], 0
    for name, function in recorder.functions.items():
        if not name.startswith("rsdlpack_"):
            continue
        if name not in functions:
            problems.append(f"{name}: ctypes declares it, the header does not")
            continue
        returns, params = functions[name]
        header_args = [param_kind(p, structs) for p in params]
        if hasattr(function, "argtypes"):
            checked += 1
            theirs = [ctypes_argument_kind(a, class_to_header) for a in function.argtypes]
            if len(theirs) != len(header_args):
                problems.append(f"{name}: the header has {len(header_args)} parameters ({', '.join(params)}), "
                                f"ctypes argtypes {len(theirs)}")
            for i, (declared, ours, kind) in enumerate(zip(params, header_args, theirs)):
                # A pointer to a struct may be passed as any pointer; a struct's mirror must be its own.
                if ours != kind and not (ours.startswith("pointer") and kind == "pointer"):
                    problems.append(f"{name}: parameter {i + 1}: header has `{declared}` ({ours}), "
                                    f"ctypes has {function.argtypes[i].__name__} ({kind})")
        header_return = param_kind(returns, structs)
        if hasattr(function, "restype"):
            kind = ctypes_argument_kind(function.restype, class_to_header)
            if kind != header_return:
                problems.append(f"{name}: returns {returns} ({header_return}) in the header, ctypes restype {kind}")
        elif header_return not in ("void", "int32"):
            problems.append(f"{name}: returns {returns} in the header; ctypes sets no restype (int)")
    return problems, checked


# ---------------------------------------------------------------------------------------------
# The comparison

def describe(field):
    return f"`{field.name}` ({field.declared}: {field.kind}, offset {field.offset}, {field.size} bytes)"


def compare(reference, mirror, side):
    """Messages for each difference between a header layout and a mirror's."""
    problems = []
    where = f"{reference.name} ({side} {mirror.name})"
    for i in range(max(len(reference.fields), len(mirror.fields))):
        ours = reference.fields[i] if i < len(reference.fields) else None
        theirs = mirror.fields[i] if i < len(mirror.fields) else None
        if ours is None:
            problems.append(f"{where}: field {i + 1}: header has none, {side} has {describe(theirs)}")
        elif theirs is None:
            problems.append(f"{where}: field {i + 1}: header has {describe(ours)}, {side} has none")
        elif (ours.name, ours.kind, ours.offset, ours.size) != (theirs.name, theirs.kind, theirs.offset, theirs.size):
            what = [w for w, a, b in (("name", ours.name, theirs.name), ("type", ours.kind, theirs.kind),
                                       ("offset", ours.offset, theirs.offset), ("size", ours.size, theirs.size)) if a != b]
            problems.append(f"{where}: field {i + 1} `{ours.name}` differs ({', '.join(what)}): "
                            f"header has {describe(ours)}, {side} has {describe(theirs)}")
    if (reference.size, reference.align) != (mirror.size, mirror.align):
        problems.append(f"{where}: header struct is {reference.size} bytes aligned to {reference.align}, "
                        f"{side}'s is {mirror.size} bytes aligned to {mirror.align}")
    return problems


def struct_size_numbering(functions_doc):
    """The numbers `rsdlpack_struct_size` documents: [header struct name, …] by number."""
    match = re.search(r"The size in bytes of the C structs.*?\*/", functions_doc, re.S)
    if not match:
        raise MirrorError("header: rsdlpack_struct_size's documentation (its numbering) is not found")
    numbered = {int(n): name for n, name in re.findall(r"(\d+) `(\w+)`", match[0])}
    if sorted(numbered) != list(range(len(numbered))) or not numbered:
        raise MirrorError(f"header: rsdlpack_struct_size's numbering is not 0, 1, …: {numbered}")
    return [numbered[i] for i in range(len(numbered))]


def enum_names(groups, enum, prefix):
    """[(name without `prefix`, value)] of a header enum, in value order."""
    if enum not in groups:
        raise MirrorError(f"header: no enum {enum}")
    return sorted(((name.removeprefix(prefix), value) for name, value in groups[enum]), key=lambda c: c[1])


def camel(snake):
    """IMPORT_OPTIONS → ImportOptions."""
    return "".join(word.capitalize() for word in snake.split("_"))


def julia_pairs(node, what):
    """[(key text, value node)] of a Julia `(a => b, …)` or `Dict{…}(a => b, …)`."""
    if node is None:
        raise MirrorError(f"Julia: {what} is not defined")
    items = node.children[1].children if node.type == "call_expression" else node.children
    pairs = []
    for item in items:
        if item.type in ("(", ")", ","):
            continue
        if item.type != "binary_expression" or item.children[1].text.decode() != "=>":
            raise MirrorError(f"Julia: {what}: `{item.text.decode()}` is not a `code => value` pair")
        pairs.append((item.children[0].text.decode(), item.children[2]))
    return pairs


def check_struct_ids(groups, text, julia_constants):
    """Julia's MIRRORED_STRUCTS and rsdlpack_struct_size's documented numbering, against RsdlStructId."""
    problems = []
    ids = enum_names(groups, "RsdlStructId", "RSDL_STRUCT_ID_")
    expected = [camel(name) for name, _ in ids]
    if [value for _, value in ids] != list(range(len(ids))):
        problems.append(f"header: RsdlStructId is not numbered 0, 1, …: {ids}")
    documented = [mirror_name(n) for n in struct_size_numbering(text)]
    if documented != expected:
        problems.append(f"rsdlpack_struct_size's documentation numbers {documented}, RsdlStructId {expected}")
    pairs = julia_pairs(julia_constants.get("MIRRORED_STRUCTS"), "MIRRORED_STRUCTS")
    listed = {key: node.text.decode() for key, node in pairs}
    if len(pairs) != len(listed):
        problems.append("Julia MIRRORED_STRUCTS names a struct id twice")
    for name, _ in ids:
        key, struct = "STRUCT_ID_" + name, camel(name)
        if key not in listed:
            problems.append(f"Julia MIRRORED_STRUCTS has no {key} (RSDL_{key}, struct {PREFIX}{struct})")
        elif listed[key] != struct:
            problems.append(f"Julia MIRRORED_STRUCTS pairs {key} with {listed[key]}; RSDL_{key} numbers {PREFIX}{struct}")
    known = {"STRUCT_ID_" + name for name, _ in ids}
    problems += [f"Julia MIRRORED_STRUCTS: {key} is no RsdlStructId constant" for key in listed if key not in known]
    return problems


def check_error_kinds(groups, julia_constants):
    """Julia's ERROR_KINDS: every RsdlErrorCode, each with the kind of its name."""
    problems = []
    codes = dict(enum_names(groups, "RsdlErrorCode", "RSDL_ERROR_CODE_"))
    pairs = julia_pairs(julia_constants.get("ERROR_KINDS"), "ERROR_KINDS")
    seen = set()
    for key, node in pairs:
        kind = node.text.decode()
        name = key.removeprefix("ERROR_CODE_")
        if not key.startswith("ERROR_CODE_") or name not in codes:
            problems.append(f"Julia ERROR_KINDS: `{key} => {kind}`: {key} is no RsdlErrorCode constant")
        elif kind != ":" + name.lower():
            problems.append(f"Julia ERROR_KINDS gives {key} the kind {kind}; its name says :{name.lower()}")
        seen.add(name)
    for name in codes:
        if name not in seen:
            problems.append(f"Julia ERROR_KINDS has no kind for RSDL_ERROR_CODE_{name} ({codes[name]})")
    return problems


def check_element_types(groups, julia_constants):
    """Julia's ELEMENT_TYPES (indexed by code + 1): the types of the RsdlElementCode names, in order."""
    codes = enum_names(groups, "RsdlElementCode", "RSDL_ELEMENT_CODE_")
    if [value for _, value in codes] != list(range(len(codes))):
        return [f"header: RsdlElementCode is not numbered 0, 1, …: {codes}"]
    node = julia_constants.get("ELEMENT_TYPES")
    if node is None or node.type != "tuple_expression":
        return ["Julia: ELEMENT_TYPES is not a tuple"]
    listed = [c.text.decode() for c in node.children if c.type not in ("(", ")", ",")]
    # Each Julia name is its code's name without underscores (ComplexF32 ↔ COMPLEX_F32).
    if [n.upper() for n in listed] != [name.replace("_", "") for name, _ in codes]:
        return [f"Julia ELEMENT_TYPES is ({', '.join(listed)}); RsdlElementCode numbers "
                f"({', '.join(name for name, _ in codes)})"]
    return []


def check_error_table(groups, path):
    """A document's error-code table: rows `| code | … `:kind` …` for every RsdlErrorCode."""
    codes = {value: name for name, value in enum_names(groups, "RsdlErrorCode", "RSDL_ERROR_CODE_")}
    rows = re.findall(r"^\|\s*(\d+)\s*\|[^\n]*?`:(\w+)`", pathlib.Path(path).read_text(), re.M)
    where = pathlib.Path(path).name
    problems = []
    if not rows:
        return [f"{where}: no error-code table (rows `| code | … `:kind` …`)"]
    documented = {}
    for code, kind in rows:
        code = int(code)
        if code in documented:
            problems.append(f"{where}: error code {code} has two rows")
        documented[code] = kind
        if code not in codes:
            problems.append(f"{where}: error code {code} (:{kind}) is no RsdlErrorCode")
        elif kind != codes[code].lower():
            problems.append(f"{where}: error code {code} is :{kind}; the header's {code} is "
                            f"RSDL_ERROR_CODE_{codes[code]} (:{codes[code].lower()})")
    for value, name in codes.items():
        if value not in documented:
            problems.append(f"{where}: the error-code table lacks RSDL_ERROR_CODE_{name} ({value})")
    return problems


def check(header=HEADER, ctypes_path=CTYPES_MIRROR, julia_paths=JULIA_MIRRORS, julia_abi=JULIA_ABI,
          ctypes_abi=CTYPES_ABI, docs=DOCS):
    """(messages, summary lines)."""
    text = pathlib.Path(header).read_text()
    structs, _, _, functions = parse_header(text)
    reference = header_layouts(text)
    names = list(reference)
    problems, summary = [], []
    if not names or not functions:
        return [f"header: no structs or no functions found in {header}"], summary

    mirrors, module = ctypes_layouts(ctypes_path, names, ctypes_abi)
    julia, julia_constants = julia_layouts([julia_abi, *julia_paths], names)
    for side, found, required in (("ctypes", mirrors, names),
                                  ("Julia", julia, [n for n in names if n not in NOT_IN_JULIA])):
        for name in required:
            if name not in found:
                problems.append(f"{name}: {side} has no mirror named {mirror_name(name)}")
        for name, layout in found.items():
            problems += compare(reference[name], layout, side)
        summary.append(f"{side}: {len(found)} structs checked ({', '.join(mirror_name(n) for n in found)})")

    # The constants: generated from the header, then what Julia pairs with them.
    for path, render in ((julia_abi, abi_constants.render_julia), (ctypes_abi, abi_constants.render_python)):
        problem = abi_constants.stale(path, render, text)
        if problem:
            problems.append(problem)
    groups = {group: constants for group, _, constants in abi_constants.header_constants(text)}
    summary.append(f"constants: {sum(map(len, groups.values()))} in {len(groups)} groups, "
                   f"generated into {pathlib.Path(julia_abi).name} and {pathlib.Path(ctypes_abi).name}")
    problems += check_struct_ids(groups, text, julia_constants)
    problems += check_error_kinds(groups, julia_constants)
    problems += check_element_types(groups, julia_constants)
    for path in docs:
        problems += check_error_table(groups, path)
    summary.append("Julia's MIRRORED_STRUCTS, ERROR_KINDS and ELEMENT_TYPES, the error-code tables of "
                   + ", ".join(pathlib.Path(p).name for p in docs) + ": checked against the header")

    function_problems, checked = compare_functions(module, structs, functions)
    problems += function_problems
    summary.append(f"ctypes Bridge: {checked} functions' argtypes and restype checked")
    summary.append(f"header: {len(names)} structs, {len(functions)} functions ({header})")
    return problems, summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--header", default=HEADER)
    parser.add_argument("--ctypes", default=CTYPES_MIRROR)
    parser.add_argument("--julia", nargs="+", default=JULIA_MIRRORS)
    parser.add_argument("--julia-abi", default=JULIA_ABI)
    parser.add_argument("--ctypes-abi", default=CTYPES_ABI)
    parser.add_argument("--docs", nargs="*", default=DOCS)
    args = parser.parse_args(argv)
    try:
        problems, summary = check(args.header, args.ctypes, args.julia, args.julia_abi, args.ctypes_abi, args.docs)
    except MirrorError as e:
        problems, summary = [str(e)], []
    for line in summary:
        print(line)
    for problem in problems:
        print("MISMATCH:", problem)
    print(f"mirrors: {'FAILED, ' + str(len(problems)) + ' mismatches' if problems else 'match the header'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
