#!/usr/bin/env bash
# Configures and builds Primus-C++ into build/ (CUDA backend when nvcc is present, else CPU-only).
# Usage: scripts/build.sh [extra cmake args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
# A new build folder compiles in batches (PRIMUS_UNITY_BUILD, CMakeLists.txt): a fresh machine's cold build
# in a quarter of the time. An existing folder keeps the choice it was configured with.
unity=()
[ -f build/CMakeCache.txt ] || unity=(-DPRIMUS_UNITY_BUILD=ON)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${unity[@]}" "$@" >/dev/null
ninja -C build -j "$jobs"
