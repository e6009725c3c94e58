#!/usr/bin/env bash
# Builds everything and runs every test (unit, op, config, end-to-end) with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
ctest --test-dir build --output-on-failure -j "$jobs"
