#!/usr/bin/env bash
# The precision-aware optimizer (bf16 Adam moments; docs/configuration.md) on one GPU, one call:
#   gpu:   primus_gpu_tests --quick optimizer_bf16_moments optimizer optimizer_remainder row_sparse_grad
#          embedding (the bf16-moment kernels against the CPU reference and bitwise against each other, and
#          the f32-moment families they share templates with)
#   track: a micro Llama, 40 steps on mock data: bf16 moments on the GPU against bf16 moments on the CPU
#          reference (compare_tracking.py, 2% per step) and against f32 moments on the GPU
#   mem:   the llama3.2-1B shape's benchmark (1.5 B parameters, untied): peak memory and step time with f32
#          and with bf16 moments (20 steps each)
# Usage: tools/device/precision-aware-check.sh BIN_DIR   (BIN_DIR/primus and BIN_DIR/primus_gpu_tests)
# PARTS="gpu track mem" selects. Logs in $OUT (default /tmp/precision-aware).
set -uo pipefail
bin=${1:?usage: precision-aware-check.sh BIN_DIR}
out=${OUT:-/tmp/precision-aware}
parts=" ${PARTS:-gpu track mem} "
mkdir -p "$out"
ws=/tmp/precision-aware-ws
rm -rf "$ws"
status=0
bf16m=(--use_precision_aware_optimizer true --exp_avg_dtype bf16 --exp_avg_sq_dtype bf16)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
date -u +%Y-%m-%dT%H:%M:%SZ
if [[ "$parts" == *" gpu "* ]]; then
  timeout 300 "$bin/primus_gpu_tests" --quick optimizer_bf16_moments optimizer optimizer_remainder \
    row_sparse_grad embedding >"$out/gpu_tests.txt" 2>&1
  rc=$?
  echo "== gpu tests: rc $rc"
  grep -E "bf16 moments|checked cases|GB/s" "$out/gpu_tests.txt" | grep -E "bf16|checked" | cut -c1-200
  grep -E "FAIL|MISMATCH" "$out/gpu_tests.txt" | head -20
  [ $rc -eq 0 ] || status=1
fi
run() {  # name device extra...
  local name=$1 dev=$2
  shift 2
  PRIMUS_WORKSPACE=$ws PRIMUS_EXP_NAME=$name PRIMUS_USER=dev OMP_NUM_THREADS=16 timeout 300 \
    "$bin/primus" train pretrain "$@" --device "$dev" >"$out/$name.log" 2>&1
  echo "== $name rc=$?"
  grep -E "^optimizer:|^done:|parameter state|memory at peak" "$out/$name.log" | cut -c1-220
}
jsonl() { find "$ws" -path "*/$1/metrics.jsonl" | head -1; }
if [[ "$parts" == *" track "* ]]; then
  model=(--config tests/e2e/configs/fortunes_micro_llama.yaml --mock_data true --hidden_size 256
         --num_attention_heads 4 --num_query_groups 2 --ffn_hidden_size 512 --seq_length 128
         --train_iters 40 --lr_warmup_iters 4 --eval_interval 0 --log_interval 10 --adam_beta2 0.95)
  run track_bf16_cpu cpu "${model[@]}" "${bf16m[@]}"
  run track_bf16_cuda cuda "${model[@]}" "${bf16m[@]}"
  run track_f32_cuda cuda "${model[@]}"
  python3 tools/device/compare_tracking.py "$(jsonl track_bf16_cpu)" "$(jsonl track_bf16_cuda)" --tol 0.02 |
    tail -1 | sed "s/^/bf16 moments GPU vs CPU: /"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  python3 tools/device/compare_tracking.py "$(jsonl track_f32_cuda)" "$(jsonl track_bf16_cuda)" --tol 0.02 |
    tail -1 | sed "s/^/GPU bf16 vs f32 moments: /"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [[ "$parts" == *" mem "* ]]; then
  big=(--config configs/examples/megatron/bench_llama3.2-1B-shape.yaml --train_iters 20)
  run mem_f32 cuda "${big[@]}"
  run mem_bf16 cuda "${big[@]}" "${bf16m[@]}"
fi
echo "precision-aware-check: $([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
