# PythonCall's `pyconvert` through RsDLPack's rules (ext/pyconvert_rules.toml, whose names and
# order test/python/test_pyconvert_rules.py checks against the libraries and PythonCall), by
# PythonCall's protocol (a rule converts or declines; what it declines converts as without
# RsDLPack), `from_dlpack` of what juliacall made of a tensor, and
# PythonCall's wrapper types (what juliacall passes a Julia function) as from_dlpack's and
# share's Python objects. Included by runtests.jl in its PythonCall process.
module PyconvertRules

using Test: @test, @testset, @test_throws, @test_skip
using RsDLPack: RsDLPack, from_dlpack, share, DLPackError, ReadOnlyArray
using StridedViews: StridedView
using PythonCall: Py, PyArray, PyIterable, PyList, pyimport, pyconvert, pylist, pybuiltins, pydict, pyhasattr

np = pyimport("numpy")

"The module, or `nothing` where this Python cannot import it."
function optional(name)
    try
        return pyimport(name)
    catch
        return nothing
    end
end

@testset "PythonCall keeps its NumPy results" begin
    a = np.arange(6.0).reshape(2, 3)
    @test pyconvert(AbstractArray, a) isa PyArray
    @test pyconvert(Any, a) isa PyArray
    A = pyconvert(Array, a)
    @test A isa Matrix{Float64} && A == [0 1 2; 3 4 5]
end

@testset "from_dlpack and share take PythonCall's wrappers" begin
    a = np.arange(6.0).reshape(2, 3)
    W = pyconvert(Any, a)
    @test W isa PyArray
    A = from_dlpack(W)
    @test A == [0 1 2; 3 4 5] && UInt(pointer(A)) == pyconvert(UInt, a.ctypes.data)
    @test from_dlpack(Matrix{Float64}, W) == A
    M = rand(Float32, 2, 3)
    n = share(M, PyIterable(np.from_dlpack))  # any wrapper stands for the object it wraps
    @test pyconvert(UInt, n.ctypes.data) == UInt(pointer(M))
    err = try from_dlpack(PyList(pylist([1, 2]))); nothing catch e; e end
    @test err isa DLPackError && err.kind == :not_dlpack
    v = rand(3)
    @test from_dlpack(v) === v  # a Julia array stands for the tensor it was made of (juliacall)
    @test_throws ArgumentError from_dlpack(1.0)
    @test_throws ArgumentError share(M, sum)
    @test RsDLPack.pyconvert_rules_enabled()  # the default; the preference turns it off
end

const CONVERSION_TARGETS = (Any, AbstractArray, Array)

"""
`nameof(typeof(pyconvert(T, x, nothing)))` for each target `T` of `CONVERSION_TARGETS` and each
Python expression (evaluated with `torch` and `numpy` imported), one vector per target, in
another Julia process: one that never loads RsDLPack (`rules=:absent`: PythonCall's own
answers), or one that loads it with its `pyconvert_rules` preference off (`rules=:off`, set in
a project stacked under this one on the load path, as a user's would be). Its first line says
whether the rules were on.
"""
function pythoncall_results(expressions; rules::Symbol)
    load = rules === :off ? "using RsDLPack; println(RsDLPack.pyconvert_rules_enabled())" : "println(false)"
    script = """
    using PythonCall: pyconvert, pyimport, pybuiltins, pydict
    $load
    g = pydict(); g["torch"] = pyimport("torch"); g["numpy"] = pyimport("numpy")
    for T in $(CONVERSION_TARGETS), e in $(repr(expressions))
        println(nameof(typeof(pyconvert(T, pybuiltins.eval(e, g), nothing))))
    end
    """
    # fatou-ignore non-public-access: Base.julia_cmd is the documented way to start this same Julia
    cmd = `$(Base.julia_cmd()) --project=$(Base.active_project()) -e $script`
    lines = mktempdir() do stacked
        # RsDLPack's preferences, in an environment that names it (Base.get_preferences reads
        # every project of the load path that has it as a dependency).
        write(joinpath(stacked, "Project.toml"),
              "[deps]\nRsDLPack = \"$(Base.PkgId(RsDLPack).uuid)\"\n\n[preferences.RsDLPack]\npyconvert_rules = false\n")
        path = join(["@", stacked, "@stdlib"], Sys.iswindows() ? ';' : ':')
        return split(readchomp(addenv(cmd, "JULIA_LOAD_PATH" => path)), '\n')
    end
    @test lines[1] == "false"  # the rules were off there
    n = length(expressions)
    return [Symbol.(lines[1 .+ (k - 1) * n .+ (1:n)]) for k in eachindex(CONVERSION_TARGETS)]
end

torch = optional("torch")
if torch !== nothing
    @testset "pyconvert takes torch tensors through DLPack" begin
        t = torch.arange(6.0, dtype=torch.float64).reshape(2, 3)
        address = pyconvert(UInt, t.data_ptr())
        for A in (pyconvert(AbstractArray, t), pyconvert(Any, t), pyconvert(AbstractMatrix{Float64}, t))
            @test !(A isa PyArray) && A == [0 1 2; 3 4 5] && UInt(pointer(A)) == address
        end
        # pyconvert(Array…): always a fresh Array, as PythonCall's Array rule always copies,
        # whatever the layout (column-major and writable included).
        C = pyconvert(Array, t.T)
        @test C isa Matrix{Float64} && C == [0 3; 1 4; 2 5] && UInt(pointer(C)) != address
        C[1, 1] = 7
        @test pyconvert(Float64, t[0, 0].item()) == 0
        R = pyconvert(Array, t)                                   # row-major: the copy engine transposes
        @test R isa Matrix{Float64} && R == [0 1 2; 3 4 5]
        V = pyconvert(Vector{Float64}, t[0])
        @test V isa Vector{Float64} && V == [0, 1, 2] && UInt(pointer(V)) != address
        F = pyconvert(Matrix{Float32}, t)                         # converted, as PyArrays are
        @test F isa Matrix{Float32} && F == Float32[0 1 2; 3 4 5]
        @test pyconvert(Array{Float64,3}, t, nothing) === nothing  # another rank: not converted
        @test pyconvert(PyArray, t) isa PyArray                   # PythonCall's view, on request
        b = pyconvert(AbstractArray, torch.zeros(2, dtype=torch.bfloat16))
        @test nameof(eltype(b)) == :BFloat16 && length(b) == 2
    end

    @testset "what the rules decline stays PythonCall's" begin
        # The objects the bridge declines (test/python/test_decline.py: the same, through the C
        # ABI): tensors whose export torch refuses, classes, a plain object. Converted as
        # juliacall converts arguments (`Any`), as `AbstractArray` and as `Array`, they give
        # what PythonCall gives without RsDLPack and with its rules off, and never throw.
        declined = ["torch.nn.Parameter(torch.zeros(2))", "torch.ones(2, requires_grad=True)",
                    "torch.ones(2, requires_grad=True) * 2", "torch.tensor([1 + 2j]).conj()",
                    "torch.tensor([1 + 2j]).conj().imag", "torch.zeros(2, 2).to_sparse()", "torch.Tensor",
                    "torch.nn.Parameter", "numpy.ndarray", "object()"]
        g = pydict(); g["torch"] = torch; g["numpy"] = np
        objects = [pybuiltins.eval(e, g) for e in declined]
        here = [[nameof(typeof(pyconvert(T, x, nothing))) for x in objects] for T in CONVERSION_TARGETS]
        @test RsDLPack.pyconvert_rules_enabled()
        @test here == pythoncall_results(declined; rules=:absent)
        @test here == pythoncall_results(declined; rules=:off)
        # from_dlpack still says why, and what to do.
        err = try from_dlpack(objects[1]); nothing catch e; e end
        @test err isa DLPackError && err.kind == :buffer && occursin("requires grad", err.message) &&
              occursin(".detach()", err.message)
        err = try from_dlpack(objects[7]); nothing catch e; e end
        @test err isa DLPackError && err.kind == :not_dlpack && occursin("torch.Tensor is a class", err.message)
        # A class passed from Python (`jl.RsDLPack.share(M, torch.Tensor)`) reaches share as
        # PythonCall's object for it, and share makes that type's object.
        M = rand(Float32, 2, 3)
        s = share(M, pyconvert(Any, torch.Tensor))
        @test pyconvert(Bool, pybuiltins.isinstance(s, torch.Tensor)) && pyconvert(UInt, s.data_ptr()) == UInt(pointer(M))
    end

    @testset "from_dlpack takes what juliacall made of a tensor" begin
        t = torch.arange(6.0, dtype=torch.float64).reshape(2, 3)
        A = pyconvert(Any, t)                     # what a Julia function receives from juliacall
        @test A isa PermutedDimsArray
        @test from_dlpack(A) === A && from_dlpack(Array, A) === A && from_dlpack(AbstractArray, A) === A
        M = from_dlpack(Matrix{Float64}, A)       # the typed rules: exactly a Matrix{Float64}
        @test M isa Matrix{Float64} && M == [0 1 2; 3 4 5]
        err = try from_dlpack(Matrix{Float32}, A); nothing catch e; e end
        @test err isa DLPackError && occursin("not the requested Float32", err.message)
        err = try from_dlpack(Matrix{Float64}, A; copy=false); nothing catch e; e end
        @test err isa DLPackError && err.kind == :buffer
        @test from_dlpack(A; copy=true) == A && from_dlpack(A; copy=true) !== A
        @test_throws ArgumentError from_dlpack(A; order=:reversed)
        @test from_dlpack(ReadOnlyArray, A) isa ReadOnlyArray
        # NumPy's arguments arrive as PyArrays and keep going to their array.
        a = np.arange(6.0).reshape(2, 3)
        f(x) = from_dlpack(x)
        @test f(pyconvert(Any, a)) == f(A) == [0 1 2; 3 4 5]
        dlpack = pyimport("torch.utils.dlpack")
        if pyhasattr(dlpack, "ReadOnlyTensorWrapper")
            R = pyconvert(Any, dlpack.ReadOnlyTensorWrapper(torch.arange(3.0)))
            @test R isa ReadOnlyArray
            err = try from_dlpack(R); nothing catch e; e end
            @test err isa DLPackError && err.kind == :buffer && occursin("readonly=true", err.message)
            @test from_dlpack(R; readonly=true) === R
            @test from_dlpack(Vector{Float32}, R; copy=true) isa Vector{Float32}
        else
            @test_skip "this torch has no torch.utils.dlpack.ReadOnlyTensorWrapper"
        end
    end
end

if torch !== nothing
    @testset "pyconvert(StridedView, x): a StridedView, a copy of read-only memory" begin
        t = torch.arange(12.0, dtype=torch.float32).reshape(3, 4).T  # permuted: any strides are a view
        W = pyconvert(StridedView, t)
        @test W isa StridedView{Float32,2} && W == Float32[0 4 8; 1 5 9; 2 6 10; 3 7 11]
        @test UInt(pointer(parent(W))) == pyconvert(UInt, t.data_ptr())
        @test pyconvert(StridedView{Float32,2}, t) isa StridedView{Float32,2}
        dlpack = pyimport("torch.utils.dlpack")
        if pyhasattr(dlpack, "ReadOnlyTensorWrapper")
            base = torch.arange(4.0, dtype=torch.float32)
            R = pyconvert(StridedView, dlpack.ReadOnlyTensorWrapper(base))  # none is read-only: a copy
            @test R isa StridedView{Float32,1} && R == Float32[0, 1, 2, 3]
            @test UInt(pointer(parent(R))) != pyconvert(UInt, base.data_ptr())
        else
            @test_skip "this torch has no torch.utils.dlpack.ReadOnlyTensorWrapper"
        end
    end
end

jnp = optional("jax.numpy")
if jnp !== nothing
    @testset "pyconvert takes JAX arrays through DLPack" begin
        x = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3)
        A = pyconvert(AbstractArray, x)
        @test !(A isa PyArray) && A == Float32[0 1 2; 3 4 5]
        B = pyconvert(Matrix{Float32}, x)
        @test B isa Matrix{Float32} && B == A
    end
end

end # module PyconvertRules
