#!/usr/bin/env bash
# One device call: our trainer on the anchor's workloads and the PyTorch anchor, side by side.
# Usage (from the repo root on the GPU machine): tools/device/perf-run.sh BUILD_DIR [--no-torch]
# Needs: BUILD_DIR/primus (built here with CUDA), .perf/torch_baseline.py and .perf/fortunes (carried).
set -uo pipefail
build=${1:-build-cuda}
torch=1
[ "${2:-}" = "--no-torch" ] && torch=0
out=${OUT:-/tmp/perf-out}
mkdir -p "$out"
export PRIMUS_WORKSPACE=/tmp/primus-ws PRIMUS_QUICKSTART_DATA=$PWD/.perf/fortunes PRIMUS_USER=dev
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
date -u +%Y-%m-%dT%H:%M:%SZ

run() {  # name, then primus arguments
  local name=$1; shift
  local t0=$(date +%s)
  "$build/primus" train pretrain "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc ($(( $(date +%s) - t0 )) s)"
  grep -E "^iter|^done|ERROR|error" "$out/$name.log" | tail -4
}

# 1. The quickstart model on the GPU (50 steps) to compare with the CPU reference run of the same init and data.
run tiny_gpu --config configs/quickstart.yaml --train_iters 50 --lr_warmup_iters 5 --eval_interval 0 --device cuda
cp /tmp/primus-ws/amd/dev/quickstart/metrics.jsonl "$out/tiny_gpu_metrics.jsonl" 2>/dev/null
# 2. The anchor's workloads.
run bench_1b --config configs/examples/megatron/bench_llama3.2-1B-shape.yaml
run bench_1b_selective --config configs/examples/megatron/bench_llama3.2-1B-shape.yaml --recompute_granularity selective
run bench_8b4l --config configs/examples/megatron/bench_llama3-8B-4L.yaml
# 3. The PyTorch anchor, same machine, same call.
if [ "$torch" = 1 ]; then
  (cd .perf && PYTHONUNBUFFERED=1 timeout 420 python3 torch_baseline.py > "$out/torch.log" 2>&1)
  echo "== torch rc=$?"
  grep -E '"model"|fail' "$out/torch.log" | cut -c1-220
fi
