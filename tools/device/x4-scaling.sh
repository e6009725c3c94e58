#!/usr/bin/env bash
# Issue #9's points that four GPUs allow, in one short call (device budget): the distributed-optimizer (ZeRO-1)
# DDP run of the llama3.2-1B shape on 1, 2 and 4 GPUs (tokens/s/GPU, scaling efficiency), FSDP with selective
# recompute on full Llama-3.1-8B at T 8192 on 2 and 4 GPUs, and the bus bandwidth of all-reduce and all-to-all
# over 4 GPUs from 1 MB to 1 GB.
# Usage (repo root on the GPU machine): tools/device/x4-scaling.sh BIN_DIR
set -uo pipefail
bin=${1:?usage: x4-scaling.sh BIN_DIR}
final=${OUT:-/tmp/x4}
work=/tmp/x4-work
rm -rf "$work" /tmp/x4-ws; mkdir -p "$work" "$final"
export NCCL_NVLS_ENABLE=0 PRIMUS_WORKSPACE=/tmp/x4-ws PRIMUS_USER=dev PRIMUS_HOME=$PWD
summary=$work/summary.txt
trap 'cp "$summary" "$final"/; tar czf "$final/x4.tgz" -C "$work" .' EXIT
nvidia-smi --query-gpu=index,name --format=csv,noheader | tee "$summary"
date -u +%Y-%m-%dT%H:%M:%SZ | tee -a "$summary"
one_b=(--config configs/examples/megatron/bench_llama3.2-1B-shape.yaml --device cuda --train_iters 12
       --use_distributed_optimizer true --overlap_grad_reduce true --overlap_param_gather true)
for n in 1 2 4; do
  if [ "$n" -eq 1 ]; then
    PRIMUS_EXP_NAME=z1_$n timeout 60 "$bin/primus" train pretrain "${one_b[@]}" --global_batch_size 8 \
      > "$work/z1_$n.log" 2>&1
  else
    PRIMUS_EXP_NAME=z1_$n timeout 60 "$bin/primus" launch --nproc-per-node "$n" --master-port 0 -- train pretrain \
      "${one_b[@]}" --global_batch_size $((8 * n)) > "$work/z1_$n.log" 2>&1
  fi
  echo "== zero1 $n GPU(s) rc=$?: $(grep -E "done:" "$work/z1_$n.log" | tail -1)" | tee -a "$summary"
done
python3 "$(dirname "$0")/scaling_ratio.py" "$work" z1_1 z1_2 z1_4 | tee -a "$summary"
for n in 2 4; do
  PRIMUS_EXP_NAME=fsdp8b_$n timeout 150 "$bin/primus" launch --nproc-per-node "$n" --master-port 0 -- train pretrain \
    --config configs/examples/megatron/llama3.1_8B-pretrain.yaml --device cuda --train_iters 8 --micro_batch_size 1 \
    --global_batch_size "$n" --use_torch_fsdp2 true --recompute_granularity selective --recompute_method null \
    --recompute_num_layers null > "$work/fsdp8b_$n.log" 2>&1
  echo "== fsdp8b selective $n GPUs rc=$?: $(grep -E "done:" "$work/fsdp8b_$n.log" | tail -1)" | tee -a "$summary"
  grep -E "iter +8/|peak mem|out of memory|ERROR" "$work/fsdp8b_$n.log" | tail -3 | tee -a "$summary"
done
timeout 60 "$bin/primus" launch --nproc-per-node 4 --master-port 0 -- benchmark comm --backend nccl \
  --ops all_reduce,all_to_all --bytes 1M,16M,128M,1G --warmup 2 --iters 10 > "$work/comm4.txt" 2>&1
echo "== comm bench 4 GPUs rc=$?" | tee -a "$summary"
grep -vE "^\s*$" "$work/comm4.txt" | tail -14 | tee -a "$summary"
