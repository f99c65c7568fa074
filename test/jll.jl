# The RsDLPack_jll lookup (julia/jll.jl) against stub JLL modules shaped as JLLWrappers makes
# them: with an artifact for this platform, `is_available() = true` and a `<product>_path` global
# per library; without one, only `is_available() = false`, the globals undefined. Included by
# runtests.jl inside its "Julia side, no Python" testset.

module StubAvailable_jll
is_available() = true
librsdlpack_julia_path = "/stub/lib/librsdlpack_julia.so"
librsdlpack_python_path = "/stub/lib/librsdlpack_python.so"
end

module StubUnavailable_jll
is_available() = false
end

@testset "RsDLPack_jll serves only where it has an artifact" begin
    @test RsDLPack.jll_library("julia_bridge", StubAvailable_jll; from_source=false) ==
          "/stub/lib/librsdlpack_julia.so"
    @test RsDLPack.jll_library("python_bridge", StubAvailable_jll; from_source=false) ==
          "/stub/lib/librsdlpack_python.so"
    # No artifact: no product global to read, and the lookup falls through instead of throwing.
    @test !isdefined(StubUnavailable_jll, :librsdlpack_julia_path)
    @test RsDLPack.jll_library("julia_bridge", StubUnavailable_jll; from_source=false) === nothing
    @test RsDLPack.jll_library("python_bridge", StubUnavailable_jll; from_source=false) === nothing
    # The developer preference build_from_source puts the cargo build first.
    @test RsDLPack.jll_library("julia_bridge", StubAvailable_jll; from_source=true) === nothing
    @test RsDLPack.jll_library("julia_bridge", nothing; from_source=false) === nothing
    # No RsDLPack_jll in the test environment (until it is a dependency): nothing is loaded.
    @test RsDLPack.jll_module() === nothing
    @test RsDLPack.build_from_source(RsDLPack) === false
end

# docs/src/distribution.md's two lines, as a developer runs them (in this test process's
# project, and taken out again).
using Preferences, RsDLPack
using Preferences: set_preferences!, delete_preferences!  # named too, for fatou
@testset "the build_from_source preference, set as the docs say" begin
    set_preferences!(RsDLPack, "build_from_source" => true)   # LocalPreferences.toml of the project
    try
        @test RsDLPack.build_from_source(RsDLPack) === true
    finally
        delete_preferences!(RsDLPack, "build_from_source"; force=true)
    end
    @test RsDLPack.build_from_source(RsDLPack) === false
end
