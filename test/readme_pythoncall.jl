# The README's PythonCall examples, line for line (test/python/test_readme.py fails when a
# README line is not found verbatim in the test files), each followed by what it claims.
# Included by runtests.jl in its PythonCall process, after NumPy was found importable.
module ReadmePythonCall

using Test: @test, @testset, @test_skip
using RsDLPack
using PythonCall: Py, pyimport
using PythonCall: pyconvert, pybuiltins, pyhasattr, PyArray
using PythonCall: pywith
using StridedViews: StridedView
np = pyimport("numpy")

"Whether torch imports here (the examples that use it run only then)."
function has_torch()
    try
        pyimport("torch")
        return true
    catch
        return false
    end
end

address(x) = pyconvert(UInt, x.ctypes.data)

@testset "README examples (PythonCall)" begin
    a = np.arange(12.0).reshape(3, 4)
    A = from_dlpack(a)
    @test size(A) == (3, 4) && A[2, 3] == 6 && UInt(pointer(A)) == address(a)
    A[1, 2] = 42
    @test pyconvert(Float64, a[0, 1]) == 42
    R = from_dlpack(a; order=:reversed)
    @test R isa Matrix{Float64} && size(R) == (4, 3) && R[2, 1] == 42
    F = from_dlpack(Matrix{Float64}, a; order=:reversed)
    @test F isa Matrix{Float64} && UInt(pointer(F)) == address(a)
    C = from_dlpack(np.broadcast_to(np.arange(4.0), (3, 4)))
    @test C isa Matrix{Float64} && C[3, :] == [0.0, 1.0, 2.0, 3.0]
    RsDLPack.unsafe_free!(A)

    M = rand(Float32, 2, 3)
    n = share(M, np.from_dlpack)
    @test address(n) == UInt(pointer(M)) && pyconvert(Float32, n[1, 2]) == M[2, 3]
    v = share(view(M, :, 3:-1:1), np.from_dlpack)
    @test pyconvert(Float32, v[0, 0]) == M[1, 3]
    e = share(M, Py)
    @test e isa Py && hasproperty(e, "__dlpack__")

    r = np.arange(4.0)
    r.flags.writeable = false
    RO = from_dlpack(r; readonly=true)
    @test RO isa ReadOnlyArray && RO == [0.0, 1.0, 2.0, 3.0]
    back = share(RO, np.from_dlpack)
    @test !pyconvert(Bool, back.flags.writeable)

    b = np.broadcast_to(np.arange(4.0), (3, 4))
    err = try from_dlpack(b; copy=false); nothing catch e; e end
    @test err isa DLPackError && err.kind == :buffer && occursin("zero stride", err.message)

    S = from_dlpack(StridedView, b; readonly=true)
    @test S isa ReadOnlyArray && parent(S) isa StridedView{Float64,2} && S == repeat([0.0 1 2 3], 3)
    @test length(parent(parent(S))) == 4 && UInt(pointer(parent(parent(S)))) == address(b)
    W = from_dlpack(StridedView, np.flip(np.arange(12.0).reshape(3, 4)))
    @test W isa StridedView{Float64,2} && size(W) == (3, 4) && W[1, 1] == 11 && strides(W) == (-4, -1)
    T = from_dlpack(StridedView{Float64,2}, np.arange(6.0).reshape(2, 3).T)
    @test T isa StridedView{Float64,2} && T == [0 3; 1 4; 2 5]
    w = share(W, np.from_dlpack)
    @test pyconvert(Float64, w[0, 0]) == 11 && pyconvert(Vector{Int}, pybuiltins.list(w.strides)) == [-32, -8]

    if has_torch()
        torch = pyimport("torch")
        t = share(M, torch.from_dlpack)
        @test pyconvert(UInt, t.data_ptr()) == UInt(pointer(M))
        if pyhasattr(torch.Tensor, "__dlpack_c_exchange_api__")
            t = share(M, torch.Tensor)
            @test pyconvert(Bool, pybuiltins.isinstance(t, torch.Tensor))
            @test pyconvert(UInt, t.data_ptr()) == UInt(pointer(M))
            @test pyconvert(Vector{Int}, pybuiltins.list(t.stride())) == [1, 2]
        else
            @test_skip "share(M, torch.Tensor): this torch has no torch.Tensor.__dlpack_c_exchange_api__"
        end
        T = from_dlpack(torch.arange(6).reshape(2, 3))
        @test size(T) == (2, 3) && T[2, 1] == 3

        t = torch.arange(6.0, dtype=torch.float64).reshape(2, 3)
        P = pyconvert(AbstractArray, t)        # 2×3 view of torch's memory, no __array__ call
        @test !(P isa PyArray) && size(P) == (2, 3) && P[2, 1] == 3
        @test UInt(pointer(P)) == pyconvert(UInt, t.data_ptr())
        D = pyconvert(Matrix{Float64}, t)      # a Matrix{Float64}: a copy, as t is row-major
        @test D isa Matrix{Float64} && D == [0 1 2; 3 4 5] && UInt(pointer(D)) != pyconvert(UInt, t.data_ptr())

        scaled(A) = share(2 .* A, torch.from_dlpack)   # A: what juliacall made of the tensor
        S = scaled(pyconvert(Any, t))                  # as juliacall calls it: S is a torch tensor
        @test pyconvert(Bool, torch.equal(S, t.mul(2))) && pyconvert(Bool, pybuiltins.isinstance(S, torch.Tensor))

        # "Run a PyTorch model on Julia arrays"
        model = torch.nn.Linear(4, 2)                     # any torch.nn.Module that takes (batch, 4)
        X = rand(Float32, 4, 16)                          # 16 samples of 4 features, as Julia stores them
        Y = pywith(torch.no_grad()) do _
            x = share(X, torch.from_dlpack; order=:reversed)          # torch sees (16, 4), X's memory
            @test pyconvert(Tuple{Int,Int}, x.shape) == (16, 4) && pyconvert(UInt, x.data_ptr()) == UInt(pointer(X))
            from_dlpack(Matrix{Float32}, model(x); order=:reversed)   # 2×16, the output's memory
        end
        weight = pyconvert(Matrix{Float32}, model.weight.detach().numpy())
        bias = pyconvert(Vector{Float32}, model.bias.detach().numpy())
        @test Y isa Matrix{Float32} && size(Y) == (2, 16) && Y ≈ weight * X .+ bias
        # Outside no_grad the output requires grad, which torch's __dlpack__ refuses; detach() exports.
        err = try from_dlpack(model.weight); nothing catch e; e end
        @test err isa DLPackError
        @test from_dlpack(model.weight.detach()) == weight
    end
    N = from_dlpack(pyconvert(Any, a))             # a PyArray (NumPy's array) as from_dlpack's input
    @test pyconvert(Any, a) isa PyArray && size(N) == (3, 4) && UInt(pointer(N)) == address(a)
end

end # module ReadmePythonCall
