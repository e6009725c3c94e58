#!/usr/bin/env bash
# TensorBoard event files on the GPU (issue #17 item 4, docs/metrics.md): a 30-step run of the fortunes byte
# model on the GPU with every TensorBoard switch on (validation every 10 steps, queue of 5 records), then
# tools/device/tensorboard_check.py reads the event files with the official `tensorboard` package
# (EventAccumulator) and with an independent pure-Python reader (both CRCs) and compares every scalar with
# metrics.jsonl. Exit 0: all equal and read by the official package; 1: a mismatch or a failed run; 4: equal,
# but the tensorboard package is missing on the machine (only the own reader checked).
# Usage (repo root on the GPU machine): tools/device/tensorboard-check.sh [PRIMUS_BINARY]
set -uo pipefail
bin=${1:-build/primus}
final=${OUT:-/tmp/tensorboard-check}
ws=/tmp/tb-check-ws
rm -rf "$ws"; mkdir -p "$final"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
date -u +%Y-%m-%dT%H:%M:%SZ
PRIMUS_WORKSPACE=$ws PRIMUS_EXP_NAME=tb_check PRIMUS_USER=dev timeout 300 "$bin" train pretrain \
  --config configs/examples/megatron/tiny_llama-fortunes-bytes.yaml --device cuda --train_iters 30 --lr_warmup_iters 5 \
  --eval_interval 10 --eval_iters 2 --log_interval 10 --disable_tensorboard false --tensorboard_log_interval 1 \
  --tensorboard_queue_size 5 --log_timers_to_tensorboard true --log_throughput true \
  --log_memory_to_tensorboard true --log_validation_ppl_to_tensorboard true --log_batch_size_to_tensorboard true \
  --log_world_size_to_tensorboard true > "$final/train.log" 2>&1
rc=$?
echo "== train rc=$rc: $(grep -E "TensorBoard:|done:" "$final/train.log" | tr '\n' ' ')"
[ $rc -eq 0 ] || { tail -20 "$final/train.log"; exit 1; }
run_dir=$(dirname "$(find "$ws" -name metrics.jsonl | head -1)")
cp -r "$run_dir/tensorboard" "$run_dir/metrics.jsonl" "$final"/
python3 tools/device/tensorboard_check.py "$run_dir" | tee "$final/check.txt"
rc=${PIPESTATUS[0]}
echo "== tensorboard_check rc=$rc"
exit $rc
