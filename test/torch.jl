# PyTorch, when installed: an import and a share through torch's from_dlpack. Included by
# runtests.jl in each front-end's process.

if jl(Bool, "has", "torch")
    @testset "$FRONTEND with PyTorch" begin
        t = make("torch.arange(6).reshape(2, 3)")
        T = from_dlpack(t)
        @test size(T) == (2, 3) && T[2, 1] == 3 && UInt(pointer(T)) == address(t)
        M = Float32.(reshape(1:6, 2, 3))
        u = share(M, fn("torch_from_dlpack"))
        @test address(u) == UInt(pointer(M)) && expected(u, Float32) == M
        # Into the type itself: torch's C exchange API makes the tensor.
        tensor_type = py("torch_tensor_type")
        w = share(M, tensor_type)
        @test address(w) == UInt(pointer(M)) && expected(w, Float32) == M
        rooted = RsDLPack.rooted_count()
        w = nothing
        py("collect_garbage")
        flush_releases()
        @test RsDLPack.rooted_count() < rooted
        err = try share(ReadOnlyArray(M), tensor_type); nothing catch e; e end
        @test err isa DLPackError && err.kind == :buffer && occursin("read-only", err.message)
    end
end
