# Where the two Rust libraries are. `Pkg.build` writes deps/deps.jl; the environment variables
# RSDLPACK_JULIA_LIB and RSDLPACK_PYTHON_LIB override it (to test a local build without
# rebuilding the package).

import Libdl
import JlrsCore

const DEPS_FILE = joinpath(@__DIR__, "..", "deps", "deps.jl")
isfile(DEPS_FILE) && include_dependency(DEPS_FILE)  # a rebuild invalidates the precompiled cache

# deps.jl is read, not evaluated: evaluating into a new module is refused while the package
# precompiles. Each line is `const name = "path"`.
function recorded_library(variable::Symbol)
    isfile(DEPS_FILE) || return nothing
    for line in eachline(DEPS_FILE)
        m = match(r"^const (\w+) = (\".*\")\s*$", line)
        m !== nothing && m[1] == String(variable) && return Meta.parse(m[2])::String
    end
    return nothing
end

function library_path(env::String, variable::Symbol)
    path = get(ENV, env, nothing)
    path === nothing && (path = recorded_library(variable))
    if path === nothing || !isfile(path)
        error("RsDLPack: the native library is missing; run `import Pkg; Pkg.build(\"RsDLPack\")` ",
              "or set $env to a built library (found: $(repr(path)))")
    end
    return path
end

"""
Path of the jlrs bridge (bridges/julia): no Python symbols. Read when the package
precompiles (JlrsCore records it then): after changing RSDLPACK_JULIA_LIB, recompile
(`Base.compilecache(Base.identify_package("RsDLPack"))` or touch the package).
"""
native_library_path() = library_path("RSDLPACK_JULIA_LIB", :julia_bridge)

"Path of the Python bridge (bridges/python): loaded only by the PyCall/PythonCall extensions."
python_library_path() = library_path("RSDLPACK_PYTHON_LIB", :python_bridge)

"""
The jlrs bridge's functions (see bridges/julia/src/lib.rs for the manifest).
"""
module Native
using JlrsCore.Wrap
import ..RsDLPack: native_library_path

@wrapmodule(native_library_path(), :rsdlpack_julia_init)

function __init__()
    @initjlrs
end
end # module Native
