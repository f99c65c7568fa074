# `Pkg.build("RsDLPack")`: compiles the two Rust libraries (release) in this depot's scratch
# space for RsDLPack and records their paths there (deps.toml), where the package finds them
# (julia/library.jl). Nothing is written into the package directory, which Pkg installs
# read-only; see julia/build_paths.jl for the layout of the scratch space.
#
# The cargo steps are data, in deps/build.toml, shared with the CI check that runs them from a
# read-only copy of the package (test/python/test_install.py).
#
# Where RsDLPack_jll serves (it is in the environment, has this platform's libraries, and the
# preference build_from_source is not set) there is nothing to build, and cargo is not needed.
# Otherwise it needs cargo (https://rustup.rs; the environment variable CARGO names another
# executable) and a C compiler (jlrs compiles C against julia.h). Without cargo the build warns,
# naming the alternatives, and ends without failing: `Pkg.build` runs this file with a load path
# of RsDLPack's own dependencies only, so a JLL the user added is invisible here though the
# package will load it; which library serves is decided when the package loads
# (julia/library.jl), whose error says what to do if none does.
# The Python bridge needs nothing from Python at build time: it is an abi3 library that takes
# its Python symbols from the process that loads it.

import Libdl
import Preferences
import Scratch
import TOML

const PACKAGE = dirname(@__DIR__)
const CARGO = get(ENV, "CARGO", "cargo")
include("../julia/build_paths.jl")  # static, so that fatou follows it
include("../julia/jll.jl")

const PACKAGE_UUID = Base.UUID(TOML.parsefile(joinpath(PACKAGE, "Project.toml"))["uuid"])
const SCRATCH = Scratch.get_scratch!(PACKAGE_UUID, build_key())
const PLACEHOLDERS = ("{julia_dir}" => dirname(Sys.BINDIR),)
const BUILD = TOML.parsefile(joinpath(@__DIR__, "build.toml"))

"Runs one step of deps/build.toml; returns the path of the library cargo built."
function cargo_build(step::Dict)
    target = joinpath(SCRATCH, "target", step["name"])
    manifest = joinpath(PACKAGE, step["manifest"])
    config = joinpath(PACKAGE, BUILD["config"])
    cmd = `$CARGO $(step["args"]) --config $config --manifest-path $manifest --target-dir $target`
    env = Dict{String,String}(ENV)
    foreach(name -> delete!(env, name), step["env_remove"])
    for (name, value) in step["env"]
        env[name] = replace(value, PLACEHOLDERS...)
    end
    env["CARGO_TARGET_DIR"] = target
    @info "RsDLPack build: $(step["name"])" cmd
    run(setenv(cmd, env; dir=SCRATCH))  # the working directory is outside the package too
    built = joinpath(target, "release", "lib" * step["crate"] * "." * Libdl.dlext)
    isfile(built) || error("RsDLPack build: cargo finished but $built is missing")
    return built
end

"Copies `source` to `destination` through a rename, so that a session which has the old file
loaded keeps it (overwriting a loaded library in place can crash that session)."
function install(source::AbstractString, destination::AbstractString)
    staging = destination * ".partial"
    cp(source, staging; force=true)
    mv(staging, destination; force=true)
    return destination
end

"The cargo executable, or `nothing` (a spawn would end in a bare `IOError … ENOENT`)."
find_cargo() = Sys.which(CARGO)

"What a build without cargo says: what was not done, and each way to get the libraries."
function no_cargo_message()
    return string("RsDLPack build: cargo was not found (looked for $(repr(CARGO))",
                  haskey(ENV, "CARGO") ? ", named by CARGO" : " on PATH",
                  "), so nothing was built. RsDLPack's native libraries are Rust. Either ",
                  "install a Rust toolchain and a C compiler (https://rustup.rs; gcc or clang), ",
                  "then run `Pkg.build(\"RsDLPack\")` again (or set CARGO to a cargo executable), ",
                  "or use libraries built elsewhere: add RsDLPack_jll to the environment when it ",
                  "is available (used when RsDLPack loads; the build cannot see it), or point ",
                  "the preferences julia_bridge_path and python_bridge_path ",
                  "(`RsDLPack.set_library_paths!`) or the environment variables ",
                  "RSDLPACK_JULIA_LIB and RSDLPACK_PYTHON_LIB at built libraries.")
end

"""
Whether RsDLPack_jll has both libraries for this platform and the preference `build_from_source`
is not set: the package will use the JLL's libraries, so there is nothing to build.
"""
function jll_serves()
    jll = jll_module()
    from_source = build_from_source(PACKAGE_UUID)
    return all(name -> jll_library(name, jll; from_source) !== nothing, keys(JLL_PRODUCTS))
end

function build()
    if jll_serves()
        @info "RsDLPack build: $JLL_NAME has this platform's libraries; nothing to build (set the " *
              "preference $BUILD_FROM_SOURCE to build them with cargo)"
        return
    end
    # Before anything is written. A warning, not an error: a failed build fails `Pkg.add`,
    # though the package may load from the JLL, which this build cannot see.
    if find_cargo() === nothing
        @warn no_cargo_message()
        return
    end
    libraries = libraries_dir(SCRATCH, PACKAGE)
    mkpath(libraries)
    recorded = Dict{String,Any}("package" => PACKAGE, "julia" => string(VERSION))
    for step in BUILD["library"]
        built = cargo_build(step)
        recorded[step["name"]] = install(built, joinpath(libraries, basename(built)))
    end
    staging = deps_file(SCRATCH, PACKAGE) * ".partial"
    open(io -> TOML.print(io, recorded; sorted=true), staging, "w")
    mv(staging, deps_file(SCRATCH, PACKAGE); force=true)
    @info "RsDLPack build: libraries recorded in $(deps_file(SCRATCH, PACKAGE))"
end

build()
