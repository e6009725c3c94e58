#!/usr/bin/env bash
# Issue #7 on nvidia-h200-x2, one call:
#   (a) DDP on the llama3.2-1B shape: 1 GPU vs 2 GPUs (f32 and ZeRO-1), then a profiled 2-GPU run (rank 0,
#       steps 9-10) whose GPU timeline shows the exposed communication;
#   (b) FSDP on full Llama-3.1-8B, T 8192, micro-batch 1 per GPU, with recompute full / selective / none:
#       tokens/s/GPU, MFU and peak memory per GPU;
#   (c) PyTorch FSDP2 on the same model and GPUs, with and without activation checkpointing.
#   PARTS="ddp fsdp torch" (the default) selects the parts; FSDP_RECOMPUTE="full selective null" the FSDP runs. The DDP part also runs with PRIMUS_NCCL_BLOCKING=1
#   (blocking communicators) to price the non-blocking mode's host-side settle polling.
# Usage (repo root on the GPU machine): tools/device/x2-fsdp-ddp.sh BIN_DIR
set -uo pipefail
bin=${1:?usage: x2-fsdp-ddp.sh BIN_DIR}
final=${OUT:-/tmp/x2-fsdp}
work=/tmp/x2-fsdp-work
rm -rf "$work" /tmp/x2-ws; mkdir -p "$work" "$final"
export NCCL_NVLS_ENABLE=0 PRIMUS_WORKSPACE=/tmp/x2-ws PRIMUS_USER=dev PRIMUS_HOME=$PWD
summary=$work/summary.txt
trap 'cp "$summary" "$final"/; tar czf "$final/x2-fsdp.tgz" -C "$work" .' EXIT
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | tee "$summary"
date -u +%Y-%m-%dT%H:%M:%SZ | tee -a "$summary"
source "$(dirname "$0")/find-cupti.sh" | tee -a "$summary"

launch() {  # name nproc limit_s args...
  local name=$1 n=$2 limit=$3
  shift 3
  if [ "$n" -eq 1 ]; then
    PRIMUS_EXP_NAME=$name timeout "$limit" "$bin/primus" train pretrain --device cuda "$@" > "$work/$name.log" 2>&1
  else
    PRIMUS_EXP_NAME=$name timeout "$limit" "$bin/primus" launch --nproc-per-node "$n" --master-port 0 -- \
      train pretrain --device cuda "$@" > "$work/$name.log" 2>&1
  fi
  echo "== $name rc=$?: $(grep -E "done:" "$work/$name.log" | tail -1)" | tee -a "$summary"
}

# (a) DDP, 1B shape
if [[ " ${PARTS:-ddp fsdp torch} " == *" ddp "* ]]; then
one_b=(--config configs/examples/megatron/bench_llama3.2-1B-shape.yaml --train_iters 20)
launch ddp1b_1gpu 1 120 "${one_b[@]}" --global_batch_size 8
launch ddp1b_f32 2 120 "${one_b[@]}" --global_batch_size 16 --overlap_grad_reduce true
PRIMUS_NCCL_BLOCKING=1 launch ddp1b_f32_blocking 2 120 "${one_b[@]}" --global_batch_size 16 --overlap_grad_reduce true
launch ddp1b_zero1 2 120 "${one_b[@]}" --global_batch_size 16 --overlap_grad_reduce true \
  --use_distributed_optimizer true --overlap_param_gather true
for v in nonblocking blocking; do
  name=ddp1b_f32_prof_$v
  PRIMUS_NCCL_BLOCKING=$([ $v = blocking ] && echo 1 || echo 0) launch $name 2 120 "${one_b[@]}" --train_iters 12 \
    --global_batch_size 16 --overlap_grad_reduce true --profile true --profile_step_start 9 --profile_step_end 10
  tr=$PRIMUS_WORKSPACE/bench/dev/$name/trace/rank0.json
  [ -f "$tr" ] && "$bin/primus" report timeline "$tr" > "$work/$name.timeline.txt" 2>&1 && cp "$tr" "$work/$name.json"
  echo "== DDP 2-GPU timeline ($v NCCL), rank 0, 2 steps" | tee -a "$summary"
  sed -n '1,10p;/Longest idle/,$p' "$work/$name.timeline.txt" 2>/dev/null | tee -a "$summary"
done
python3 tools/device/scaling_ratio.py "$work" ddp1b_1gpu ddp1b_f32 ddp1b_f32_blocking ddp1b_zero1 | tee -a "$summary"
fi

# (b) FSDP, Llama-3.1-8B, T 8192
[[ " ${PARTS:-ddp fsdp torch} " == *" fsdp "* ]] && for rc in ${FSDP_RECOMPUTE:-full selective null}; do  # null: none
  launch "fsdp8b_$rc" 2 240 --config configs/examples/megatron/llama3.1_8B-pretrain.yaml --train_iters 10 \
    --micro_batch_size 1 --global_batch_size 2 --use_torch_fsdp2 true --recompute_granularity "$rc" \
    $([ "$rc" != full ] && echo --recompute_method null --recompute_num_layers null)
  grep -E "iter +10/|peak mem|out of memory|ERROR" "$work/fsdp8b_$rc.log" | tail -3 | tee -a "$summary"
done

# (c) PyTorch FSDP2, same model and GPUs
[[ " ${PARTS:-ddp fsdp torch} " == *" torch "* ]] && for ck in full none; do
  echo "== torch FSDP2, activation checkpointing: $ck" | tee -a "$summary"
  CKPT=$ck timeout 300 torchrun --standalone --nproc-per-node 2 tools/device/fsdp2_llama8b.py \
    > "$work/torch_fsdp2_$ck.log" 2>&1
  echo "rc=$?" | tee -a "$summary"
  grep -E '^\{|Error|error' "$work/torch_fsdp2_$ck.log" | tail -3 | tee -a "$summary"
done
