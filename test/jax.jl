# JAX, when installed: a float32 import, bfloat16, fp8 as DLPackRaw bytes both ways, and a
# share to jax.dlpack. Included by runtests.jl in each front-end's process.

if jl(Bool, "has", "jax")
    @testset "$FRONTEND with JAX" begin
        x = make("jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4)")
        X = from_dlpack(x)
        @test size(X) == (3, 4) && UInt(pointer(X)) == address(x)
        @test X == expected(x, Float32)
        b = from_dlpack(make("jnp.arange(4, dtype=jnp.bfloat16)"))
        @test eltype(b) === RsDLPack.BFLOAT16
        @test reinterpret(UInt16, collect(b))[2] == 0x3f80  # bfloat16(1.0)
        # fp8 has no Julia type: it arrives as DLPackRaw bytes and leaves as fp8 again.
        f8 = make("jnp.asarray([0.5, 1.0, -2.0, 448.0], dtype=jnp.float8_e4m3fn)")
        F8 = from_dlpack(f8)
        @test F8 isa Vector{DLPackRaw{10,8}} && UInt(pointer(F8)) == address(f8)
        @test reinterpret(UInt8, F8) == jl(Vector{UInt8}, "raw_bytes", f8)
        back = share(F8, fn("jax_from_dlpack"))
        @test jl(String, "dtype_name", back) == "float8_e4m3fn"
        @test jl(Vector{UInt8}, "raw_bytes", back) == reinterpret(UInt8, F8)
        M = zeros(Float32, 64, 64)  # large enough for Julia's 64-byte alignment
        M[3, 5] = 1
        j = share(M, fn("jax_from_dlpack"))
        @test address(j) == UInt(pointer(M))
        @test expected(j, Float32) == M
    end
end
