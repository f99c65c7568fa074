# RsDLPack_jll, the binary package deps/binarybuilder/build_tarballs.jl builds: whether it serves
# this session, and its library paths. Included by the package (src/RsDLPack.jl) and by
# deps/build.jl, which skips cargo where the JLL serves.
#
# The JLL is not registered yet, so it is found by name (`jll_module`). Once it is, the switch is
# Project.toml's `[deps]`/`[compat]` entries plus two lines of code: `import RsDLPack_jll` in
# src/RsDLPack.jl, and `jll_module() = RsDLPack_jll` here (docs/src/distribution.md).

const JLL_NAME = "RsDLPack_jll"
# JLLWrappers' global for each LibraryProduct of the recipe (`<product>_path`).
const JLL_PRODUCTS = Dict("julia_bridge" => :librsdlpack_julia_path,
                          "python_bridge" => :librsdlpack_python_path)
# The developer path: with this preference set, the cargo build (`Pkg.build`) is used and built
# even where the JLL has libraries.
const BUILD_FROM_SOURCE = "build_from_source"

"""
RsDLPack_jll's module when the active environment has it (`Base.identify_package`), else
`nothing`. Loaded here, so its globals are read in the latest world (`invokelatest`).
"""
function jll_module()
    id = Base.identify_package(JLL_NAME)
    id === nothing && return nothing
    # fatou-ignore non-public-access: loading a package by PkgId, one this package does not depend on, has no public name (Base.require is documented in the manual's code-loading section)
    return Base.require(id)
end

"Whether `owner` (this package's module or UUID) has the preference `build_from_source` set."
build_from_source(owner) = Preferences.load_preference(owner, BUILD_FROM_SOURCE, false) === true

"""
The path of library `name` (julia_bridge, python_bridge) in `jll`, or `nothing` where the JLL
does not serve: no JLL, `from_source` (the developer preference), or no artifact for this
platform. JLLWrappers then defines only `is_available() = false` and leaves the product globals
undefined, so `is_available` is asked first. The path may be the user's override, the JLL's own
preference `<product>_path` (JLLWrappers reads it).
"""
function jll_library(name::String, jll::Union{Module,Nothing}; from_source::Bool)
    (jll === nothing || from_source) && return nothing
    is_available = invokelatest(getproperty, jll, :is_available)
    invokelatest(is_available) === true || return nothing
    path = invokelatest(getproperty, jll, JLL_PRODUCTS[name])
    return path isa String ? path : nothing
end
