# The BinaryBuilder recipe of RsDLPack_jll: both native libraries of RsDLPack, prebuilt, so
# that Julia users need no Rust toolchain. Written as Yggdrasil's recipes are (R/rustfft and
# P/peppi_jlrs, both jlrs libraries, are the models), to be submitted there as
# R/RsDLPack/build_tarballs.jl; it runs from here as well:
#
#     RSDLPACK_GIT_COMMIT=<40 hex digits> YGGDRASIL=/path/to/Yggdrasil \
#         julia --project=<an environment with BinaryBuilder> deps/binarybuilder/build_tarballs.jl --verbose
#
# The bash part is deps/binarybuilder/build.sh, read below, which test/python/test_binarybuilder.py
# runs against a simulated prefix in CI. RsDLPack finds the JLL's libraries by name when the
# environment has RsDLPack_jll (julia/library.jl, jll_library); environment variables and
# preferences still win, and Pkg.build stays the fallback.
#
# Platforms. The jlrs bridge links libjulia, so it is built once per Julia version 1.10-1.12:
# `libjulia_platforms` tags each platform with a julia_version, and Pkg picks the artifact of
# the running Julia. The Python bridge links no libjulia (nor libpython: abi3, its symbols come
# from the process), so one build per platform would do — but every artifact of a
# julia_version-tagged JLL must hold every product, so BinaryBuilder builds it again in each
# Julia version's build (identical bytes). Building it once would take a second JLL.
# Windows is excluded: a DLL cannot leave Python's symbols to the process that loads it.
using BinaryBuilder, Pkg

name = "RsDLPack"
version = v"0.1.0"
julia_versions = [v"1.10", v"1.11", v"1.12"]

# The repository and the commit to build (Yggdrasil's recipe names both literally).
repository = get(ENV, "RSDLPACK_GIT_URL", "https://github.com/RsDLPack/RsDLPack.git")
commit = get(ENV, "RSDLPACK_GIT_COMMIT", "")
occursin(r"^[0-9a-f]{40}$", commit) ||
    error("set RSDLPACK_GIT_COMMIT to the 40-hex-digit commit of $repository to build")

sources = [
    GitSource(repository, commit; unpack_target="RsDLPack"),
]

script = read(joinpath(@__DIR__, "build.sh"), String)

# libjulia_platforms comes from Yggdrasil (L/libjulia/common.jl): found relative to this file
# once it sits at R/RsDLPack/ in Yggdrasil, or through YGGDRASIL, a checkout of it.
include(joinpath(get(ENV, "YGGDRASIL", joinpath(@__DIR__, "..", "..")), "L", "libjulia", "common.jl"))
platforms = vcat(libjulia_platforms.(julia_versions)...)
filter!(!Sys.iswindows, platforms)
# As in P/peppi_jlrs: no Rust toolchain for aarch64 FreeBSD.
filter!(p -> !(Sys.isfreebsd(p) && arch(p) == "aarch64"), platforms)

products = [
    LibraryProduct("librsdlpack_julia", :librsdlpack_julia),
    # Not dlopen'ed by the JLL (nor by the audit): its Python symbols resolve only in a process
    # that has loaded libpython, which PyCall or PythonCall do before RsDLPack loads it.
    LibraryProduct("librsdlpack_python", :librsdlpack_python; dont_dlopen=true),
]

dependencies = [
    BuildDependency("libjulia_jll"),
]

build_tarballs(ARGS, name, version, sources, script, platforms, products, dependencies;
               julia_compat="1.10", compilers=[:c, :rust], preferred_rust_version=v"1.94",
               lock_microarchitecture=false)
