#!/usr/bin/env bash
# Follow-up checks on nvidia-h200-x2 after ddp-check.sh: DDP scaling of the 1B shape with each gradient-reduction
# variant (f32 all-reduce, bf16 all-reduce, ZeRO-1 reduce-scatter + all-gather), the presets the H100 smoke run
# did not reach, and llama3.1_405B (one layer; its embeddings alone need ~76 GB with AdamW state, so FSDP on 2 GPUs).
# Usage (repo root on the GPU machine): NCCL_NVLS_ENABLE=0 tools/device/x2-extra.sh BIN_DIR
set -uo pipefail
bin=${1:?usage: x2-extra.sh BIN_DIR}
final=${OUT:-/tmp/x2-extra}
work=/tmp/x2-extra-work
rm -rf "$work"; mkdir -p "$work" "$final"
export NCCL_NVLS_ENABLE=0 PRIMUS_WORKSPACE=/tmp/x2-ws PRIMUS_USER=dev PRIMUS_HOME=$PWD
summary=$work/summary.txt
trap 'cp "$summary" "$final"/; tar czf "$final/x2-extra.tgz" -C "$work" .' EXIT
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$summary"
date -u +%Y-%m-%dT%H:%M:%SZ | tee -a "$summary"

one_b=(--config configs/examples/megatron/bench_llama3.2-1B-shape.yaml --device cuda --train_iters 20)
scale() {  # name nproc args...
  local name=$1 n=$2
  shift 2
  if [ "$n" -eq 1 ]; then
    PRIMUS_EXP_NAME=$name timeout 120 "$bin/primus" train pretrain "${one_b[@]}" "$@" > "$work/$name.log" 2>&1
  else
    PRIMUS_EXP_NAME=$name timeout 120 "$bin/primus" launch --nproc-per-node "$n" --master-port 0 -- train pretrain \
      "${one_b[@]}" "$@" > "$work/$name.log" 2>&1
  fi
  echo "== $name rc=$?: $(grep -E "done:" "$work/$name.log" | tail -1)" | tee -a "$summary"
}
scale ddp1b_1gpu 1 --global_batch_size 8
scale ddp1b_f32 2 --global_batch_size 16 --overlap_grad_reduce true
scale ddp1b_bf16 2 --global_batch_size 16 --overlap_grad_reduce true --grad_reduce_in_bf16 true
scale ddp1b_zero1 2 --global_batch_size 16 --overlap_grad_reduce true --use_distributed_optimizer true \
  --overlap_param_gather true
python3 tools/device/scaling_ratio.py "$work" ddp1b_1gpu ddp1b_f32 ddp1b_bf16 ddp1b_zero1 | tee -a "$summary"

echo "== presets on one GPU" | tee -a "$summary"
PRESETS="qwen2.5_72B qwen3_0.6B qwen3_8B" timeout 150 bash tools/device/presets-smoke.sh "$bin" 2>&1 | tee -a "$summary"
echo "== llama3.1_405B, 1 layer, FSDP over 2 GPUs" | tee -a "$summary"
PRESETS=llama3.1_405B NPROC=2 SMOKE_LAYERS=1 timeout 150 bash tools/device/presets-smoke.sh "$bin" 2>&1 |
  tee -a "$summary"
