#!/usr/bin/env bash
# Builds everything and runs every test (unit, op, config, end-to-end) with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
# ctest runs one test per core: a test's OpenMP threads beyond its own core only wait on each other behind
# the other tests (the single-process suites: 150 s -> 122 s on 2 cores with one thread each). Tests that
# check results across thread counts set them themselves.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
ctest --test-dir build --output-on-failure -j "$jobs"
