#!/usr/bin/env bash
# A short GPU check of the default training path after a change to the step (hooks, overlapped update):
# `primus_gpu_tests --quick overlap`, then the micro Llama and the bench Mixtral-2L on one GPU (default
# settings: overlapped update in pieces), printing their first and last loss lines and step times.
# Carry .device (moe.tgz: stripped primus + primus_gpu_tests). Usage: tools/device/gpu-smoke.sh
set -uo pipefail
bin=/tmp/smoke-bin
mkdir -p "$bin" && tar xzf .device/moe.tgz -C "$bin" || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
date -u +"%Y-%m-%dT%H:%M:%SZ"
timeout 90 "$bin/primus_gpu_tests" --quick overlap 2>&1 | grep -E "checked cases|FAIL" | head -5
export PRIMUS_WORKSPACE=/tmp/smoke-ws PRIMUS_USER=dev
PRIMUS_EXP_NAME=micro timeout 90 "$bin/primus" train pretrain --config tests/e2e/configs/fortunes_micro_llama.yaml \
  --device cuda --mock_data true --train_iters 40 --log_interval 10 --eval_interval 0 2>&1 |
  grep -E "^iter|error" | cut -c1-150
echo "micro rc=${PIPESTATUS[0]}"
PRIMUS_EXP_NAME=mixtral timeout 90 "$bin/primus" train pretrain --config configs/examples/megatron/bench_mixtral-8x7B-2L.yaml \
  --train_iters 20 --log_interval 10 2>&1 | grep -E "^iter|error" | cut -c1-150
echo "mixtral rc=${PIPESTATUS[0]}"
date -u +"%Y-%m-%dT%H:%M:%SZ"
