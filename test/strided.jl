# `from_dlpack(StridedView, t)` and `share` of a StridedView (ext/RsDLPackStridedViewsExt.jl):
# every layout zero-copy — broadcasts, negative, permuted, stepped, overlapping and non-nesting
# strides, empty and 0-d tensors — each element equal to the producer's at the same index.
# Included by runtests.jl inside its "$FRONTEND with NumPy" testset (the helpers `make`, `jl`,
# `address`, `expected` and `fn` are runtests.jl's). test/python/test_strided_plan.py holds the
# plan itself to every element, through the C entry point.

using StridedViews: StridedView

const STRIDED_LAYOUTS = [("broadcast (read-only)", "np.broadcast_to(np.arange(4.0), (3, 4))"),
                         ("broadcast column (read-only)", "np.broadcast_to(np.arange(3.0)[:, None], (3, 5))"),
                         ("negative", "np.arange(30.0).reshape(5, 6)[::-2, ::-1]"),
                         ("permuted", "np.arange(24.0).reshape(2, 3, 4).transpose(2, 0, 1)"),
                         ("stepped", "np.arange(120.0).reshape(6, 20)[::2, 1::3]"),
                         ("overlapping (read-only)", "np.lib.stride_tricks.sliding_window_view(np.arange(8.0), 3)"),
                         ("non-nesting", "np.lib.stride_tricks.as_strided(np.arange(20.0), shape=(2, 3), strides=(32, 24))"),
                         ("0-d", "np.array(3.5)")]

"The StridedView inside a result (a ReadOnlyArray of one for read-only memory)."
strided_of(S) = S isa ReadOnlyArray ? parent(S) : S

@testset "from_dlpack(StridedView, t): every layout zero-copy" begin
    for (name, expression) in STRIDED_LAYOUTS
        a = make(expression)
        S = from_dlpack(StridedView, a; readonly=true)
        V = strided_of(S)
        @test V isa StridedView{Float64}
        @test (S isa ReadOnlyArray) == !jl(Bool, "writeable", a)
        @test size(S) == Tuple(jl(Vector{Int}, "shape", a))
        @test S == expected(a, Float64)
        @test UInt(pointer(parent(V), V.offset + 1)) == address(a)  # the producer's first element
        @test strides(V) == Tuple(jl(Vector{Int}, "element_strides", a))
    end
    # Where the composed views copy (zero and overlapping strides), this one shares.
    b = make("np.broadcast_to(np.arange(4.0), (3, 4))")
    C = from_dlpack(b)
    @test C isa Matrix{Float64} && UInt(pointer(C)) != address(b)
    B = from_dlpack(StridedView, b; readonly=true)
    @test UInt(pointer(parent(parent(B)))) == address(b) && length(parent(parent(B))) == 4
end

@testset "writes reach the producer, and reversed order reverses the indices" begin
    a = make("np.arange(30.0).reshape(5, 6)[::-2, ::-1]")
    S = from_dlpack(StridedView, a)
    @test S isa StridedView{Float64,2} && strides(S) == (-12, -1)
    S[2, 3] = 42
    @test jl(ComplexF64, "getitem", a, (1, 2)) == 42
    R = from_dlpack(StridedView, a; order=:reversed)
    @test size(R) == (6, 3) && R[3, 2] == 42 && strides(R) == (-1, -12)
end

@testset "typed StridedView{T,N}" begin
    a = make("np.arange(24.0).reshape(2, 3, 4).transpose(2, 0, 1)")
    T = @inferred from_dlpack(StridedView{Float64,3}, a)
    @test T isa StridedView{Float64,3} && T == expected(a, Float64)
    err = try from_dlpack(StridedView{Float32,3}, a); nothing catch e; e end
    @test err isa DLPackError && err.kind == :buffer && occursin("not the requested Float32", err.message)
    err = try from_dlpack(StridedView{Float64,2}, a); nothing catch e; e end
    @test err isa DLPackError && occursin("not the requested 2", err.message)
    # Read-only memory: a typed StridedView has no read-only form, whatever readonly says.
    b = make("np.broadcast_to(np.arange(4.0), (3, 4))")
    err = try from_dlpack(StridedView{Float64,2}, b; readonly=true); nothing catch e; e end
    @test err isa DLPackError && err.kind == :buffer && occursin("no read-only form", err.message)
    err = try from_dlpack(StridedView, b); nothing catch e; e end
    @test err isa DLPackError && err.kind == :buffer && occursin("read-only", err.message)
    C = from_dlpack(StridedView{Float64,2}, b; copy=true)  # a copy is writable
    @test C isa StridedView{Float64,2} && C == expected(b, Float64) && UInt(pointer(parent(C))) != address(b)
end

@testset "empty and misaligned tensors" begin
    E = from_dlpack(StridedView, make("np.zeros((0, 3))"))
    @test E isa StridedView{Float64,2} && size(E) == (0, 3)
    m = py("misaligned", 2, 3)
    M = from_dlpack(StridedView, m)  # a copy: Julia's arrays are aligned
    @test M == expected(m, Float64) && UInt(pointer(parent(M))) != address(m)
    err = try from_dlpack(StridedView, m; copy=false); nothing catch e; e end
    @test err isa DLPackError && err.kind == :buffer && occursin("misaligned", err.message)
end

@testset "a StridedView's memory is released with it, and by unsafe_free!" begin
    a = make("np.arange(12.0).reshape(3, 4)[:, ::-2]")
    before = refcount(a)
    S = from_dlpack(StridedView, a)
    @test refcount(a) > before
    RsDLPack.unsafe_free!(S)
    @test refcount(a) == before
    S = from_dlpack(StridedView, a)
    S = nothing
    GC.gc(); GC.gc()
    flush_releases()
    @test refcount(a) == before
end

@testset "share a StridedView without copying" begin
    for expression in ("np.arange(30.0).reshape(5, 6)[::-2, ::-1]",
                       "np.lib.stride_tricks.as_strided(np.arange(20.0), shape=(2, 3), strides=(32, 24))")
        a = make(expression)
        S = from_dlpack(StridedView, a)
        n = share(S, fn("np_from_dlpack"))
        @test address(n) == address(a) && expected(n, Float64) == expected(a, Float64)
        @test jl(Vector{Int}, "element_strides", n) == jl(Vector{Int}, "element_strides", a) == collect(strides(S))
    end
    # A broadcast, read-only: exported read-only, zero strides kept.
    b = make("np.broadcast_to(np.arange(4.0), (3, 4))")
    B = from_dlpack(StridedView, b; readonly=true)
    n = share(B, fn("np_from_dlpack"))
    @test address(n) == address(b) && !jl(Bool, "writeable", n) && expected(n, Float64) == expected(b, Float64)
    # Julia's own memory, any strides.
    V = StridedView(collect(1.0:12.0), (3, 2), (-1, 4), 2)
    n = share(V, fn("np_from_dlpack"))
    @test expected(n, Float64) == V && address(n) == UInt(pointer(parent(V), 3))
    # An op other than identity would be shared as the plain data: refused.
    Z = StridedView(ComplexF64.(1:4) .* im)
    err = try share(conj(Z), fn("np_from_dlpack")); nothing catch e; e end
    @test err isa DLPackError && err.kind == :buffer && occursin("op is conj", err.message)
    @test expected(share(copy(conj(Z)), fn("np_from_dlpack")), ComplexF64) == conj.(Z)
end

if jl(Bool, "has", "torch")
    @testset "$FRONTEND: StridedView from torch (expand, permute, as_strided)" begin
        for expression in ("torch.arange(4.0, dtype=torch.float64).expand(3, 4)",
                           "torch.arange(24.0, dtype=torch.float64).reshape(2, 3, 4).permute(2, 0, 1)",
                           "torch.as_strided(torch.arange(10.0, dtype=torch.float64), (3, 4), (1, 2))")
            t = make(expression)
            S = from_dlpack(StridedView, t)
            @test S isa StridedView{Float64} && S == expected(t, Float64)
            @test UInt(pointer(parent(S), S.offset + 1)) == address(t)
        end
    end
end
