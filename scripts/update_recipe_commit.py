"""Writes the commit to build into the BinaryBuilder recipe (deps/binarybuilder/build_tarballs.jl),
the release step before the recipe goes to Yggdrasil, which wants the commit written literally.

    python scripts/update_recipe_commit.py [COMMIT] [--recipe PATH]

COMMIT defaults to HEAD; a name git knows (a tag, a branch) is resolved to its 40 hex digits, and
the commit must exist in this repository (the recipe's GitSource clones it). The recipe must have
exactly one GitSource with a literal commit. Prints the old and the new commit; exits 1 with a
message otherwise.
"""

import argparse
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
RECIPE = ROOT / "deps" / "binarybuilder" / "build_tarballs.jl"
# GitSource("<url>",\n    "<40 hex digits>"): the commit is the second string literal.
GIT_SOURCE = re.compile(r'(GitSource\(\s*"[^"]+",\s*")([0-9a-f]{40})(")')


class RecipeError(Exception):
    pass


def resolve_commit(name, repo=ROOT):
    """The full hash of `name` in `repo`, which must name a commit."""
    result = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"],
                            cwd=repo, capture_output=True, text=True)
    if result.returncode != 0:
        raise RecipeError(f"{name!r} is not a commit of {repo}: give a commit, tag or branch that exists there")
    return result.stdout.strip()


def rewrite(text, commit):
    """(new text, old commit) with the recipe's one GitSource commit replaced by `commit`."""
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise RecipeError(f"{commit!r} is not 40 lowercase hex digits")
    matches = GIT_SOURCE.findall(text)
    if len(matches) != 1:
        raise RecipeError(f"the recipe must have exactly one GitSource(url, commit) with a literal "
                          f"40-hex-digit commit; found {len(matches)}")
    old = matches[0][1]
    return GIT_SOURCE.sub(lambda m: m[1] + commit + m[3], text), old


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commit", nargs="?", default="HEAD")
    parser.add_argument("--recipe", type=pathlib.Path, default=RECIPE)
    args = parser.parse_args(argv)
    try:
        commit = resolve_commit(args.commit)
        text, old = rewrite(args.recipe.read_text(), commit)
    except (RecipeError, OSError) as e:
        print(f"update_recipe_commit: {e}", file=sys.stderr)
        return 1
    args.recipe.write_text(text)
    print(f"{args.recipe}: commit {old} -> {commit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
