# The bash part of deps/binarybuilder/build_tarballs.jl, which reads this file as its `script`.
# BinaryBuilder runs it in its sandbox once per platform of the recipe — every platform carries
# a Julia version (libjulia_platforms) — with the source in $WORKSPACE/srcdir/RsDLPack, the
# destination in $prefix ($libdir for libraries), the platform in $target ($rust_target for
# Rust, also exported as CARGO_BUILD_TARGET), $dlext and $nproc set, and libjulia_jll for that
# Julia version installed in $WORKSPACE/destdir, where jlrs looks for it when `bb_target` and
# WORKSPACE are set (jlrs 0.23, find_julia: building_in_binary_builder).
#
# test/python/test_binarybuilder.py runs it here against a simulated prefix. There, with no
# Julia to link, RSDLPACK_BB_JLRS_CHECK_ONLY=1 makes the jlrs bridge's step `cargo check` with
# DOCS_RS=1 (jlrs's way to compile without Julia), as test/python/test_install.py does.
set -eo pipefail

cd "$WORKSPACE/srcdir/RsDLPack"

# One target directory per library (the jlrs bridge is its own workspace). Under BinaryBuilder
# cargo writes into <dir>/$CARGO_BUILD_TARGET/release; without a target triple (the CI
# simulation, which reuses test_install.py's target directories), into <dir>/release.
targets="${CARGO_TARGET_DIR:-$PWD/target}"
release_dir() {
    echo "$targets/$1/${CARGO_BUILD_TARGET:+$CARGO_BUILD_TARGET/}release"
}

# The Python bridge: abi3, and no libpython linked — its Python symbols come from the process
# that loads it, so one build serves every CPython >= 3.10 (the same steps as deps/build.toml).
env -u PYO3_PYTHON PYO3_BUILD_EXTENSION_MODULE=1 PYO3_NO_PYTHON=1 \
    cargo build --release --locked -p rsdlpack-python --target-dir "$targets/python_bridge"
install -Dvm 0755 "$(release_dir python_bridge)/librsdlpack_python.${dlext}" \
    "${libdir}/librsdlpack_python.${dlext}"

# The jlrs bridge: links this platform's libjulia, hence one build per Julia version.
if [ -n "${RSDLPACK_BB_JLRS_CHECK_ONLY:-}" ]; then
    DOCS_RS=1 cargo check --release --locked --manifest-path bridges/julia/Cargo.toml \
        --target-dir "$targets/julia_bridge"
else
    cargo build --release --locked --manifest-path bridges/julia/Cargo.toml \
        --target-dir "$targets/julia_bridge"
    install -Dvm 0755 "$(release_dir julia_bridge)/librsdlpack_julia.${dlext}" \
        "${libdir}/librsdlpack_julia.${dlext}"
fi

# BinaryBuilder's audit wants a license in $prefix/share/licenses; the repository has none yet
# (Cargo.toml says MIT): add LICENSE before submitting the recipe.
if [ -f LICENSE ]; then
    install_license LICENSE
fi
