""".cargo/config.toml gives each of the recipe's targets the flags its cdylibs need, as cargo
resolves them: cargo is asked to build a crate with no dependencies for each target triple, with
the repository's config where BinaryBuilder's build finds it (inside the tree) and where the
package's own build passes it (`--config`, deps/build.toml), and the flags it hands rustc are
read from its verbose output. Only the host's standard library is installed here, so the foreign
builds stop at rustc's "can't find crate for `std`" — after cargo has printed the command.

Cargo joins every matching [target.<triple>] and [target.'cfg(..)'] section's rustflags, and
a `--config` given on the command line (RUSTFLAGS would replace them all, so it is removed from
the environment here, as BinaryBuilder does not set it). The BinaryBuilder recipe adds GNU ld for
linux-gnu targets that way (its `gnu_ld` array): only its build sees it.
"""

import os
import pathlib
import re
import shlex
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
CONFIG = REPO / ".cargo" / "config.toml"
RECIPE = REPO / "deps" / "binarybuilder" / "build_tarballs.jl"

ALIGN = ["-C", "llvm-args=-align-all-functions=5"]
NO_CRT_STATIC = ["-C", "target-feature=-crt-static"]
DYNAMIC_LOOKUP = ["-C", "link-arg=-undefined", "-C", "link-arg=dynamic_lookup"]
GNU_LD = ["-C", "link-arg=-fuse-ld=bfd"]

# What each Rust target of the recipe's platforms (BinaryBuilder's rust_target) must get, and
# nothing more: the x86_64-gnu alignment stays on its own triple.
EXPECTED = {
    "x86_64-unknown-linux-gnu": ALIGN,
    "aarch64-unknown-linux-gnu": [],
    "x86_64-unknown-linux-musl": NO_CRT_STATIC,
    "aarch64-unknown-linux-musl": NO_CRT_STATIC,
    "x86_64-apple-darwin": DYNAMIC_LOOKUP,
    "aarch64-apple-darwin": DYNAMIC_LOOKUP,
    "x86_64-unknown-freebsd": DYNAMIC_LOOKUP,
}


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    if shutil.which("cargo") is None:
        pytest.fail("cargo is not on PATH")
    root = tmp_path_factory.mktemp("probe")
    (root / "src").mkdir()
    (root / "src" / "lib.rs").write_text("")
    (root / "Cargo.toml").write_text('[package]\nname = "probe"\nversion = "0.0.0"\nedition = "2021"\n\n'
                                     '[lib]\ncrate-type = ["cdylib"]\n\n[workspace]\n')
    (root / ".cargo").mkdir()
    shutil.copy(CONFIG, root / ".cargo" / "config.toml")  # inside the tree, as BinaryBuilder builds
    return root


def rustc_flags(probe, triple, *extra, cwd=None):
    """The -C flags after `--target <triple>` in the rustc command cargo runs for the crate."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_TARGET", "CARGO_BUILD_RUSTFLAGS")}
    result = subprocess.run(["cargo", "build", "-v", "--offline", "--target", triple, *extra,
                             "--manifest-path", str(probe / "Cargo.toml"),
                             "--target-dir", str(probe / "target")],
                            cwd=cwd or probe, env=env, capture_output=True, text=True)
    if "does not support these crate types" in result.stderr:
        return "cdylib refused"
    commands = re.findall(r"Running `([^`]*--crate-name probe[^`]*)`", result.stderr)
    assert commands, f"cargo ran no rustc for {triple}:\n{result.stderr[-3000:]}"
    args = shlex.split(commands[0])
    after = args[args.index("--target") + 2:]
    # What follows --target: --out-dir, -L and the config's rustflags; cargo's own -C flags
    # (metadata, extra-filename, incremental) come before it or are left out here.
    pairs = [("-C", value) for flag, value in zip(after, after[1:])
             if flag == "-C" and not value.startswith(("metadata=", "extra-filename=", "incremental="))]
    return [part for pair in pairs for part in pair]


@pytest.mark.parametrize("triple", sorted(EXPECTED))
def test_each_target_gets_its_flags_inside_the_tree(probe, triple):
    assert rustc_flags(probe, triple) == EXPECTED[triple]


@pytest.mark.parametrize("triple", ["x86_64-unknown-linux-gnu", "x86_64-unknown-linux-musl", "aarch64-apple-darwin"])
def test_the_package_build_passes_the_same_flags_with_config(probe, tmp_path, triple):
    # deps/build.jl runs cargo outside the package with `--config <package>/.cargo/config.toml`.
    outside = tmp_path / "outside"
    outside.mkdir()
    (probe / ".cargo" / "config.toml").rename(probe / "config.moved")
    try:
        # Nothing is found from outside; on musl cargo then refuses the cdylib outright, which is
        # what -crt-static is for.
        assert rustc_flags(probe, triple, cwd=outside) == ("cdylib refused" if "musl" in triple else [])
        assert rustc_flags(probe, triple, "--config", str(CONFIG), cwd=outside) == EXPECTED[triple]
    finally:
        (probe / "config.moved").rename(probe / ".cargo" / "config.toml")


def test_deps_build_passes_the_config():
    build = (REPO / "deps" / "build.toml").read_text()
    assert 'config = ".cargo/config.toml"' in build
    assert "--config $config" in (REPO / "deps" / "build.jl").read_text()


# BinaryBuilder's $target (the platform triplet) for each Rust target above.
BB_TARGETS = {
    "x86_64-unknown-linux-gnu": "x86_64-linux-gnu",
    "aarch64-unknown-linux-gnu": "aarch64-linux-gnu",
    "x86_64-unknown-linux-musl": "x86_64-linux-musl",
    "aarch64-unknown-linux-musl": "aarch64-linux-musl",
    "x86_64-apple-darwin": "x86_64-apple-darwin14",
    "aarch64-apple-darwin": "aarch64-apple-darwin20",
    "x86_64-unknown-freebsd": "x86_64-unknown-freebsd13.4",
}


def recipe_gnu_ld(target, rust_target):
    """The cargo arguments the recipe's script puts in `gnu_ld` for a build on `target`: its
    `gnu_ld=()` ... `fi` block, run by bash with BinaryBuilder's variables."""
    block = re.search(r"^gnu_ld=\(\)\n.*?^fi\n", RECIPE.read_text(), re.M | re.S)
    assert block, "the recipe's script has no `gnu_ld=()` block"
    result = subprocess.run(["bash", "-c", block[0] + 'printf "%s\\n" "${gnu_ld[@]}"'],
                            env={"PATH": os.environ["PATH"], "target": target, "rust_target": rust_target},
                            capture_output=True, text=True, check=True)
    return [line for line in result.stdout.splitlines() if line]


@pytest.mark.parametrize("triple", sorted(EXPECTED))
def test_the_recipe_forces_gnu_ld_on_linux_gnu_only(probe, triple):
    extra = recipe_gnu_ld(BB_TARGETS[triple], triple)
    gnu = triple.endswith("-linux-gnu")
    assert bool(extra) == gnu, extra
    # Joined to the config's flags for the target, not replacing them.
    assert rustc_flags(probe, triple, *extra) == EXPECTED[triple] + (GNU_LD if gnu else [])


def test_every_cargo_call_of_the_recipe_passes_gnu_ld():
    from test_binarybuilder import recipe_script
    script = recipe_script(RECIPE.read_text())
    calls = re.findall(r"^\s*(?:DOCS_RS=1 )?cargo (?:build|check)\b.*$", script, re.M)
    assert len(calls) == 3, calls
    for call in calls:
        assert '"${gnu_ld[@]}"' in call, call
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    assert "RUSTFLAGS" not in code  # it would replace .cargo/config.toml's flags
