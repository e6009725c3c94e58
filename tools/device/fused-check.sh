#!/usr/bin/env bash
# GPU tests of the memory-bound op families, one process per family (a device fault in one cannot hide the
# others), then the PyTorch anchor (tools/device/fused_vs_torch.py), inside one time budget.
# Usage: tools/device/fused-check.sh BIN [TEST_SECONDS] [TORCH_SECONDS] [extra test args...]
set -uo pipefail
bin=${1:?usage: fused-check.sh BIN [TEST_SECONDS] [TORCH_SECONDS]}
test_budget=${2:-170}
torch_budget=${3:-110}
shift 3 2>/dev/null || shift $#
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv,noheader || true
date -u
rc=0
start=$SECONDS
for fam in norm rope activation embedding loss optimizer elementwise; do
  left=$((test_budget - (SECONDS - start)))
  if [ "$left" -le 5 ]; then echo "fused-check: no time left for $fam"; rc=1; continue; fi
  timeout "$left" "$bin" "$@" "$fam" >"$out/gpu_$fam.txt" 2>&1
  r=$?
  echo "fused-check: $fam rc=$r ($((SECONDS - start)) s)"
  [ "$r" -ne 0 ] && rc=1
done
cat "$out"/gpu_*.txt | grep -E "^(norm|rope|activation|embedding|loss|optimizer|elementwise) " >"$out/gpu_table.txt"
PYTHONUNBUFFERED=1 timeout "$torch_budget" python3 tools/device/fused_vs_torch.py --budget $((torch_budget - 45)) \
  >"$out/torch.txt" 2>&1
echo "fused-check: torch rc=$?"
echo "== failures"
grep -E "FAIL|exception" "$out/gpu_table.txt" | cut -c1-220
grep -hE "cases,|crashed|error|what" "$out"/gpu_*.txt | cut -c1-300 | head -20
echo "== timed"
grep "GB/s" "$out/gpu_table.txt" | cut -c1-150
echo "== torch"
grep -vi warn "$out/torch.txt" | tail -40 | cut -c1-200
exit $rc
