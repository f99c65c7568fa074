"""Which Python types PythonCall's `pyconvert` takes through DLPack (ext/pyconvert_rules.toml,
registered by ext/RsDLPackPythonCallExt.jl), checked against the installed libraries and against
the order PythonCall 0.9.22-0.9.34 tries its rules in (src/Convert/pyconvert.jl,
`_pyconvert_get_rules`, the same at both tags: the type's MRO as "__module__:__name__" names,
each interface name "<arraystruct>", "<arrayinterface>", "<array>", "<buffer>" right after the
most basic type that has it, rules sorted by priority and then by that order).
"""

import ctypes
import importlib
import pathlib
import tomllib

import numpy as np
import pytest

from rsdlpack_ctypes import ACCESS_READ_ONLY, PLAN_VIEW, PlanOptions

REPO = pathlib.Path(__file__).resolve().parents[2]
RULES = tomllib.loads((REPO / "ext" / "pyconvert_rules.toml").read_text())["rule"]
# PythonCall's PyConvertPriority values (src/Convert/pyconvert.jl at 0.9.22, src/API/types.jl at 0.9.34).
PRIORITY = {"WRAP": 400, "ARRAY": 300, "CANONICAL": 200, "NORMAL": 0, "FALLBACK": -100}
INTERFACES = (("<arraystruct>", "__array_struct__"), ("<arrayinterface>", "__array_interface__"),
              ("<array>", "__array__"))
# PythonCall's own rules for targets that meet AbstractArray (src/Wrap/Wrap.jl, src/Convert/pyconvert.jl):
# (type name, Julia type, priority).
PYTHONCALL_RULES = [(name, "PyArray", "ARRAY") for name in ("<arraystruct>", "<arrayinterface>", "<array>", "<buffer>")] + [
    (name, julia, "NORMAL") for julia in ("Array", "AbstractArray")
    for name in ("<arraystruct>", "<arrayinterface>", "<array>", "<buffer>")]
# Whether a rule's Julia type meets the target (typeintersect(T, R) != Union{}).
MEETS = {"AbstractArray": {"PyArray", "Array", "AbstractArray", "ours"},
         "Array": {"Array", "AbstractArray", "ours"},
         "Any": {"PyArray", "Array", "AbstractArray", "ours"}}


def typename(t):
    return f"{getattr(t, '__module__', '<unknown>')}:{getattr(t, '__name__', '<name>')}"


# Types with the buffer protocol among those these tests use (PythonCall asks PyType_CheckBuffer).
BUFFER_TYPES = (bytes, bytearray, memoryview, np.ndarray)


def mro_names(t):
    """PythonCall's list of type names for `t` (interface names included)."""
    mro = list(t.__mro__)
    names = [[typename(c)] for c in mro]
    for name, attribute in INTERFACES:
        for c, entry in reversed(list(zip(mro, names))):
            if hasattr(c, attribute):
                entry.append(name)
                break
    for c, entry in reversed(list(zip(mro, names))):
        if c in BUFFER_TYPES:
            entry.append("<buffer>")
            break
    return [name for entry in names for name in entry]


def first_rule(t, target):
    """The rule PythonCall tries first for converting a `t` to `target`: (owner, type name)."""
    rules = PYTHONCALL_RULES + [(rule["type"], "ours", rule["priority"]) for rule in RULES]
    candidates = []
    for name in mro_names(t):
        for rule_name, julia, priority in rules:
            if rule_name == name and julia in MEETS[target]:
                candidates.append((PRIORITY[priority], -len(candidates), julia, name))
    candidates.sort(reverse=True)
    return ("RsDLPack" if candidates[0][2] == "ours" else "PythonCall", candidates[0][3])


def live(rule):
    """The installed library's type for the rule's example, or None when not installed."""
    try:
        module = importlib.import_module(rule["library"])
    except ImportError:
        return None
    root = rule["library"].split(".")[0]
    return type(eval(rule["example"], {root: importlib.import_module(root), rule["library"]: module}))


def test_the_table_has_one_rule_per_name_with_a_priority_pythoncall_has():
    names = [rule["type"] for rule in RULES]
    assert len(names) == len(set(names))
    assert {rule["priority"] for rule in RULES} <= {"ARRAY", "NORMAL"}  # the extension maps these two
    assert [rule["type"] for rule in RULES if rule.get("any_dlpack")] == ["builtins:object"]


@pytest.mark.parametrize("library", sorted({rule["library"] for rule in RULES if rule["library"] != "builtins"}))
def test_each_librarys_current_name_is_its_types_and_legacy_names_are_not(library):
    rules = [rule for rule in RULES if rule["library"] == library]
    t = live(rules[0])
    if t is None:
        assert all("legacy" in rule or "source" in rule for rule in rules), rules
        pytest.skip(f"{library} is not installed: its names are checked against its source (the table says where)")
    names = mro_names(t)
    assert hasattr(t, "__dlpack__") and hasattr(t, "__dlpack_device__")
    for rule in rules:
        assert (rule["type"] in names) != ("legacy" in rule), (rule, names)


class DLPackOnly:
    """A type with DLPack and nothing PythonCall has a rule for."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class DLPackAndArray(DLPackOnly):
    """A type not in the table that PythonCall views through __array__."""

    def __array__(self, dtype=None, copy=None):
        return self.array


def test_pythoncall_keeps_numpy_and_array_interface_types():
    for target in ("AbstractArray", "Any", "Array"):
        assert first_rule(np.ndarray, target)[0] == "PythonCall", target
        assert first_rule(DLPackAndArray, target)[0] == "PythonCall", target


def test_rsdlpack_takes_the_tables_types_and_dlpack_only_types():
    for rule in RULES:
        t = DLPackOnly if rule.get("any_dlpack") else live(rule)
        if t is None or rule["type"] not in mro_names(t):
            continue
        for target in ("AbstractArray", "Any", "Array"):
            assert first_rule(t, target) == ("RsDLPack", rule["type"]), (rule, target)


def test_a_subclass_of_a_tables_type_is_taken_too():
    torch = pytest.importorskip("torch")
    assert first_rule(torch.nn.Parameter, "AbstractArray") == ("RsDLPack", "torch:Tensor")


def test_without_the_exact_names_pythoncall_would_take_torch_and_jax_through_array():
    # What the ARRAY-priority rules are for: with only the catch-all, __array__ wins.
    torch = pytest.importorskip("torch")
    saved = list(RULES)
    try:
        RULES[:] = [rule for rule in saved if rule.get("any_dlpack")]
        assert first_rule(torch.Tensor, "AbstractArray") == ("PythonCall", "<array>")
    finally:
        RULES[:] = saved


@pytest.mark.parametrize("library", ["torch", "jax.numpy"])
def test_the_abstract_targets_request_is_a_view_of_each_live_type(bridge, library):
    # The rule for AbstractArray (and Any) asks from_dlpack(Array, x; readonly=true): any layout,
    # read-only memory accepted. Through the same C entry point, each type's tensor is a view.
    module = pytest.importorskip(library)
    x = module.arange(6.0, dtype=module.float32).reshape(2, 3)
    result, error = bridge.import_plan(ctypes.py_object(x), PlanOptions.of(readonly=ACCESS_READ_ONLY))
    assert error is None, error
    plan = result.plan
    try:
        assert plan.kind == PLAN_VIEW and plan.dims_() == [2, 3] and plan.permutation_() == [2, 1]
    finally:
        bridge.release_handle(plan.tensor)
