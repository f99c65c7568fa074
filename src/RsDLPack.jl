"""
    RsDLPack

Zero-copy exchange of arrays between Julia and Python array libraries (PyTorch, NumPy, JAX,
CuPy) over DLPack 1.x, through PyCall or PythonCall.

- [`from_dlpack`](@ref): a Python tensor (or DLPack capsule) as a Julia array over the same memory;
- [`share`](@ref): a Julia array handed to a Python consumer such as `torch.from_dlpack`;
- [`RsDLPack.unsafe_free!`](@ref): release an imported tensor now instead of at garbage collection;
- [`unsafe_cuda_stream`](@ref): a CUDA.jl `CuStream` for a foreign stream handle (CUDA extension);
- [`flush_releases`](@ref): run Python deleters that were deferred to a thread holding the GIL.

The decisions (validation, layout, ownership, copies) are made in Rust; this package composes
Julia arrays from the answers. Load PyCall or PythonCall to activate the Python side, and
CUDA for `CuArray`s.
"""
module RsDLPack

# The Julia sources live in julia/ (this directory holds the Rust core beside this entry file,
# which Pkg requires at src/RsDLPack.jl). Every package the sources use is imported here, where
# the linter checks imports against Project.toml (scripts/fatou-package.toml).

import BFloat16s
import Libdl
import Preferences
import Scratch
import TOML
# Compiles the wrapping code ahead of time (julia/precompile.jl).
using PrecompileTools: @setup_workload, @compile_workload
# The ecosystem's read-only array (JuliaArrays' ReadOnlyArrays.jl), re-exported: a user of both
# packages gets one `ReadOnlyArray`, and code written for it accepts what from_dlpack returns.
using ReadOnlyArrays: ReadOnlyArray

export from_dlpack, share, flush_releases, unsafe_cuda_stream, DLPackError, ReadOnlyArray, DLPackRaw
# Differentiable calls into torch and JAX (julia/autodiff.jl; rules and layer in extensions).
export PyFunction, torch_layer
# Public, not exported (the README calls them qualified). `public` is syntax from Julia 1.11;
# built as an expression, this still parses on 1.10.
@static if VERSION >= v"1.11"
    eval(Expr(:public, :unsafe_free!, :set_library_paths!, :pending_releases))
end

include("../julia/abi.jl")
include("../julia/errors.jl")
include("../julia/build_paths.jl")
include("../julia/jll.jl")
include("../julia/library.jl")
include("../julia/eltypes.jl")
include("../julia/python_bridge.jl")
include("../julia/arrays.jl")
include("../julia/import.jl")
include("../julia/share.jl")
include("../julia/strided.jl")
include("../julia/autodiff.jl")
include("../julia/cuda.jl")
include("../julia/precompile.jl")

end # module
