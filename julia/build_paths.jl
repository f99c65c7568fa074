# Where `Pkg.build` puts the native libraries; included by deps/build.jl and by the package
# (julia/library.jl), so that both compute the same paths.
#
# The build lives in the depot's scratch space for RsDLPack (Scratch.jl), never in the package
# directory: Pkg installs packages read-only. One space per Julia minor version, because the
# jlrs bridge links one libjulia; inside it, one directory of libraries per package directory,
# so that two installed versions of RsDLPack (or two checkouts) never replace each other's
# libraries. Cargo's target directories are shared within the space (incremental rebuilds).

"Scratch space key of the native build for the running Julia."
build_key() = "build-julia-$(VERSION.major).$(VERSION.minor)"

"Directory, in the scratch space, of the libraries built from the package at `package`."
libraries_dir(scratch::AbstractString, package::AbstractString) =
    joinpath(scratch, "lib-" * path_digest(realpath(package)))

"""
FNV-1a of the path's bytes, in base 36: the same in the build process and in every session
(unlike `hash`, whose values Julia does not promise to keep across versions or processes).
"""
function path_digest(path::AbstractString)
    digest = 0xcbf29ce484222325
    for byte in codeunits(path)
        digest = (digest ⊻ byte) * 0x00000100000001b3
    end
    return string(digest; base=36)
end

"The file that records the built libraries' paths (TOML: julia_bridge, python_bridge)."
deps_file(scratch::AbstractString, package::AbstractString) =
    joinpath(libraries_dir(scratch, package), "deps.toml")
