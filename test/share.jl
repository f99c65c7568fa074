# Julia arrays handed to Python (`share`): plain arrays, views, permuted and read-only arrays,
# the exporter object, refusals, and the round trip of an imported view back to NumPy.
# Included by runtests.jl inside its "$FRONTEND with NumPy" testset.

@testset "share" begin
    before = RsDLPack.rooted_count()
    M = Float32.(reshape(0:5, 2, 3))
    n = share(M, fn("np_from_dlpack"))
    @test address(n) == UInt(pointer(M))
    @test jl(Vector{Int}, "shape", n) == [2, 3]
    @test expected(n, Float32) == M
    @test RsDLPack.rooted_count() == before + 1
    M[2, 3] = 7
    @test jl(ComplexF64, "getitem", n, (1, 2)) == 7
    n = nothing
    GC.gc(); py("collect"); GC.gc()
    flush_releases()
    @test RsDLPack.rooted_count() == before

    V = view(reshape(Float64.(1:24), 4, 6), 1:2:4, 6:-2:1)
    @test expected(share(V, fn("np_from_dlpack")), Float64) == V
    P = PermutedDimsArray(reshape(Int32.(1:24), 2, 3, 4), (3, 1, 2))
    @test expected(share(P, fn("np_from_dlpack")), Int32) == P
    r = share(M, fn("np_from_dlpack"); order=:reversed)
    @test jl(Vector{Int}, "shape", r) == [3, 2]
    ro = share(ReadOnlyArray(M), fn("np_from_dlpack"))
    @test !jl(Bool, "writeable", ro)
    exporter = share(M, PyT)
    @test jl(Vector{Int}, "dlpack_device", exporter) == [1, 0]
    err = try share(1:5, fn("np_from_dlpack")); nothing catch e; e end
    @test err isa DLPackError && err.kind == :buffer
    err = try share(["a"], fn("np_from_dlpack")); nothing catch e; e end
    @test err isa DLPackError && occursin("String", err.message)
    # A Python type without the DLPack C exchange API is refused by name, never called.
    rooted = RsDLPack.rooted_count()
    for (consumer, name) in ((py("plain_type"), "Consumer"), (make("np.ndarray"), "numpy.ndarray"))
        err = try share(M, consumer); nothing catch e; e end
        @test err isa DLPackError && err.kind == :buffer
        @test occursin("cannot share into the type", err.message) && occursin(name, err.message) &&
              occursin("torch.from_dlpack", err.message)
    end
    @test RsDLPack.rooted_count() <= rooted  # the refused shares' roots were dropped
end

@testset "round trip keeps the address" begin
    a = make("np.arange(12.0).reshape(3, 4)[:, ::2]")
    A = from_dlpack(a)
    n = share(A, fn("np_from_dlpack"))
    @test address(n) == address(a)
    @test expected(n, Float64) == expected(a, Float64)
end
