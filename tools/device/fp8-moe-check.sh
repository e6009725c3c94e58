#!/usr/bin/env bash
# FP8 MoE experts (issue #21, docs/fp8.md "MoE experts") on one GPU, time-boxed parts:
#  gpu    primus_gpu_tests for fp8_gemm (odd token counts included) and fp8_experts (GPU vs the CPU emulation,
#         then the Qwen3 / Mixtral expert shapes timed against the BF16 grouped GEMM), plus GPU_EXTRA families;
#  track  a micro MoE (4 experts top 2, every dimension a multiple of 128) trained 30 steps in FP8 delayed and
#         blockwise on the GPU and on the CPU, and in BF16 on the GPU, from the same init and data
#         (compare_tracking.py, 5% per step: FP8 casts of bf16 vs f32 activations, routing flips);
#  perf   Qwen3-30B-A3B dims 4L and Mixtral-8x7B dims 2L (T 4096 B 1), 30 steps each in BF16, FP8 delayed
#         (hybrid) and FP8 blockwise (FP8_RECIPES), median of steps 11-30, peak memory: the issue's
#         "MoE in FP8 >= 1.2x our BF16" bar.
# Carry .device (BIN_TGZ, default fp8moe.tgz: stripped primus + primus_gpu_tests) and .device/fortunes.
# Usage: PARTS="gpu track perf" tools/device/fp8-moe-check.sh
set -uo pipefail
out=/tmp/fp8moe-out
rm -rf "$out" && mkdir -p "$out"
bin=/tmp/fp8moe-bin
mkdir -p "$bin" && tar xzf ".device/${BIN_TGZ:-fp8moe.tgz}" -C "$bin" || exit 1
parts=${PARTS:-gpu track perf}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
date -u +"%Y-%m-%dT%H:%M:%SZ"
t0=$SECONDS
finish() { tar czf "${OUT:-/tmp}/fp8moe-logs.tgz" -C "$out" . 2>/dev/null; date -u +"%Y-%m-%dT%H:%M:%SZ"; }
trap finish EXIT
ws=/tmp/fp8moe-ws
metrics() { find "$ws" -path "*/$1/metrics.jsonl" | head -1; }
train() {  # train NAME ARGS...
  local name=$1
  shift
  PRIMUS_WORKSPACE=$ws PRIMUS_EXP_NAME=$name PRIMUS_USER=dev timeout "${RUN_BOX:-60}" "$bin/primus" train \
    pretrain "$@" >"$out/$name.log" 2>&1
}

if [[ " $parts " == *" gpu "* ]]; then
  # shellcheck disable=SC2086
  timeout "${GPU_BOX:-150}" "$bin/primus_gpu_tests" fp8_gemm fp8_experts ${GPU_EXTRA:-} >"$out/gpu.txt" 2>&1
  echo "== gpu rc=$? ($((SECONDS - t0)) s): $(grep -E 'checked cases' "$out/gpu.txt")"
  grep -E "FAIL|crash|exception|odd rows" "$out/gpu.txt" | cut -c1-200 | head -30
  grep -E "fp8_experts" "$out/gpu.txt" | cut -c1-200 | head -30
fi
if [[ " $parts " == *" track "* ]]; then
  micro=(--hidden_size 128 --ffn_hidden_size 384 --moe_ffn_hidden_size 128 --num_attention_heads 8
    --num_query_groups 4 --kv_channels 16 --moe_shared_expert_intermediate_size 128)
  for recipe in delayed blockwise; do
    fmt=hybrid
    [ $recipe = blockwise ] && fmt=e4m3
    for dev in cpu cuda; do
      PRIMUS_E2E_MODEL=micro_mixtral.yaml PRIMUS_QUICKSTART_DATA=$PWD/.device/fortunes OMP_NUM_THREADS=16 \
        train "track_${recipe}_$dev" --config tests/e2e/configs/fortunes_micro_llama.yaml --device $dev \
        --train_iters 30 --lr_warmup_iters 3 --eval_interval 0 --log_interval 10 "${micro[@]}" \
        --fp8 $fmt --fp8_recipe $recipe
      echo "== track $recipe $dev rc=$?: $(grep -E 'projections on this rank' "$out/track_${recipe}_$dev.log" | cut -c1-160)"
    done
    echo "tracking fp8 moe $recipe, GPU vs CPU: $(python3 tools/device/compare_tracking.py \
      "$(metrics track_${recipe}_cpu)" "$(metrics track_${recipe}_cuda)" --tol 0.05 | tail -1)"
  done
  # The GPU's FP8 runs against its own BF16 run from the same init and data.
  PRIMUS_E2E_MODEL=micro_mixtral.yaml PRIMUS_QUICKSTART_DATA=$PWD/.device/fortunes \
    train track_bf16_cuda --config tests/e2e/configs/fortunes_micro_llama.yaml --device cuda \
    --train_iters 30 --lr_warmup_iters 3 --eval_interval 0 --log_interval 10 "${micro[@]}"
  for recipe in delayed blockwise; do
    echo "tracking fp8 moe $recipe vs bf16 on the GPU: $(python3 tools/device/compare_tracking.py \
      "$(metrics track_bf16_cuda)" "$(metrics track_${recipe}_cuda)" --tol 0.05 | tail -1)"
  done
fi
if [[ " $parts " == *" perf "* ]]; then
  for w in ${WORKLOADS:-bench_qwen3-30B-A3B-4L bench_mixtral-8x7B-2L}; do
    for recipe in bf16 ${FP8_RECIPES:-delayed blockwise}; do
      rm -rf "$ws"
      args=()
      [ "$recipe" = delayed ] && args=(--fp8 hybrid)
      [ "$recipe" = blockwise ] && args=(--fp8 e4m3 --fp8_recipe blockwise)
      [ "$recipe" = rowwise ] && args=(--fp8 e4m3 --fp8_recipe rowwise)
      train "$w.$recipe" --config configs/examples/megatron/$w.yaml --train_iters 30 --log_interval 10 "${args[@]}"
      rc=$?
      python3 tools/device/step_median.py "$(find $ws -name metrics.jsonl | head -1)" "$w [$recipe]" "$rc" 4096
      grep -E "projections on this rank|error" "$out/$w.$recipe.log" | head -2 | cut -c1-200
    done
  done
fi
echo "== done ($((SECONDS - t0)) s)"
