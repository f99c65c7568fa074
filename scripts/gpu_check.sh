#!/usr/bin/env bash
# Prepares the GPU check: builds the Python bridge (release, no libpython link) and copies it
# to test/gpu/lib/, the one folder to carry to the GPU machine. There, run:
#     python3 test/gpu/check_gpu.py test/gpu/lib/librsdlpack_python.so
source "$(dirname "$0")/env.sh"
cd "$ROOT"
build_python_bridge
mkdir -p test/gpu/lib
cp "$RSDLPACK_PYTHON_LIB" test/gpu/lib/
ls -l test/gpu/lib/librsdlpack_python.so
echo "carry test/gpu/lib; run: python3 test/gpu/check_gpu.py test/gpu/lib/librsdlpack_python.so"
