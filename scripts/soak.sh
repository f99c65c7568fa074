#!/usr/bin/env bash
# Soak test: a million import/export cycles through the Python bridge's C entry points (ctypes,
# as Julia's ccall calls them), resident memory sampled after a warm-up, between and at the
# end; fails if it grows past a tolerance (4 MiB) or if references, releases or roots leak.
# Not part of scripts/test.sh: about a minute. Arguments go to scripts/soak.py, e.g.
#     bash scripts/soak.sh --cycles 200000 --tolerance-mib 2 --loader pydll
source "$(dirname "$0")/env.sh"
cd "$ROOT"
build_python_bridge
"$VENV/bin/python" scripts/soak.py "$@"
