# Element types, without Python: the table of Julia types by element code, the codes `share`
# sends back, the requested element of a typed target, DLPackRaw and bfloat16. Included by
# runtests.jl inside its "Julia side, no Python" testset (every process runs it).

@testset "element types" begin
    for (i, T) in enumerate(RsDLPack.ELEMENT_TYPES)
        @test RsDLPack.element_type(i - 1) === T
    end
    @test RsDLPack.element_code(Float32) == 11
    @test RsDLPack.element_code(ComplexF64) == 14
    @test RsDLPack.element_code(UInt16) == 6
    err = try RsDLPack.element_code(String); nothing catch e; e end
    @test err isa DLPackError && err.kind == :buffer && occursin("String", err.message)
    # fp8 e4m3fn (DLPack code 10): its own element type, and its code back for `share`.
    @test RsDLPack.element_type(0x10000 + 10 * 256 + 8) === DLPackRaw{10,8}
    @test RsDLPack.element_code(DLPackRaw{10,8}) == 0x10000 + 10 * 256 + 8
    # Untyped forms ask for any element type; a typed Array{Any,N} has no DLPack one.
    @test RsDLPack.requested_element(Array) == -1 && RsDLPack.requested_element(Matrix) == -1
    @test RsDLPack.requested_element(Array{Float32,2}) == 11
    @test_throws DLPackError RsDLPack.requested_element(Array{Any,2})
    @test sizeof(DLPackRaw{10,8}) == 1 && isbitstype(DLPackRaw{10,8})
    # bfloat16 is BFloat16s.BFloat16 on every Julia (Core.BFloat16 where Julia and LLVM
    # have it), never UInt16 bits; kDLBcomplex is a Complex of it (named code 15).
    @test nameof(RsDLPack.BFLOAT16) === :BFloat16 && RsDLPack.BFLOAT16 <: AbstractFloat
    @test sizeof(RsDLPack.BFLOAT16) == 2 && RsDLPack.element_code(RsDLPack.BFLOAT16) == 10
    @test RsDLPack.element_type(15) === Complex{RsDLPack.BFLOAT16}
    @test sizeof(RsDLPack.element_type(15)) == 4
end
