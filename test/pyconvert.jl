# PythonCall's `pyconvert` through RsDLPack's rules (ext/pyconvert_rules.toml, whose names and
# order test/python/test_pyconvert_rules.py checks against the libraries and PythonCall), and
# PythonCall's wrapper types (what juliacall passes a Julia function) as from_dlpack's and
# share's Python objects. Included by runtests.jl in its PythonCall process.
module PyconvertRules

using Test: @test, @testset, @test_throws
using RsDLPack: RsDLPack, from_dlpack, share, DLPackError
using PythonCall: PyArray, PyIterable, PyList, pyimport, pyconvert, pylist

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
    @test_throws ArgumentError from_dlpack(rand(3))
    @test_throws ArgumentError share(M, sum)
    @test RsDLPack.pyconvert_rules_enabled()  # the default; the preference turns it off
end

torch = optional("torch")
if torch !== nothing
    @testset "pyconvert takes torch tensors through DLPack" begin
        t = torch.arange(6.0, dtype=torch.float64).reshape(2, 3)
        address = pyconvert(UInt, t.data_ptr())
        for A in (pyconvert(AbstractArray, t), pyconvert(Any, t), pyconvert(AbstractMatrix{Float64}, t))
            @test !(A isa PyArray) && A == [0 1 2; 3 4 5] && UInt(pointer(A)) == address
        end
        C = pyconvert(Array, t.T)  # column-major and writable: the tensor's memory itself
        @test C isa Matrix{Float64} && C == [0 3; 1 4; 2 5] && UInt(pointer(C)) == address
        C[1, 1] = 7
        @test pyconvert(Float64, t[0, 0].item()) == 7
        V = pyconvert(Vector{Float64}, t[0])  # a row of a row-major tensor is dense
        @test V isa Vector{Float64} && UInt(pointer(V)) == address
        F = pyconvert(Matrix{Float32}, t)                         # converted, as PyArrays are
        @test F isa Matrix{Float32} && F == Float32[7 1 2; 3 4 5]
        @test pyconvert(Array{Float64,3}, t, nothing) === nothing  # another rank: not converted
        @test pyconvert(PyArray, t) isa PyArray                   # PythonCall's view, on request
        p = torch.nn.Parameter(torch.zeros(2))
        @test_throws DLPackError pyconvert(AbstractArray, p)      # requires grad: torch refuses
        b = pyconvert(AbstractArray, torch.zeros(2, dtype=torch.bfloat16))
        @test nameof(eltype(b)) == :BFloat16 && length(b) == 2
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
