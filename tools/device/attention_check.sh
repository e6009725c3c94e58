#!/usr/bin/env bash
# Attention on the lent GPU: GPU-vs-CPU tests for both backends; with ATTN_AUTOTUNE=1 a timing pass with cuDNN
# autotuning (knob variants); with ATTN_TORCH_CUDNN=1 the suite again against the cuDNN torch bundles; then
# torch's SDPA at the same shapes. The comparison tables print last. Usage: tools/device/attention_check.sh [BIN_DIR]
set -uo pipefail
bin=${1:-.device/attn}
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
date -u +"%Y-%m-%dT%H:%M:%SZ"
# cuDNN's own log, errors only (why an engine refused a graph); written to a file so it cannot swamp the output.
CUDNN_LOGLEVEL_DBG=1 CUDNN_LOGDEST_DBG="$out/cudnn_errors.log" "$bin/primus_gpu_tests" attention >"$out/gpu_tests.txt" 2>&1
rc=$?
ours=(--ours "$out/gpu_tests.txt")
if [ "${ATTN_AUTOTUNE:-0}" = 1 ]; then
  # Timing only: the heuristic's plans and knob variants of its best engine, timed on the first call.
  OUT=/tmp timeout 90 env PRIMUS_CUDNN_AUTOTUNE=${ATTN_AUTOTUNE_LEVEL:-2} PRIMUS_ATTENTION_TEST_PERF_ONLY=1 \
    "$bin/primus_gpu_tests" attention >"$out/gpu_tests_autotune.txt" 2>&1
  ours+=(--ours "$out/gpu_tests_autotune.txt")
fi
if [ "${ATTN_TORCH_CUDNN:-0}" = 1 ]; then
  # The cuDNN that torch bundles (newer than the system's) instead of the system library.
  lib=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
  if [ -n "$lib" ] && [ -d "$lib" ]; then
    echo "torch's cuDNN: $lib ($(ls "$lib" | grep -m1 'libcudnn.so'))"
    # The full suite: a runtime >= 9.16 also takes the bprop for T % 128 != 0, a path the system 9.14 never runs.
    OUT=/tmp timeout 100 env LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" \
      "$bin/primus_gpu_tests" attention >"$out/gpu_tests_torch_cudnn.txt" 2>&1
    ours+=(--ours "$out/gpu_tests_torch_cudnn.txt")
  else
    echo "torch's bundled cuDNN not found"
  fi
fi
python3 tools/device/attention_vs_torch.py "${ours[@]}" --json "$out/torch.json" >"$out/torch.txt" 2>&1
echo "== failures / exceptions (rc $rc)"
grep -E "FAIL|exception|crashed" "$out/gpu_tests.txt" | cut -c1-1500 | head -40
echo "== cudnn error log (head)"
head -c 2500 "$out/cudnn_errors.log" 2>/dev/null
echo; echo "== autotune pass (first 300 chars of each tuning line, and the pick)"
grep -E "autotune" "$out/gpu_tests_autotune.txt" 2>/dev/null | cut -c1-300
grep -oE "autotune (fwd|bwd) B=[0-9]+ T=[0-9]+ .{0,20}|keeping .*" "$out/gpu_tests_autotune.txt" 2>/dev/null
grep -E "FAIL|exception" "$out/gpu_tests_autotune.txt" 2>/dev/null | cut -c1-400
echo "== torch's cuDNN pass"
grep -E "FAIL|exception|cuDNN runtime|cases," "$out/gpu_tests_torch_cudnn.txt" 2>/dev/null | cut -c1-600
grep -E "bwd d[qkv] cudnn B[0-9]+ T(1|31|33|64|127|1000) " "$out/gpu_tests_torch_cudnn.txt" 2>/dev/null | cut -c1-120 | head -24
echo "== benchmark path (primus benchmark attention)"
grep -E "^\| " "$out/gpu_tests.txt" | cut -c1-200
echo "== summary"
grep -E "cuDNN runtime|cases," "$out/gpu_tests.txt" | cut -c1-200
echo "== torch"
cat "$out/torch.txt"
exit $rc
