# The BinaryBuilder recipe of RsDLPack_jll, as it is to be submitted to Yggdrasil at
# R/RsDLPack/build_tarballs.jl: both native libraries of RsDLPack, prebuilt, so that Julia users
# need no Rust toolchain. Written as Yggdrasil's jlrs recipes are (R/rustfft, P/peppi_jlrs):
# source and commit literal, the script inline, libjulia's platforms. It runs only from inside a
# Yggdrasil checkout (the include below), with no environment variables:
#
#     cp deps/binarybuilder/build_tarballs.jl <Yggdrasil>/R/RsDLPack/
#     cd <Yggdrasil>/R/RsDLPack && julia --project=<BinaryBuilder env> build_tarballs.jl --verbose
#
# For a release, `python scripts/update_recipe_commit.py <commit>` writes the commit below.
# test/python/test_binarybuilder.py runs the script against a simulated prefix and checks the
# rest of this file; docs/src/distribution.md has the reasons in full.
using BinaryBuilder, Pkg

name = "RsDLPack"
version = v"0.1.0"
# jlrs 0.23 supports Julia 1.10-1.13 (its jlrs_compat MAX_MINOR_VERSION = 13), and the jlrs
# bridge links libjulia: one build per version (Yggdrasil's L/libjulia/common.jl builds 1.13).
julia_versions = [v"1.10", v"1.11", v"1.12", v"1.13"]

sources = [
    GitSource("https://github.com/RsDLPack/RsDLPack.jl.git",
              "db22c30af47cc5aa0311251ce69e98c04df416f0"),
]

# Both libraries are built in every build, once per platform and Julia version: every artifact of
# a julia_version-tagged JLL holds every product, so the Python bridge, which links neither
# libjulia nor libpython (abi3: its Python symbols come from the process), is built again in each
# (identical bytes). Under BinaryBuilder jlrs links no libjulia (it finds julia.h in
# $WORKSPACE/destdir through bb_target): the repository's .cargo/config.toml gives the linker
# flags that needs on Apple and FreeBSD, and -crt-static on musl. The pinned commit must have
# that config and LICENSE (test_binarybuilder.py reads them from the commit itself).
# test/python/test_binarybuilder.py runs this script against a simulated prefix, where
# RSDLPACK_BB_JLRS_CHECK_ONLY=1 makes the jlrs step a `DOCS_RS=1 cargo check` (no libjulia there).
script = raw"""
set -eo pipefail
cd $WORKSPACE/srcdir/RsDLPack.jl

# One target directory per library (the jlrs bridge is its own workspace). Under BinaryBuilder
# cargo writes into <dir>/$CARGO_BUILD_TARGET/release; without a target triple (the CI
# simulation), into <dir>/release.
targets="${CARGO_TARGET_DIR:-$PWD/target}"
release_dir() {
    echo "$targets/$1/${CARGO_BUILD_TARGET:+$CARGO_BUILD_TARGET/}release"
}

# GNU ld on linux-gnu: Rust >= 1.90 links x86_64 linux-gnu with its bundled rust-lld, which fails
# in BinaryBuilder's sandbox ("lld not built with zlib support"); Yggdrasil's Rust recipes on
# GCC 10 (F/fastloess, F/fastlowess, M/mmtk_julia) force BFD there too. Passed with --config,
# which cargo joins to .cargo/config.toml's flags for the target (RUSTFLAGS would replace them);
# only this script passes it, so the package's own builds keep the toolchain's default linker.
# test_cargo_config.py checks what rustc gets from it per target.
gnu_ld=()
if [[ "${target}" == *-linux-gnu* ]]; then
    gnu_ld=(--config "target.${rust_target}.rustflags = ['-C', 'link-arg=-fuse-ld=bfd']")
fi

# The Python bridge: abi3, no libpython linked (the same steps as deps/build.toml).
env -u PYO3_PYTHON PYO3_BUILD_EXTENSION_MODULE=1 PYO3_NO_PYTHON=1 \
    cargo build --release --locked "${gnu_ld[@]}" -p rsdlpack-python --target-dir "$targets/python_bridge"
install -Dvm 0755 "$(release_dir python_bridge)/librsdlpack_python.${dlext}" \
    "${libdir}/librsdlpack_python.${dlext}"

# The jlrs bridge: compiled against this build's Julia version.
if [ -n "${RSDLPACK_BB_JLRS_CHECK_ONLY:-}" ]; then
    DOCS_RS=1 cargo check --release --locked "${gnu_ld[@]}" --manifest-path bridges/julia/Cargo.toml \
        --target-dir "$targets/julia_bridge"
else
    cargo build --release --locked "${gnu_ld[@]}" --manifest-path bridges/julia/Cargo.toml \
        --target-dir "$targets/julia_bridge"
    install -Dvm 0755 "$(release_dir julia_bridge)/librsdlpack_julia.${dlext}" \
        "${libdir}/librsdlpack_julia.${dlext}"
fi

install_license LICENSE
"""

include("../../L/libjulia/common.jl")
platforms = vcat(libjulia_platforms.(julia_versions)...)
# Each platform costs eight cargo builds (two crates, four Julia versions). Kept: 64-bit Linux
# (glibc: NumPy, torch, JAX, CuPy and CUDA; musl: NumPy), macOS (arm64: NumPy, torch, JAX;
# x86_64: NumPy, torch up to 2.2) and x86_64 FreeBSD (the system's Python packages). Left out:
# Windows (a DLL cannot leave Python's symbols to the process that loads it), i686 and
# powerpc64le and riscv64 Linux (no NumPy or torch wheels; libjulia has riscv64 from Julia 1.13),
# aarch64 FreeBSD (libjulia only from Julia 1.12).
is_kept(p) = (Sys.islinux(p) && arch(p) in ("x86_64", "aarch64")) || Sys.isapple(p) ||
             (Sys.isfreebsd(p) && arch(p) == "x86_64")
filter!(is_kept, platforms)

products = [
    LibraryProduct("librsdlpack_julia", :librsdlpack_julia),
    # Not dlopen'ed by the JLL (nor by the audit): its Python symbols resolve only in a process
    # that has loaded libpython, which PyCall or PythonCall do before RsDLPack loads it.
    LibraryProduct("librsdlpack_python", :librsdlpack_python; dont_dlopen=true),
]

dependencies = [
    BuildDependency("libjulia_jll"),
    # The libc crate links libiconv on Apple (`link(name = "iconv")`), as in both jlrs recipes.
    Dependency("Libiconv_jll"; platforms=filter(Sys.isapple, platforms)),
]

# GCC 10 as in R/rustfft (jlrs compiles C against julia.h); no Rust pin: BinaryBuilder's newest
# toolchain is above the crates' rust-version (1.88). julia_compat: exactly the built versions.
build_tarballs(ARGS, name, version, sources, script, platforms, products, dependencies;
               julia_compat=libjulia_julia_compat(julia_versions), preferred_gcc_version=v"10",
               compilers=[:c, :rust])
