# The package itself, without Python: a tensor owner's handle, ReadOnlyArray, the native
# library and its scratch space, what unsafe_cuda_stream and Pkg.build say when something is
# missing. Included by runtests.jl inside its "Julia side, no Python" testset (every process
# runs it; the Pkg.build check only in the parent process).

@testset "a tensor owner gives its handle up once" begin
    owner = RsDLPack.TensorOwner(Ptr{Cvoid}(UInt(0x1234)))
    @test RsDLPack.take_handle!(owner) == Ptr{Cvoid}(UInt(0x1234))
    @test RsDLPack.take_handle!(owner) == C_NULL
    RsDLPack.release_now!(owner)    # nothing left to release: no call into the bridge
    RsDLPack.release_later!(owner)
    @test RsDLPack.take_handle!(owner) == C_NULL
    # Host arrays, wrapped or not, name no stream for unsafe_free! to wait for.
    @test RsDLPack.release_stream(PermutedDimsArray(view(zeros(2, 2), :, 1:2), (2, 1))) == -1
    @test RsDLPack.release_stream_keeper(view(zeros(2, 2), :, 1)) === nothing
    # The explicit releases' waits let other threads collect: `@ccall gc_safe=true` where the
    # Julia running this has it, the runtime's jl_gc_safe_enter/leave pair before.
    @test RsDLPack.HAS_CCALL_GCSAFE == (VERSION >= v"1.12.0-DEV.2029")
end

@testset "ReadOnlyArray is the ecosystem's" begin
    @test nameof(parentmodule(ReadOnlyArray)) === :ReadOnlyArrays
    R = ReadOnlyArray([1 2; 3 4])
    @test R[2, 1] == 3 && size(R) == (2, 2) && strides(R) == (1, 2)
    err = try (R[1, 1] = 0); nothing catch e; e end  # ReadOnlyArrays defines no setindex!
    @test err !== nothing && occursin("setindex!", sprint(showerror, err)) && R[1, 1] == 1
end

@testset "the native library loads" begin
    @test isfile(RsDLPack.native_library_path())
    @test isdefined(RsDLPack.Native, :stream_context)
    # Scratch.jl was asked at run time (`__init__`), for this Julia version's space.
    @test isdir(RsDLPack.SCRATCH_DIR[]) && basename(RsDLPack.SCRATCH_DIR[]) == RsDLPack.build_key()
    @test RsDLPack.scratch_dir() == RsDLPack.SCRATCH_DIR[]
end

@testset "the Python bridge's path is absolute, from a bare name too" begin
    path = RsDLPack.python_library_path()
    @test isabspath(path) && isfile(path)
    # `isfile` finds a bare name in the working directory, where `dlopen` would not look.
    cd(dirname(path)) do
        withenv("RSDLPACK_PYTHON_LIB" => basename(path)) do
            bare = RsDLPack.python_library_path()
            @test isabspath(bare) && realpath(bare) == realpath(path)
        end
    end
end

@testset "the precompile workload leaves no global in the package" begin
    # PrecompileTools 1.2's @setup_workload has no `let` (Julia 1.10, 1.11): its block is top level.
    @test isdefined(RsDLPack, :compose_every_synthetic)
    @test !isdefined(RsDLPack, :buffer)
    workload_globals = filter(names(RsDLPack; all=true)) do name
        isdefined(RsDLPack, name) && getfield(RsDLPack, name) isa Vector{UInt8}
    end
    @test isempty(workload_globals)
end

@testset "unsafe_cuda_stream without CUDA says what it needs" begin
    err = try unsafe_cuda_stream(UInt(12345)); nothing catch e; e end
    @test err isa ArgumentError && occursin("using CUDA", err.msg)
end

FRONTEND === nothing && @testset "Pkg.build without cargo warns, says what to install, and succeeds" begin
    log = tempname()
    build = joinpath(pkgdir(RsDLPack), "deps", "build.jl")
    cmd = addenv(`$(Base.julia_cmd()) --project=$(Base.active_project()) $build`,
                 "CARGO" => "rsdlpack-test-no-such-cargo")
    process = run(pipeline(ignorestatus(cmd); stdout=devnull, stderr=log))
    text = read(log, String)
    @test success(process)  # a failed build would fail `Pkg.add`, though the JLL may serve
    @test occursin("Warning", text) && occursin("nothing was built", text)
    @test occursin("cargo was not found", text) && occursin("https://rustup.rs", text)
    @test occursin("C compiler", text)
    @test occursin("RsDLPack_jll", text) && occursin("julia_bridge_path", text)
    @test !occursin("ENOENT", text)
end
