"""The C header include/rsdlpack.h read from Python: its structs, `#define`s, enums and
functions, and each struct's layout as a C compiler gives it (built with ctypes).

The one reader of the header, shared by scripts/check_mirrors.py (which compares the hand mirrors
with these layouts) and scripts/abi_constants.py (which generates the constants' copies).
"""

import ctypes
import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Field:
    name: str
    kind: str       # int32, uint64, bool, float64, pointer, struct RsdlX, int64[32]
    offset: int
    size: int
    declared: str   # as the side writes the type, for messages


@dataclasses.dataclass(frozen=True)
class Layout:
    name: str
    fields: tuple
    size: int
    align: int


class MirrorError(Exception):
    """A header or mirror that cannot be read, or that does not match."""


# C scalar types of the header: ctypes type and kind.
C_SCALARS = {
    "int8_t": (ctypes.c_int8, "int8"),
    "int16_t": (ctypes.c_int16, "int16"),
    "int32_t": (ctypes.c_int32, "int32"),
    "int64_t": (ctypes.c_int64, "int64"),
    "uint8_t": (ctypes.c_uint8, "uint8"),
    "uint16_t": (ctypes.c_uint16, "uint16"),
    "uint32_t": (ctypes.c_uint32, "uint32"),
    "uint64_t": (ctypes.c_uint64, "uint64"),
    "size_t": (ctypes.c_size_t, f"uint{8 * ctypes.sizeof(ctypes.c_size_t)}"),
    "uintptr_t": (ctypes.c_size_t, f"uint{8 * ctypes.sizeof(ctypes.c_size_t)}"),
    "intptr_t": (ctypes.c_ssize_t, f"int{8 * ctypes.sizeof(ctypes.c_ssize_t)}"),
    "bool": (ctypes.c_bool, "bool"),
    "float": (ctypes.c_float, "float32"),
    "double": (ctypes.c_double, "float64"),
    "char": (ctypes.c_char, "int8"),
}


def strip_c(text):
    """The header without comments and preprocessor lines."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def parse_header(text):
    """(structs, defines, enums, functions): structs as {name: [(field, C type, length|None)]},
    in header order; #define'd integers; enum constants; {function: (return type, [param types])}."""
    defines = {m[1]: int(m[2], 0) for m in re.finditer(r"^#define\s+(\w+)\s+(-?(?:0x)?[0-9a-fA-F]+)\s*$", text, re.M)}
    code = strip_c(text)
    structs = {}
    for m in re.finditer(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", code, re.S):
        tag, body, name = m[1], m[2], m[3]
        if tag != name:
            raise MirrorError(f"header: struct tag {tag} typedef'd as {name}")
        fields = []
        for declaration in filter(None, (d.strip() for d in body.split(";"))):
            d = re.fullmatch(r"(.+?)\s*\b(\w+)\s*(?:\[\s*(\w+)\s*\])?", " ".join(declaration.split()))
            if not d:
                raise MirrorError(f"header: cannot read the field `{declaration}` of {name}")
            length = d[3]
            if length is not None:
                length = int(length) if length.isdigit() else defines.get(length)
                if length is None:
                    raise MirrorError(f"header: {name}.{d[2]}: array length {d[3]} is not #define'd")
            fields.append((d[2], d[1].strip(), length))
        structs[name] = fields
    enums = {}
    for m in re.finditer(r"enum\s+\w+[^{;]*\{(.*?)\}", code, re.S):
        for constant in m[1].split(","):
            if constant.strip():
                key, value = constant.split("=")
                enums[key.strip()] = int(value.strip(), 0)
    functions = {}
    for statement in code.split(";"):
        m = re.fullmatch(r"\s*([\w\s\*]+?)\s*\b(rsdlpack_\w+)\s*\(([^()]*)\)\s*", re.split(r"[{}]", statement)[-1])
        if not m:
            continue
        params = [] if m[3].strip() in ("", "void") else [" ".join(p.split()) for p in m[3].split(",")]
        functions[m[2]] = (" ".join(m[1].split()), params)
    return structs, defines, enums, functions


def c_type(type_text, structs, built):
    """(ctypes type, kind) of a C type as the header writes it (no array)."""
    words = type_text.replace("*", " * ").split()
    words = [w for w in words if w != "const"]
    if "*" in words:
        return ctypes.c_void_p, "pointer"
    if words and words[0] == "struct":
        words = words[1:]
    if len(words) != 1:
        raise MirrorError(f"header: unknown C type `{type_text}`")
    (word,) = words
    if word in C_SCALARS:
        return C_SCALARS[word]
    if word in structs:
        return header_ctypes(word, structs, built), f"struct {word}"
    raise MirrorError(f"header: unknown C type `{type_text}` (add it to c_header.py's C_SCALARS)")


def header_ctypes(name, structs, built):
    """A ctypes.Structure built from the header's definition of `name` (memoised in `built`)."""
    if name not in built:
        fields = []
        for field, type_text, length in structs[name]:
            ctype, _ = c_type(type_text, structs, built)
            fields.append((field, ctype * length if length is not None else ctype))
        built[name] = type(name, (ctypes.Structure,), {"_fields_": fields})
    return built[name]


def header_layouts(text):
    structs, _, _, _ = parse_header(text)
    built = {}
    layouts = {}
    for name, fields in structs.items():
        cls = header_ctypes(name, structs, built)
        out = []
        for field, type_text, length in fields:
            ctype, kind = c_type(type_text, structs, built)
            declared = type_text + (f"[{length}]" if length is not None else "")
            if length is not None:
                kind = f"{kind}[{length}]"
            size = ctypes.sizeof(ctype * length if length is not None else ctype)
            out.append(Field(field, kind, getattr(cls, field).offset, size, declared))
        layouts[name] = Layout(name, tuple(out), ctypes.sizeof(cls), ctypes.alignment(cls))
    return layouts
