#!/usr/bin/env bash
# The straggler measure on two GPUs (nvidia-h200-x2), one call:
#   (a) primus_gpu_tests step_marks (the device marks: own work excludes the waits);
#   (b) DDP (overlapped gradient reduction) and FSDP on the llama3.2-1B shape cut to 4 layers, 40 steps,
#       straggler check every 10: once as is (no straggler may be flagged) and once with rank 1's GEMMs
#       leaving 66 SMs idle (PRIMUS_INJECT_SLOW_GPU=1:66): rank 1 must be flagged.
# Usage (repo root on the GPU machine): tools/device/straggler-check.sh BIN_DIR
set -uo pipefail
bin=${1:?usage: straggler-check.sh BIN_DIR}
final=${OUT:-/tmp/straggler}
work=/tmp/straggler-work
rm -rf "$work" /tmp/st-ws; mkdir -p "$work" "$final"
export NCCL_NVLS_ENABLE=0 PRIMUS_WORKSPACE=/tmp/st-ws PRIMUS_USER=dev PRIMUS_HOME=$PWD
summary=$work/summary.txt
trap 'cp "$summary" "$final"/; tar czf "$final/straggler.tgz" -C "$work" .' EXIT
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | tee "$summary"
date -u +%Y-%m-%dT%H:%M:%SZ | tee -a "$summary"

if [ -x "$bin/primus_gpu_tests" ]; then
  "$bin/primus_gpu_tests" step_marks > "$work/gpu_tests.txt" 2>&1
  echo "== gpu_tests rc=$?" | tee -a "$summary"
  grep -E "step_marks|passed|failed" "$work/gpu_tests.txt" | tail -6 | tee -a "$summary"
fi

common=(--config configs/examples/megatron/bench_llama3.2-1B-shape.yaml --num_layers 4 --train_iters 40
  --global_batch_size 16 --log_interval 10)
for mode in ddp fsdp; do
  extra=(--overlap_grad_reduce true)
  [ $mode = fsdp ] && extra=(--use_torch_fsdp2 true)
  for slow in none 1:66; do
    name=${mode}_slow_${slow/:/_}
    env $([ "$slow" != none ] && echo PRIMUS_INJECT_SLOW_GPU=$slow) PRIMUS_EXP_NAME=$name timeout 180 \
      "$bin/primus" launch --nproc-per-node 2 --master-port 0 -- train pretrain --device cuda "${common[@]}" \
      "${extra[@]}" > "$work/$name.log" 2>&1
    echo "== $name rc=$?: $(grep -E "done:" "$work/$name.log" | tail -1)" | tee -a "$summary"
    grep -E "straggler" "$work/$name.log" | tail -4 | tee -a "$summary"
    cp "/tmp/st-ws/bench/dev/$name/events.jsonl" "$work/$name.events.jsonl" 2>/dev/null
    for hb in /tmp/st-ws/bench/dev/$name/heartbeat/*; do  # each rank's own-work median at the end
      echo "   $(basename "$hb"): $(python3 -c 'import json,sys; b=json.load(open(sys.argv[1])); print("own work", round(b.get("window_ms", 0), 1), "ms")' "$hb" 2>/dev/null)" | tee -a "$summary"
    done
    n=$(grep -c '"straggler"' "$work/$name.events.jsonl" 2>/dev/null)
    echo "   straggler events: ${n:-0}" | tee -a "$summary"
  done
done
