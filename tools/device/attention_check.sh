#!/usr/bin/env bash
# Attention on the lent GPU: GPU-vs-CPU tests for both backends (plus, with ATTN_AUTOTUNE=1, a timing pass with
# cuDNN autotuning), then
# torch's SDPA at the same shapes; the comparison table prints last. Usage: tools/device/attention_check.sh [BIN_DIR]
set -uo pipefail
bin=${1:-.device/attn}
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
date -u +"%Y-%m-%dT%H:%M:%SZ"
# cuDNN's own log, errors only (why an engine refused a graph); written to a file so it cannot swamp the output.
CUDNN_LOGLEVEL_DBG=1 CUDNN_LOGDEST_DBG="$out/cudnn_errors.log" "$bin/primus_gpu_tests" attention >"$out/gpu_tests.txt" 2>&1
rc=$?
if [ "${ATTN_AUTOTUNE:-0}" = 1 ]; then
  PRIMUS_CUDNN_AUTOTUNE=1 PRIMUS_ATTENTION_TEST_PERF_ONLY=1 "$bin/primus_gpu_tests" attention \
    >"$out/gpu_tests_autotune.txt" 2>&1
fi
python3 tools/device/attention_vs_torch.py --ours "$out/gpu_tests.txt" --json "$out/torch.json" >"$out/torch.txt" 2>&1
echo "== failures / exceptions (rc $rc)"
grep -E "FAIL|exception|crashed" "$out/gpu_tests.txt" | cut -c1-1500 | head -40
echo "== cudnn error log (head)"
head -c 2500 "$out/cudnn_errors.log" 2>/dev/null
echo; echo "== autotune pass"
grep -E "autotune|perf " "$out/gpu_tests_autotune.txt" 2>/dev/null | cut -c1-400
echo "== benchmark path (primus benchmark attention)"
grep -E "^\| " "$out/gpu_tests.txt" | cut -c1-200
echo "== summary"
grep -E "cases,|perf |bench " "$out/gpu_tests.txt" | cut -c1-200
echo "== torch"
cat "$out/torch.txt"
exit $rc
