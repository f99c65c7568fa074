# RsDLPack's Julia test suite: the Rust tests' cases, through PyCall and PythonCall, against
# NumPy (and JAX and PyTorch when installed). Runs as-is wherever `julia` is:
#
#     julia --project=. -e 'using Pkg; Pkg.build(); Pkg.test()'
#
# Each front-end runs in its own process (RSDLPACK_TEST_FRONTEND=PyCall or PythonCall selects
# one), with the Python its package finds. PythonCall: CondaPkg's environment, to which
# CondaPkg.toml's [dev.deps] adds NumPy when RsDLPack is tested. PyCall: the Python it was built
# with (ENV["PYTHON"] when `Pkg.build("PyCall")` ran; by default python3 on PATH on Linux, its
# own Conda elsewhere). A front-end whose Python cannot import NumPy fails; it records a skipped
# test instead only for a user who opted out with RSDLPACK_TEST_ALLOW_NO_NUMPY=1, and never where
# CI is set.
#
# RSDLPACK_TEST_PYTHON=/path/to/python: PythonCall uses that interpreter (no CondaPkg
# environment). PyCall cannot change its Python after it is built: the variable sets
# PYCALL_JL_RUNTIME_PYTHON, which PyCall honours only for an interpreter with the libpython it
# was built with (a virtual environment of that Python) and refuses otherwise; for any other
# Python, rebuild PyCall with ENV["PYTHON"] set to it first.
#
# This file sets up each process and its front-end; the tests are one file per subject, included
# below: without Python eltypes.jl, abi.jl, package.jl, jll.jl; with NumPy numpy.jl, release.jl,
# share.jl, strided.jl (StridedViews, a test dependency); jax.jl and torch.jl when those are
# installed; autodiff.jl and lux.jl (Zygote, LuxCore, Optimisers: test dependencies) likewise; cuda.jl with a GPU; reactant.jl where Reactant is in the environment.
#
# The README's examples are test/readme_pythoncall.jl, test/readme_pycall.jl and the CUDA part
# of test/cuda.jl, line for line: test/python/test_readme.py fails when they differ.

# Names, not whole modules: fatou (CI's Julia linter) cannot see what a whole-module `using`
# of a package it has not indexed brings in, and then checks nothing in the file.
using Test: @test, @testset, @test_throws, @test_skip
using Test: @inferred
using RsDLPack: RsDLPack, from_dlpack, share, flush_releases, unsafe_cuda_stream, DLPackError, ReadOnlyArray, DLPackRaw

const TEST_PYTHON = get(ENV, "RSDLPACK_TEST_PYTHON", nothing)
if TEST_PYTHON !== nothing
    ENV["JULIA_CONDAPKG_BACKEND"] = "Null"
    ENV["JULIA_PYTHONCALL_EXE"] = TEST_PYTHON
    ENV["PYCALL_JL_RUNTIME_PYTHON"] = TEST_PYTHON
end

const FRONTEND = get(ENV, "RSDLPACK_TEST_FRONTEND", nothing)

"""
Whether a front-end without NumPy may skip its tests: only when the user opted out
(RSDLPACK_TEST_ALLOW_NO_NUMPY=1), and never on CI (`CI` set, as CI services do), where a
skipped suite would pass for a tested one.
"""
function numpy_may_be_missing(env=ENV)
    on_ci = !(lowercase(get(env, "CI", "")) in ("", "0", "false"))
    return get(env, "RSDLPACK_TEST_ALLOW_NO_NUMPY", "") == "1" && !on_ci
end

@testset "a front-end without NumPy is skipped only for a user who opted out" begin
    @test !numpy_may_be_missing(Dict{String,String}())
    @test numpy_may_be_missing(Dict("RSDLPACK_TEST_ALLOW_NO_NUMPY" => "1"))
    @test numpy_may_be_missing(Dict("RSDLPACK_TEST_ALLOW_NO_NUMPY" => "1", "CI" => "false"))
    @test !numpy_may_be_missing(Dict("RSDLPACK_TEST_ALLOW_NO_NUMPY" => "1", "CI" => "true"))
    @test !numpy_may_be_missing(Dict("RSDLPACK_TEST_ALLOW_NO_NUMPY" => "yes"))
end

@testset "Julia side, no Python" begin
    include("eltypes.jl")
    include("abi.jl")
    include("package.jl")
    include("jll.jl")
end

# One process per front-end: PyCall and PythonCall each load Python their own way.
if FRONTEND === nothing
    for frontend in ("PythonCall", "PyCall")
        # PythonCall: two threads, since the deferred-release test needs one that does not hold
        # the GIL. PyCall: one, since its PyObject finalizer calls Py_DecRef on whichever thread
        # collects, without the GIL.
        threads = frontend == "PyCall" ? 1 : 2
        # fatou-ignore non-public-access: Base.julia_cmd is the documented way to start this same Julia
        cmd = addenv(`$(Base.julia_cmd()) --threads=$threads --project=$(Base.active_project()) $(@__FILE__)`,
                     "RSDLPACK_TEST_FRONTEND" => frontend)
        @testset "$frontend" begin
            @test success(pipeline(cmd; stdout, stderr))
        end
    end
    # fatou-ignore discouraged-function: the front-end processes above ran every test; this process is done
    exit()
end

if FRONTEND == "PyCall"
    import PyCall
    const PyT = PyCall.PyObject
    pyimport_(name) = PyCall.pyimport(name)
    pycall_(f, args...) = PyCall.pycall(f, PyCall.PyObject, args...)
    tojl(T, x) = convert(T, x)
    sys_path_insert(dir) = pushfirst!(PyCall.PyVector(PyCall.pyimport("sys")."path"), dir)
else
    import PythonCall
    const PyT = PythonCall.Py
    pyimport_(name) = PythonCall.pyimport(name)
    pycall_(f, args...) = f(args...)
    tojl(T, x) = PythonCall.pyconvert(T, x)
    sys_path_insert(dir) = PythonCall.pyimport("sys").path.insert(0, dir)
end

"The reason NumPy cannot be imported by this front-end's Python, or `nothing`."
function numpy_missing()
    try
        pyimport_("numpy")
        return nothing
    catch e
        python = try tojl(String, getproperty(pyimport_("sys"), :executable)) catch; "(unknown)" end
        return "NumPy is not importable from $FRONTEND's Python $python ($(sprint(showerror, e)));" *
               " install it there, or set RSDLPACK_TEST_PYTHON to a Python that has it"
    end
end

const NUMPY_MISSING = numpy_missing()
if NUMPY_MISSING !== nothing
    @testset "$FRONTEND" begin
        if numpy_may_be_missing()
            @warn NUMPY_MISSING * " (skipped: RSDLPACK_TEST_ALLOW_NO_NUMPY=1)"
            @test_skip NUMPY_MISSING
        else
            @error NUMPY_MISSING * "; RSDLPACK_TEST_ALLOW_NO_NUMPY=1 skips this front-end (not where CI is set)"
            @test NUMPY_MISSING === nothing
        end
    end
    # fatou-ignore discouraged-function: this front-end's process has nothing else it can test
    exit()
end

sys_path_insert(@__DIR__)
const H = pyimport_("helpers")
fn(name) = getproperty(H, Symbol(name))
py(name, args...) = pycall_(fn(name), args...)
jl(T, name, args...) = tojl(T, py(name, args...))
make(expression) = py("make", expression)
address(a) = UInt(jl(Int, "address", a))
refcount(o) = jl(Int, "refcount", o)

"The Julia array with the tensor's values and indices (row-major values reshaped)."
function expected(a, ::Type{T}) where {T}
    dims = Tuple(jl(Vector{Int}, "shape", a))
    values = jl(Vector{ComplexF64}, "flat", a)
    isempty(dims) && return fill(convert(T, real(values[1])))
    conv(z) = T <: Complex ? T(z) : T(real(z))
    return permutedims(reshape(conv.(values), reverse(dims)), reverse(1:length(dims)))
end

@testset "$FRONTEND with NumPy" begin
    include("numpy.jl")
    include("release.jl")
    include("share.jl")
    include("strided.jl")
end

include("jax.jl")
include("torch.jl")
# Differentiable calls into torch and JAX (PyFunction, torch_layer), when those are installed.
include("autodiff.jl")
include("lux.jl")

@testset "$FRONTEND: unsafe_cuda_stream takes the Python int" begin
    # Converted by the front-end's extension, then refused for want of CUDA (not loaded yet in
    # this process; test/cuda.jl loads it): the message names the UInt the Python int became.
    err = try unsafe_cuda_stream(make("12345")); nothing catch e; e end
    @test err isa ArgumentError && occursin("UInt64", err.msg)
end

# The README's examples, as the README writes them (test/python/test_readme.py).
FRONTEND == "PythonCall" && include("readme_pythoncall.jl")
# PythonCall only: its pyconvert rules and wrapper types.
FRONTEND == "PythonCall" && include("pyconvert.jl")
FRONTEND == "PyCall" && include("readme_pycall.jl")
# docs/src/autodiff.md's examples, as the page writes them (PythonCall, as the page does).
FRONTEND == "PythonCall" && include("autodiff_example.jl")

# test/cuda.jl uses PythonCall, so it runs in that front-end's process. CUDA.jl is a test
# dependency (Project.toml [extras]): the file always runs, and says so when it skips.
FRONTEND == "PythonCall" && include("cuda.jl")

# test/reactant.jl uses PythonCall too. Reactant is no test dependency (Reactant_jll is large):
# the file runs where the environment has Reactant, and a skip is recorded elsewhere.
if FRONTEND == "PythonCall"
    # fatou-ignore non-public-access: Base.find_package is what `using` asks, without loading the package
    if Base.find_package("Reactant") === nothing
        @testset "Reactant extension" begin
            @test_skip "Reactant is not in this environment: add it to run test/reactant.jl"
        end
    else
        include("reactant.jl")
    end
end
