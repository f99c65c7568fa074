# Where the two Rust libraries are. In order:
#   1. the environment variables RSDLPACK_JULIA_LIB / RSDLPACK_PYTHON_LIB (a one-off test of a
#      local build);
#   2. the preferences `julia_bridge_path` / `python_bridge_path` (Preferences.jl, e.g.
#      `RsDLPack.set_library_paths!(julia_bridge=…)`), the durable local override;
#   3. RsDLPack_jll, when the active environment has it and it has an artifact for this
#      platform, unless the developer preference `build_from_source` is set (julia/jll.jl);
#   4. what `Pkg.build` recorded in the depot's scratch space (deps/build.jl; paths in
#      julia/build_paths.jl).

const PACKAGE_DIR = dirname(@__DIR__)

# The scratch space is asked for at run time, as Scratch.jl advises (a path stored in the
# precompiled image would be the precompiling depot's): `__init__` asks once per session.
# Scratch.jl attributes the space to this package, so `Pkg.gc()` keeps it while RsDLPack is
# installed anywhere in the depot.
const SCRATCH_DIR = Ref("")

function __init__()
    SCRATCH_DIR[] = Scratch.get_scratch!(@__MODULE__, build_key())
end

"""
The scratch space of this Julia version's build. Before `__init__` has run — while the package
precompiles, when `@wrapmodule` reads the jlrs bridge's path — it asks Scratch.jl directly.
"""
scratch_dir() = isempty(SCRATCH_DIR[]) ? Scratch.get_scratch!(@__MODULE__, build_key()) : SCRATCH_DIR[]

"The file in which `Pkg.build` recorded the libraries it built from this package directory."
recorded_deps_file() = deps_file(scratch_dir(), PACKAGE_DIR)

"The path `Pkg.build` recorded for `name` (julia_bridge, python_bridge), or `nothing`."
function recorded_library(name::String)
    file = recorded_deps_file()
    isfile(file) || return nothing
    path = get(TOML.parsefile(file), name, nothing)
    return path isa String ? path : nothing
end

function library_path(env::String, name::String)
    preference = name * "_path"
    path, source = if haskey(ENV, env)
        ENV[env], "the environment variable $env"
    elseif (p = Preferences.load_preference(@__MODULE__, preference, nothing)) !== nothing
        p, "the preference $preference"
    elseif (j = jll_library(name, jll_module(); from_source=build_from_source(@__MODULE__))) !== nothing
        j, JLL_NAME
    else
        recorded_library(name), "Pkg.build's record $(recorded_deps_file())"
    end
    if path === nothing || !isfile(path)
        error("RsDLPack: the native library is missing (from $source: $(repr(path))); run ",
              "`import Pkg; Pkg.build(\"RsDLPack\")` (needs cargo: https://rustup.rs), add ",
              "$JLL_NAME to the environment, or set $env or the preference $preference to a ",
              "built library")
    end
    return path
end

"""
Path of the jlrs bridge (bridges/julia): no Python symbols. Read when the package
precompiles (JlrsCore records it then). A change of the preference recompiles the package by
itself, and so does a rebuilt library (`tracked_native_library`); after changing
RSDLPACK_JULIA_LIB or adding RsDLPack_jll, recompile
(`Base.compilecache(Base.identify_package("RsDLPack"))` or touch the package).
"""
native_library_path() = library_path("RSDLPACK_JULIA_LIB", "julia_bridge")

"""
The jlrs bridge's path, declared a dependency of the precompiled image: a rebuilt library
recompiles the package. The library itself, not deps.toml: a rebuild rewrites deps.toml with
the same content, which Julia ≥ 1.11 compares by content (`include_dependency`'s
`track_content`, whose default is `true` on current Julia), while the library's content — and
its modification time, which Julia 1.10 compares — changes. The default behaviour is right on
every supported version, so no keyword is passed (1.10 has none).
"""
function tracked_native_library()
    path = abspath(native_library_path())  # include_dependency reads a relative path from this file's directory
    include_dependency(path)
    return path
end

"""
Path of the Python bridge (bridges/python): loaded only by the PyCall/PythonCall extensions.
Absolute, as the jlrs bridge's is: `dlopen` searches the loader's path for a name without a
slash, so a bare `RSDLPACK_PYTHON_LIB=librsdlpack_python.so` that `isfile` found in the
working directory would load another library, or none.
"""
python_library_path() = abspath(library_path("RSDLPACK_PYTHON_LIB", "python_bridge"))

"""
    RsDLPack.set_library_paths!(; julia_bridge=nothing, python_bridge=nothing)

Records locally built libraries as preferences of the active project (LocalPreferences.toml),
in place of what `Pkg.build` built; `nothing` removes a preference. Takes effect in a new
Julia session (the package recompiles).
"""
function set_library_paths!(; julia_bridge::Union{Nothing,AbstractString}=nothing,
                            python_bridge::Union{Nothing,AbstractString}=nothing)
    for (key, path) in (("julia_bridge_path", julia_bridge), ("python_bridge_path", python_bridge))
        if path === nothing
            Preferences.delete_preferences!(@__MODULE__, key; force=true)
        else
            isfile(path) || throw(ArgumentError("$key: no file at $(repr(path))"))
            Preferences.set_preferences!(@__MODULE__, key => abspath(path); force=true)
        end
    end
    return nothing
end

"""
The jlrs bridge's functions (see bridges/julia/src/lib.rs for the manifest).
"""
module Native
using JlrsCore.Wrap: @wrapmodule, @initjlrs  # named: a whole-module `using` hides every name from fatou
import ..RsDLPack: tracked_native_library

@wrapmodule(tracked_native_library(), :rsdlpack_julia_init)

function __init__()
    @initjlrs
end
end # module Native
