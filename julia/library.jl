# Where the two Rust libraries are. In order:
#   1. the environment variables RSDLPACK_JULIA_LIB / RSDLPACK_PYTHON_LIB (a one-off test of a
#      local build);
#   2. the preferences `julia_bridge_path` / `python_bridge_path` (Preferences.jl, e.g.
#      `RsDLPack.set_library_paths!(julia_bridge=…)`), the durable local override;
#   3. what `Pkg.build` recorded in the depot's scratch space (deps/build.jl; paths in
#      julia/build_paths.jl).

const PACKAGE_DIR = dirname(@__DIR__)
# Scratch.jl attributes the space to this package, so `Pkg.gc()` keeps it while RsDLPack is
# installed anywhere in the depot.
const DEPS_FILE = deps_file(Scratch.get_scratch!(@__MODULE__, build_key()), PACKAGE_DIR)
isfile(DEPS_FILE) && include_dependency(DEPS_FILE)  # a rebuild invalidates the precompiled cache

"The path `Pkg.build` recorded for `name` (julia_bridge, python_bridge), or `nothing`."
function recorded_library(name::String)
    isfile(DEPS_FILE) || return nothing
    path = get(TOML.parsefile(DEPS_FILE), name, nothing)
    return path isa String ? path : nothing
end

function library_path(env::String, name::String)
    preference = name * "_path"
    path, source = if haskey(ENV, env)
        ENV[env], "the environment variable $env"
    elseif (p = Preferences.load_preference(@__MODULE__, preference, nothing)) !== nothing
        p, "the preference $preference"
    else
        recorded_library(name), "Pkg.build's record $DEPS_FILE"
    end
    if path === nothing || !isfile(path)
        error("RsDLPack: the native library is missing (from $source: $(repr(path))); run ",
              "`import Pkg; Pkg.build(\"RsDLPack\")` (needs cargo), or set $env or the ",
              "preference $preference to a built library")
    end
    return path
end

"""
Path of the jlrs bridge (bridges/julia): no Python symbols. Read when the package
precompiles (JlrsCore records it then). A change of the preference recompiles the package by
itself; after changing RSDLPACK_JULIA_LIB, recompile
(`Base.compilecache(Base.identify_package("RsDLPack"))` or touch the package).
"""
native_library_path() = library_path("RSDLPACK_JULIA_LIB", "julia_bridge")

"Path of the Python bridge (bridges/python): loaded only by the PyCall/PythonCall extensions."
python_library_path() = library_path("RSDLPACK_PYTHON_LIB", "python_bridge")

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
import ..RsDLPack: native_library_path

@wrapmodule(native_library_path(), :rsdlpack_julia_init)

function __init__()
    @initjlrs
end
end # module Native
