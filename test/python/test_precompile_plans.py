"""The synthetic plans of the precompile workload (julia/precompile.jl, `synthetic_plan`) are
the plans the core makes for the same layouts, so the workload compiles the code real imports
run. The formula below is julia/precompile.jl's, line for line; the core's plans come through
rsdlpack_py_import_plan for NumPy arrays of each layout.
"""

import ast
import ctypes
import math
import pathlib
import re

import numpy as np
import pytest

from rsdlpack_ctypes import PLAN_VIEW

WORKLOAD = (pathlib.Path(__file__).resolve().parents[2] / "julia" / "precompile.jl").read_text()
PARENTS = ast.literal_eval(re.search(r"parent in (\(\(.*\)\))\n", WORKLOAD).group(1))  # the workload's


def synthetic_plan(parent, step=1, reversed_=False):
    n = len(parent)
    lengths = tuple(math.ceil(parent[0] / step) if p == 0 else parent[p] for p in range(n))
    permutation = tuple(n - k for k in range(n)) if reversed_ else tuple(range(1, n + 1))
    dims = tuple(lengths[permutation[k] - 1] for k in range(n))
    ranges = [(1, step if p == 0 else 1, lengths[p]) for p in range(n)]
    return dict(dims=list(dims), parent_dims=list(parent), ranges=ranges, permutation=list(permutation),
                needs_view=int(step != 1), needs_permutation=int(reversed_ and n > 1))


@pytest.mark.parametrize("parent", PARENTS)
@pytest.mark.parametrize("step", [1, 2])
@pytest.mark.parametrize("reversed_", [False, True])
def test_each_synthetic_plan_is_the_cores_plan_for_its_layout(bridge, parent, step, reversed_):
    base = np.asfortranarray(np.zeros(parent))
    x = base[::step]
    if reversed_:
        x = x.transpose()
    result, error = bridge.import_plan(ctypes.py_object(x))
    assert error is None, error
    plan = result.plan
    try:
        core = dict(dims=plan.dims_(), parent_dims=plan.parent_dims_(), ranges=plan.ranges_(),
                    permutation=plan.permutation_(), needs_view=plan.needs_view,
                    needs_permutation=plan.needs_permutation)
        assert plan.kind == PLAN_VIEW
        assert core == synthetic_plan(parent, step, reversed_)
    finally:
        bridge.release_handle(plan.tensor)


def test_the_workload_binds_no_global():
    # PrecompileTools 1.2's @setup_workload (Julia 1.10, 1.11) runs its block at top level, with
    # no `let`: an assignment there would be a global of the package image. The block is the
    # file's last and calls one function, whose locals stay local.
    block = WORKLOAD[WORKLOAD.index("@setup_workload begin"):]
    body = [line.strip() for line in block.splitlines()[1:] if line.strip()]
    assert body == ["@compile_workload begin", "compose_every_synthetic()", "end", "end"], body
    function = WORKLOAD[WORKLOAD.index("function compose_every_synthetic()"):WORKLOAD.index("@setup_workload begin")]
    assert "buffer = zeros(UInt8" in function and "global" not in function
