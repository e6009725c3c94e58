#!/usr/bin/env bash
# Preflight on the lent GPU machine: `primus preflight --quick --perf-test` (must pass in <= 60 s on a healthy
# H100), then `--smoke` (each GPU in its own process). Reports land in $OUT/preflight.
# Usage (repo root on the GPU machine): tools/device/preflight-check.sh [PRIMUS_BINARY]
set -uo pipefail
bin=${1:-build-safe-cuda/primus}
out=${OUT:-/tmp/stability-out}/preflight
mkdir -p "$out"
t0=$(date +%s%N)
"$bin" preflight --quick --perf-test --output-dir "$out" > "$out/quick.log" 2>&1
rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 )); secs=$(awk -v m="$ms" 'BEGIN { printf "%.1f", m / 1000 }')
echo "== preflight --quick --perf-test: exit $rc in ${secs} s (limit 60 s)"
grep -E "perf\.|gpu.identity|gpu.clocks|FAIL|fail\]|warn\]|PASSED|FAILED" "$out/quick.log" | head -40
awk -v s="$secs" 'BEGIN { exit !(s <= 60) }' && echo "== quick within 60 s: yes" || echo "== quick within 60 s: NO"
"$bin" preflight --smoke --output-dir "$out/smoke" > "$out/smoke.log" 2>&1
echo "== preflight --smoke: exit $?"; grep -E "smoke|PASSED|FAILED" "$out/smoke.log" | head -10
# The documented exit code on a failure: an impossible threshold must fail with 3 and name the GPU.
printf 'gemm_tflops_min: 100000\n' > "$out/impossible.yaml"
"$bin" preflight --quick --perf-test --thresholds "$out/impossible.yaml" --output-dir "$out/impossible" \
  > "$out/impossible.log" 2>&1
echo "== impossible threshold: exit $? (expect 3); failing list:"; cat "$out/impossible/failing.txt"
exit $rc
