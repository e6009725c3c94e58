#!/usr/bin/env bash
# One device call for the gemm family: GPU tests vs fp64 references, the tuned GEMMs of one Llama-3.1-8B training
# step (gemm-dense --tune) at micro-batch 1 and 2 (seq 8192), the 8192^3 ceiling, and torch on the same shapes with
# the same timing method. Stages run most-important first inside a time budget; at most 8 files land in $OUT.
# Usage: tools/device/gemm-check.sh BENCH_BIN TEST_CMD...
#   BENCH_BIN: runs `BENCH_BIN benchmark gemm|gemm-dense ...` (build-*/primus)
#   TEST_CMD : the GPU test command (e.g. build-*/tests/primus_gpu_tests)
# Env: MODEL (llama3.1_8B) SEQ (8192) DUR (0.5 s per shape) CANDS (24) ITERS (12) BUDGET (285 s)
set -uo pipefail
bench=$1
shift
out=${OUT:-/tmp/gemm-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
model=${MODEL:-llama3.1_8B} seq=${SEQ:-8192} dur=${DUR:-0.5} cands=${CANDS:-24} iters=${ITERS:-12}
budget=${BUDGET:-285}
here=$(dirname "$0")
log=$out/bench.txt
left() { echo $((budget - SECONDS)); }
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
} 2>&1 | tee "$out/gemm_gpu_tests.txt"
echo "== gpu tests" | tee -a "$out/gemm_gpu_tests.txt"
timeout 70 "$@" gemm 2>&1 | tee -a "$out/gemm_gpu_tests.txt" | tail -n 60
echo "gpu tests exit: ${PIPESTATUS[0]} at ${SECONDS}s" | tee -a "$out/gemm_gpu_tests.txt"

dense() {  # $1 = micro-batch size, $2 = time limit
  echo "== gemm-dense $model mbs $1 seq $seq --tune (limit $2 s)" | tee -a "$log"
  timeout "$2" "$bench" benchmark gemm-dense --model "$model" --mbs "$1" --seq-length "$seq" --duration "$dur" \
    --tune --tune-candidates "$cands" --tune-iters "$iters" --tuning-file "$out/gemm_tuning.json" \
    --output-file "$out/gemm_dense_mbs$1.jsonl" >>"$log" 2>&1
  echo "gemm-dense mbs $1 exit: $? at ${SECONDS}s" | tee -a "$log"
}
dense 1 100
echo "== gemm 8192^3 --tune" | tee -a "$log"
timeout 25 "$bench" benchmark gemm --M 8192 --N 8192 --K 8192 --duration 2 --tune --tune-candidates "$cands" \
  --tune-iters "$iters" --output-file "$out/gemm_8192.jsonl" >>"$log" 2>&1
echo "gemm exit: $? at ${SECONDS}s" | tee -a "$log"
echo "== torch (mbs 1)" | tee -a "$log"
timeout $(( $(left) < 70 ? $(left) : 70 )) python3 "$here/gemm_vs_torch.py" --ours "$out/gemm_8192.jsonl" \
  "$out/gemm_dense_mbs1.jsonl" --duration "$dur" --out "$out/gemm_vs_torch.md" --jsonl /tmp/gemm_vs_torch.jsonl \
  >>"$log" 2>&1
echo "torch exit: $? at ${SECONDS}s" | tee -a "$log"
if [ "$(left)" -gt 100 ]; then
  dense 2 $(( $(left) - 45 ))
  echo "== torch (mbs 2)" | tee -a "$log"
  timeout $(( $(left) - 3 )) python3 "$here/gemm_vs_torch.py" --ours "$out/gemm_dense_mbs2.jsonl" --duration "$dur" \
    --out "$out/gemm_vs_torch_mbs2.md" --jsonl /tmp/gemm_vs_torch_mbs2.jsonl >>"$log" 2>&1
  echo "torch mbs 2 exit: $? at ${SECONDS}s" | tee -a "$log"
fi
grep -E "^tune |gemm-dense:|error|exit" "$log" | tail -n 50
cat "$out/gemm_vs_torch.md"
