#!/usr/bin/env bash
# One device call for the gemm family: GPU tests vs fp64 references, the 8192^3 ceiling, and for each micro-batch
# size the tuned GEMMs of one Llama training step (gemm-dense --tune) followed by torch on the same shapes with
# the same timing method. Stages run most-important first inside a time budget; at most 8 files land in $OUT.
# Usage: tools/device/gemm-check.sh BENCH_BIN TEST_CMD...
#   BENCH_BIN: runs `BENCH_BIN benchmark gemm|gemm-dense ...` (build-*/primus)
#   TEST_CMD : the GPU test command (e.g. build-*/tests/primus_gpu_tests)
# Env: MODEL (llama3.1_8B) SEQ (8192) MBS_LIST ("1"; each mbs adds ~110 s) DUR (0.5 s per shape) CANDS (24)
#      ITERS (12) QUICK (1: skip the model-size test cases) BUDGET (285 s)
set -uo pipefail
bench=$1
shift
out=${OUT:-/tmp/gemm-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
model=${MODEL:-llama3.1_8B} seq=${SEQ:-8192} dur=${DUR:-0.5} cands=${CANDS:-24} iters=${ITERS:-12}
mbs_list=${MBS_LIST:-1} budget=${BUDGET:-285}
here=$(dirname "$0")
log=$out/bench.txt
left() { echo $((budget - SECONDS)); }
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
} 2>&1 | tee "$out/gemm_gpu_tests.txt"
echo "== gpu tests" | tee -a "$out/gemm_gpu_tests.txt"
timeout 70 "$@" ${QUICK:+--quick} gemm 2>&1 | tee -a "$out/gemm_gpu_tests.txt" | tail -n 40
echo "gpu tests exit: ${PIPESTATUS[0]} at ${SECONDS}s" | tee -a "$out/gemm_gpu_tests.txt"

echo "== gemm 8192^3 --tune" | tee -a "$log"
timeout 25 "$bench" benchmark gemm --M 8192 --N 8192 --K 8192 --duration 2 --tune --tune-candidates "$cands" \
  --tune-iters "$iters" --output-file "$out/gemm_8192.jsonl" >>"$log" 2>&1
echo "gemm exit: $? at ${SECONDS}s" | tee -a "$log"
first=1
for mbs in $mbs_list; do
  [ "$(left)" -gt 60 ] || break
  echo "== gemm-dense $model mbs $mbs seq $seq --tune (limit $(( $(left) - 35 )) s)" | tee -a "$log"
  timeout $(( $(left) - 35 )) "$bench" benchmark gemm-dense --model "$model" --mbs "$mbs" --seq-length "$seq" \
    --duration "$dur" --tune --tune-candidates "$cands" --tune-iters "$iters" --tuning-file "$out/gemm_tuning.json" \
    --output-file "$out/gemm_dense_mbs$mbs.jsonl" >>"$log" 2>&1
  echo "gemm-dense mbs $mbs exit: $? at ${SECONDS}s" | tee -a "$log"
  ours=("$out/gemm_dense_mbs$mbs.jsonl")
  [ -n "$first" ] && ours=("$out/gemm_8192.jsonl" "${ours[@]}")
  first=
  echo "== torch (mbs $mbs)" | tee -a "$log"
  timeout $(( $(left) - 2 )) python3 "$here/gemm_vs_torch.py" --ours "${ours[@]}" --duration "$dur" \
    --out "$out/gemm_vs_torch_mbs$mbs.md" --jsonl "/tmp/gemm_vs_torch_mbs$mbs.jsonl" >>"$log" 2>&1
  echo "torch mbs $mbs exit: $? at ${SECONDS}s" | tee -a "$log"
done
grep -E "^tune |gemm-dense:|error|exit" "$log" | tail -n 50
cat "$out"/gemm_vs_torch_mbs*.md
