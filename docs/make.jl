# Builds the reference in docs/src with Documenter (into docs/build), wherever Julia is:
#
#     julia --project=docs -e 'using Pkg; Pkg.develop(path="."); Pkg.instantiate()'
#     julia --project=docs docs/make.jl
#
# The pages are plain Markdown with no `@docs` or `@example` blocks: their Julia examples are
# checked against the test suite instead (test/python/test_readme.py), which runs without Julia.
# Loading RsDLPack needs its native libraries (Pkg.build or RsDLPack_jll).

using Documenter: Documenter, makedocs
using RsDLPack: RsDLPack

makedocs(;
    sitename="RsDLPack",
    modules=[RsDLPack],
    # The pages link to repository files outside docs/src (ext/pyconvert_rules.toml), and the
    # package's docstrings are read in the REPL: no API page yet.
    checkdocs=:none,
    warnonly=[:cross_references],
    format=Documenter.HTML(; prettyurls=false),
    pages=[
        "Home" => "index.md",
        "Usage" => "usage.md",
        "pyconvert and juliacall" => "pyconvert.md",
        "Autodiff through torch and JAX" => "autodiff.md",
        "StridedView" => "strided.md",
        "CUDA" => "cuda.md",
        "Reactant" => "reactant.md",
        "Distribution" => "distribution.md",
        "Coming from DLPack.jl" => "coming_from_dlpack_jl.md",
        "Architecture" => "architecture.md",
        "C ABI" => "c_abi.md",
        "Development" => "development.md",
    ],
)
