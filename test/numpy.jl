# Imports from NumPy: every dtype, every layout, empty arrays and copies, the typed forms,
# read-only tensors, capsules and objects that are not DLPack. Included by runtests.jl inside
# its "$FRONTEND with NumPy" testset, in each front-end's process (the helpers `make`, `jl`,
# `address`, `expected` and `fn` are runtests.jl's).

const DTYPES = [("bool", Bool), ("int8", Int8), ("int16", Int16), ("int32", Int32),
                ("int64", Int64), ("uint8", UInt8), ("uint16", UInt16), ("uint32", UInt32),
                ("uint64", UInt64), ("float16", Float16), ("float32", Float32),
                ("float64", Float64), ("complex64", ComplexF32), ("complex128", ComplexF64)]

const LAYOUTS = [("0-d", "np.array(3.5)"),
                 ("C order", "np.arange(24.0).reshape(2, 3, 4)"),
                 ("F order", "np.asfortranarray(np.arange(24.0).reshape(2, 3, 4))"),
                 ("transposed", "np.arange(24.0).reshape(2, 3, 4).transpose(2, 0, 1)"),
                 ("stepped", "np.arange(120.0).reshape(6, 20)[::2, 1::3]"),
                 ("reversed", "np.arange(10.0)[::-1]"),
                 ("reversed 2-d", "np.arange(30.0).reshape(5, 6)[::-2, ::-1]"),
                 ("size-1 dims", "np.arange(6.0).reshape(1, 2, 1, 3, 1)"),
                 ("offset slice", "np.arange(100.0)[7:]"),
                 ("sliced cube", "np.arange(216.0).reshape(6, 6, 6)[:, ::4, ::4]"),
                 ("ndim 32", "np.arange(4.0).reshape((2, 2) + (1,) * 30)")]

@testset "every dtype arrives zero-copy" begin
    for (name, T) in DTYPES
        a = make("np.arange(12).reshape(3, 4).astype('$name')")
        A = from_dlpack(a)
        @test eltype(A) === T
        @test size(A) == (3, 4)
        @test UInt(pointer(A)) == address(a)
        @test A == expected(a, T)
    end
end

@testset "every layout is a view with the producer's indices" begin
    for (name, expression) in LAYOUTS
        a = make(expression)
        A = from_dlpack(a)
        @test size(A) == Tuple(jl(Vector{Int}, "shape", a))
        @test A == expected(a, Float64)
        @test UInt(pointer(A)) == address(a)
    end
    a = make("np.arange(6.0).reshape(2, 3)")
    R = from_dlpack(a; order=:reversed)
    @test R isa Matrix{Float64} && size(R) == (3, 2) && R[3, 1] == 2.0
    A = from_dlpack(a)
    A[1, 3] = 42.0
    @test jl(ComplexF64, "getitem", a, (0, 2)) == 42.0  # the same memory
end

@testset "empty arrays and copies" begin
    E = from_dlpack(make("np.zeros((0, 3), dtype=np.float32)"))
    @test E isa Matrix{Float32} && size(E) == (0, 3)
    b = make("np.broadcast_to(np.arange(4.0), (3, 4))")
    err = try from_dlpack(b; copy=false); nothing catch e; e end
    @test err isa DLPackError && err.kind == :buffer && occursin("zero stride", err.message)
    B = from_dlpack(b)
    @test B isa Matrix{Float64} && B == expected(b, Float64)
    a = make("np.arange(6.0)")
    C = from_dlpack(a; copy=true)
    @test C == expected(a, Float64) && UInt(pointer(C)) != address(a)
    @test_throws ArgumentError RsDLPack.unsafe_free!(C)
end

@testset "typed forms have one concrete result type" begin
    a = make("np.arange(12, dtype=np.float32).reshape(3, 4)")
    R = @inferred from_dlpack(Array{Float32,2}, a; order=:reversed)
    @test R isa Matrix{Float32} && size(R) == (4, 3) && UInt(pointer(R)) == address(a)
    @test permutedims(R) == expected(a, Float32)
    P = @inferred from_dlpack(Array{Float32,2}, a)  # row-major in the producer's order: a copy
    @test P == expected(a, Float32) && UInt(pointer(P)) != address(a)
    f = make("np.asfortranarray(np.arange(24.0).reshape(2, 3, 4))")
    F = @inferred from_dlpack(Array{Float64,3}, f)
    @test F == expected(f, Float64) && UInt(pointer(F)) == address(f)
    s = make("np.arange(20.0)[::2]")
    S = @inferred from_dlpack(Vector{Float64}, s)  # stepped: a copy, still a Vector
    @test S == expected(s, Float64)
    E = @inferred from_dlpack(Array{Float32,2}, make("np.zeros((0, 3), dtype=np.float32)"))
    @test size(E) == (0, 3)
    err = try from_dlpack(Array{Float64,2}, a); nothing catch e; e end
    @test err isa DLPackError && err.kind == :buffer && occursin("Float32, not the requested Float64", err.message)
    err = try from_dlpack(Array{Float32,3}, a); nothing catch e; e end
    @test err isa DLPackError && occursin("2 dimensions, not the requested 3", err.message)
    err = try from_dlpack(Array{Float32,2}, a; copy=false); nothing catch e; e end
    @test err isa DLPackError && err.kind == :buffer && occursin("dense array", err.message)
    # readonly=true accepts read-only memory; a writable tensor is viewed as ever.
    W = @inferred from_dlpack(Array{Float32,2}, a; order=:reversed, readonly=true)
    @test W isa Matrix{Float32} && UInt(pointer(W)) == address(a)
    ro = py("read_only", make("np.arange(4.0)"))
    RO = @inferred from_dlpack(ReadOnlyArray{Float64,1}, ro)
    @test RO isa ReadOnlyArray{Float64,1,Vector{Float64}} && RO == [0.0, 1.0, 2.0, 3.0]
    @test UInt(pointer(parent(RO))) == address(ro)
    # A type with no read-only form refuses read-only memory, readonly=true or not (the core
    # decides: the plan says the result must be writable), unless copied.
    for readonly in (false, true)
        err = try from_dlpack(Array{Float64,1}, ro; readonly); nothing catch e; e end
        @test err isa DLPackError && err.kind == :buffer && occursin("no read-only form", err.message)
        err = try from_dlpack(Vector, ro; readonly); nothing catch e; e end
        @test err isa DLPackError && err.kind == :buffer && occursin("no read-only form", err.message)
    end
    C = from_dlpack(Array{Float64,1}, ro; readonly=true, copy=true)
    @test C isa Vector{Float64} && C == [0.0, 1.0, 2.0, 3.0] && UInt(pointer(C)) != address(ro)
end

@testset "rank-only and element-only forms are plain Arrays" begin
    a = make("np.arange(12, dtype=np.float32).reshape(3, 4)")
    # Row-major in the producer's order: a PermutedDimsArray untyped, a Matrix (copied) here.
    @test from_dlpack(Array, a) isa PermutedDimsArray
    M = from_dlpack(Matrix, a)
    @test M isa Matrix{Float32} && M == expected(a, Float32) && UInt(pointer(M)) != address(a)
    R = from_dlpack(Matrix, a; order=:reversed)
    @test R isa Matrix{Float32} && UInt(pointer(R)) == address(a)
    s = make("np.arange(20.0)[::2]")
    V = from_dlpack(Vector, s)
    @test V isa Vector{Float64} && V == expected(s, Float64)
    F = from_dlpack(Array{Float32}, a)
    @test F isa Matrix{Float32} && F == expected(a, Float32)
    err = try from_dlpack(Vector, a); nothing catch e; e end
    @test err isa DLPackError && occursin("2 dimensions, not the requested 1", err.message)
    err = try from_dlpack(Matrix, a; copy=false); nothing catch e; e end
    @test err isa DLPackError && err.kind == :buffer && occursin("dense array", err.message)
end

@testset "read-only tensors" begin
    a = py("read_only", make("np.arange(4.0)"))
    err = try from_dlpack(a); nothing catch e; e end
    @test err isa DLPackError && err.kind == :buffer && occursin("read-only", err.message)
    R = from_dlpack(a; readonly=true)
    @test R isa ReadOnlyArray && R == [0.0, 1.0, 2.0, 3.0]
    err = try (R[1] = 1.0); nothing catch e; e end
    @test err !== nothing && occursin("setindex!", sprint(showerror, err)) && R[1] == 0.0
    # A ReadOnlyArray target is wrapped once, however readonly is given, and shares back.
    for W in (from_dlpack(ReadOnlyArray, a; readonly=true), from_dlpack(ReadOnlyArray, a))
        @test W isa ReadOnlyArray{Float64,1,Vector{Float64}} && UInt(pointer(parent(W))) == address(a)
        back = share(W, fn("np_from_dlpack"))
        @test address(back) == address(a) && !jl(Bool, "writeable", back)
    end
    C = from_dlpack(a; copy=true)
    C[1] = 5.0
    @test C[1] == 5.0
end

@testset "capsules and non-DLPack objects" begin
    a = make("np.arange(3.0)")
    c = py("capsule", a)
    @test from_dlpack(c) == [0.0, 1.0, 2.0]
    err = try from_dlpack(c); nothing catch e; e end
    @test err isa DLPackError && err.kind == :invalid && occursin("already consumed", err.message)
    err = try from_dlpack(make("[1, 2, 3]")); nothing catch e; e end
    @test err isa DLPackError && err.kind == :not_dlpack && occursin("list", err.message)
end
