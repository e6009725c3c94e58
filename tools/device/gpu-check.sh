#!/usr/bin/env bash
# Runs every op family on the GPU against the CPU reference. Usage: tools/device/gpu-check.sh [BUILD_DIR] [args...]
set -uo pipefail
build=${1:-build}
shift || true
bin="$build/tests/primus_gpu_tests"
if [ ! -x "$bin" ]; then
  echo "gpu-check: $bin not found; build with PRIMUS_CUDA=ON here and carry $build" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader || true
out=${OUT:-/tmp}
"$bin" "$@" 2>&1 | tee "$out/gpu_tests.txt"
exit "${PIPESTATUS[0]}"
