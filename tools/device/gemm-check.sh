#!/usr/bin/env bash
# One device call for the gemm family: GPU tests vs fp64 references, the tuned GEMMs of one training step
# (gemm-dense --tune), the 8192^3 ceiling, and torch on the same shapes, same timing method.
# Usage: tools/device/gemm-check.sh BENCH_BIN TEST_CMD...
#   BENCH_BIN: a binary that runs `BENCH_BIN benchmark gemm|gemm-dense ...` (build-*/primus)
#   TEST_CMD : the GPU test command (e.g. build-*/tests/primus_gpu_tests)
# Env: MODEL (llama3.1_8B) MBS (1) SEQ (8192) DUR (0.5 s per shape) CANDS (24) ITERS (12).
set -uo pipefail
bench=$1
shift
out=${OUT:-/tmp/gemm-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
model=${MODEL:-llama3.1_8B} mbs=${MBS:-1} seq=${SEQ:-8192} dur=${DUR:-0.5} cands=${CANDS:-24} iters=${ITERS:-12}
log=$out/bench.txt
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
} 2>&1 | tee "$out/gemm_gpu_tests.txt"
echo "== gpu tests" | tee -a "$out/gemm_gpu_tests.txt"
timeout 90 "$@" gemm 2>&1 | tee -a "$out/gemm_gpu_tests.txt" | tail -n 80
echo "gpu tests exit: ${PIPESTATUS[0]}" | tee -a "$out/gemm_gpu_tests.txt"
echo "== gemm-dense $model mbs $mbs seq $seq --tune" | tee "$log"
timeout 110 "$bench" benchmark gemm-dense --model "$model" --mbs "$mbs" --seq-length "$seq" --duration "$dur" \
  --tune --tune-candidates "$cands" --tune-iters "$iters" --tuning-file "$out/gemm_tuning.json" \
  --output-file "$out/gemm_dense.jsonl" >>"$log" 2>&1
echo "gemm-dense exit: $?" | tee -a "$log"
echo "== gemm 8192^3 --tune" | tee -a "$log"
timeout 25 "$bench" benchmark gemm --M 8192 --N 8192 --K 8192 --duration 2 --tune --tune-candidates "$cands" \
  --tune-iters "$iters" --output-file "$out/gemm_8192.jsonl" >>"$log" 2>&1
echo "gemm exit: $?" | tee -a "$log"
echo "== torch" | tee -a "$log"
timeout 75 python3 "$(dirname "$0")/gemm_vs_torch.py" --ours "$out/gemm_8192.jsonl" "$out/gemm_dense.jsonl" \
  --duration "$dur" --out "$out/gemm_vs_torch.md" 2>&1 | tee -a "$log"
grep -E "tune |gemm-dense:|error" "$log" | tail -n 40
