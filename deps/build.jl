# `Pkg.build("RsDLPack")`: compiles the two Rust libraries (release) and records their paths
# in deps/deps.jl, where the package finds them. Needs cargo (rustup.rs) and, for the Python
# bridge, nothing at all from Python: it is an abi3 library that takes its Python symbols from
# the process that loads it.

import Libdl

const ROOT = normpath(joinpath(@__DIR__, ".."))
const CARGO = get(ENV, "CARGO", "cargo")
library_file(name) = "lib" * name * "." * Libdl.dlext

function cargo(args, env)
    cmd = addenv(`$CARGO $args`, env...)
    @info "RsDLPack build" cmd
    run(cmd)
end

# The jlrs bridge links this very Julia.
julia_manifest = joinpath(ROOT, "bridges", "julia", "Cargo.toml")
cargo(`build --release --manifest-path $julia_manifest`,
      ["JLRS_JULIA_DIR" => dirname(Sys.BINDIR)])
julia_bridge = joinpath(ROOT, "bridges", "julia", "target", "release", library_file("rsdlpack_julia"))

# The Python bridge must not link libpython (PyCall/PythonCall already loaded one).
python_target = joinpath(ROOT, "target", "ext")
cargo(`build --release -p rsdlpack-python --manifest-path $(joinpath(ROOT, "Cargo.toml")) --target-dir $python_target`,
      ["PYO3_BUILD_EXTENSION_MODULE" => "1", "PYO3_NO_PYTHON" => get(ENV, "PYO3_NO_PYTHON", "1")])
python_bridge = joinpath(python_target, "release", library_file("rsdlpack_python"))

for path in (julia_bridge, python_bridge)
    isfile(path) || error("RsDLPack build: expected $path after cargo build")
end

open(joinpath(@__DIR__, "deps.jl"), "w") do io
    println(io, "# Written by deps/build.jl.")
    println(io, "const julia_bridge = ", repr(julia_bridge))
    println(io, "const python_bridge = ", repr(python_bridge))
end
