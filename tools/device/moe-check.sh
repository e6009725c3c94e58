#!/usr/bin/env bash
# MoE op families (moe_router, moe_permute, moe_force_balance) on the GPU against the CPU reference, one process per family,
# then the small cases again under compute-sanitizer memcheck when the toolkit has it. One device call.
# Usage: tools/device/moe-check.sh [GPU_TEST_BIN] [SECONDS_PER_FAMILY]
set -uo pipefail
bin=${1:-build-moe/tests/primus_gpu_tests}
budget=${2:-150}
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv,noheader || true
date -u
rc=0
for fam in moe_router moe_permute moe_force_balance; do
  start=$SECONDS
  timeout "$budget" "$bin" "$fam" >"$out/gpu_$fam.txt" 2>&1
  r=$?
  echo "moe-check: $fam rc=$r ($((SECONDS - start)) s)"
  [ "$r" -ne 0 ] && rc=1
done
echo "== failures"
grep -hE "FAIL|exception|error" "$out"/gpu_moe_*.txt | cut -c1-240 | head -40
echo "== timed"
grep -h "GB/s" "$out"/gpu_moe_*.txt | cut -c1-170
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$sanitizer" ]; then
  for fam in moe_router moe_permute moe_force_balance; do
    timeout 120 "$sanitizer" --tool memcheck --error-exitcode 9 "$bin" --quick "$fam" >"$out/memcheck_$fam.txt" 2>&1
    r=$?
    echo "moe-check: memcheck $fam rc=$r"
    grep -E "ERROR SUMMARY|Invalid|out of bounds" "$out/memcheck_$fam.txt" | head -5
    [ "$r" -ne 0 ] && [ "$r" -ne 124 ] && rc=1
  done
else
  echo "moe-check: no compute-sanitizer on this machine"
fi
exit $rc
