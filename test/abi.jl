# The C boundary, without Python: the sizes of the C struct mirrors and the codes and messages
# that cross it (index order, copy, error kinds, import options). Included by runtests.jl
# inside its "Julia side, no Python" testset (every process runs it).

@testset "C struct mirrors" begin
    # The header's sizes (julia/abi.jl, generated from it); the Python bridge's are checked
    # when it loads.
    for S in (RsDLPack.ImportOptions, RsDLPack.PlanOptions, RsDLPack.ArrayPlan, RsDLPack.ImportResult,
              RsDLPack.ArrayExport, RsDLPack.ShareResult, RsDLPack.StridedPlan)
        @test sizeof(S) == RsDLPack.HEADER_STRUCT_SIZES[Symbol(:Rsdl, nameof(S))]
    end
    # Every struct the bridge checks at load (MIRRORED_STRUCTS) is checked here too.
    @test issubset(last.(RsDLPack.MIRRORED_STRUCTS), (RsDLPack.ImportOptions, RsDLPack.PlanOptions,
                                                      RsDLPack.ArrayPlan, RsDLPack.ImportResult, RsDLPack.ArrayExport,
                                                      RsDLPack.ShareResult, RsDLPack.StridedPlan))
end

@testset "codes and messages" begin
    @test RsDLPack.index_order_code(:producer) == 0x00
    @test RsDLPack.index_order_code(:reversed) == 0x01
    @test_throws ArgumentError RsDLPack.index_order_code(:sideways)
    @test RsDLPack.copy_code(nothing) == -1 && RsDLPack.copy_code(true) == 1 && RsDLPack.copy_code(false) == 0
    # The jlrs bridge's errors: a code (its kind) and the message, never parsed.
    e = RsDLPack.native_error(RsDLPack.ERROR_CODE_BUFFER, "a zero-copy view is impossible")
    @test e.kind == :buffer && e.message == "a zero-copy view is impossible"
    plain = RsDLPack.native_error(RsDLPack.ERROR_CODE_INVALID, "[buffer] plain")
    @test plain.kind == :invalid && plain.message == "[buffer] plain"
    @test RsDLPack.native_error(RsDLPack.ERROR_CODE_DRIVER, "cuEventRecord failed").kind == :driver
    @test RsDLPack.native_error(RsDLPack.ERROR_CODE_INTERPRETER, "not running").kind == :interpreter
    @test RsDLPack.native_error(RsDLPack.ERROR_CODE_DECLINED, "a class, not a tensor").kind == :declined
    @test RsDLPack.import_flags(false, true) == RsDLPack.CALL_REFUSE_WITHOUT_GIL | RsDLPack.CALL_DECLINE_REFUSALS
    @test RsDLPack.import_flags(true) == RsDLPack.CALL_REFUSE_WITHOUT_GIL | RsDLPack.PLAN_WRITABLE_TYPE
    # What the jlrs bridge throws, built by the function it calls (bridges/julia/src/errors.rs).
    thrown = try
        RsDLPack.Native.stream_context(UInt(0))
    catch err
        err
    end
    @test thrown isa DLPackError && thrown.kind in (:invalid, :buffer)
    @test RsDLPack.error_kind(2) == :buffer && RsDLPack.error_kind(77) == :internal
    # Every entry point's call goes through `checked`: code 0 passes, any other throws its kind.
    @test RsDLPack.checked(_ -> Int32(0)) === nothing
    cleaned = Ref(0)
    failed = try
        RsDLPack.checked(_ -> Int32(RsDLPack.ERROR_CODE_BUFFER); on_error=() -> (cleaned[] += 1))
    catch err
        err
    end
    @test failed isa DLPackError && failed.kind == :buffer && failed.message == "(no message)" && cleaned[] == 1
    @test_throws DLPackError RsDLPack.loaded(Ref{Ptr{Cvoid}}(C_NULL))
    if VERSION >= v"1.11"
        @test all(name -> Base.ispublic(RsDLPack, name), (:unsafe_free!, :set_library_paths!, :pending_releases))
    end
    @test sprint(showerror, DLPackError(:invalid, "x")) == "DLPackError (invalid): x"
    o = RsDLPack.ImportOptions(; stream=5, device=(2, 1), copy=false)
    @test (o.has_stream, o.stream, o.has_device, o.device_type, o.device_id, o.copy) == (1, 5, 1, 2, 1, 0)
    @test RsDLPack.ImportOptions().copy == -1
end
