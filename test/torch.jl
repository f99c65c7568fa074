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
        # Into the type itself: torch's C exchange API makes the tensor (a torch without
        # torch.Tensor.__dlpack_c_exchange_api__ is refused by name, and these skip).
        tensor_type = py("torch_tensor_type")
        if jl(Bool, "has_exchange_api", tensor_type)
            w = share(M, tensor_type)
            @test address(w) == UInt(pointer(M)) && expected(w, Float32) == M
            rooted = RsDLPack.rooted_count()
            w = nothing
            GC.gc()  # the front-end's wrapper held the tensor: its finalizer lets go of it
            py("collect_garbage")
            flush_releases()
            @test RsDLPack.rooted_count() < rooted
            err = try share(ReadOnlyArray(M), tensor_type); nothing catch e; e end
            @test err isa DLPackError && err.kind == :buffer && occursin("read-only", err.message)
        else
            @test_skip "share(M, torch.Tensor): this torch has no torch.Tensor.__dlpack_c_exchange_api__"
        end
        # A read-only tensor: a typed target has no read-only form, whatever readonly says.
        r = py("torch_read_only", make("np.arange(4.0)"))
        if jl(Bool, "is_none", r)
            @test_skip "this torch has no torch.utils.dlpack.ReadOnlyTensorWrapper"
        else
            err = try from_dlpack(Array{Float64,1}, r; readonly=true); nothing catch e; e end
            @test err isa DLPackError && err.kind == :buffer && occursin("no read-only form", err.message)
            R = from_dlpack(r; readonly=true)
            @test R isa ReadOnlyArray && R == [0.0, 1.0, 2.0, 3.0]
        end
    end
end
