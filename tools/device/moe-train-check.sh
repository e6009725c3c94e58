#!/usr/bin/env bash
# MoE training on one GPU (issue #18), in one device call:
#  1. GPU vs CPU: the micro Mixtral and the DeepSeek-style micro MoE train 30 steps of byte-level fortunes on
#     the GPU and on the CPU reference from the same init and data (compare_tracking.py, 2% per step);
#  2. ours: bench_qwen3-30B-A3B-4L and bench_mixtral-8x7B-2L (T 4096, B 1), 20 steps each, then a profiled
#     run of each with `primus report timeline` (where the time goes);
#  3. the PyTorch anchor's MoE training section (../shared/perf/torch_moe_baseline.py, section 3: eager and
#     torch.compile on the same two shapes), writing $OUT/torch_moe_baseline.json;
#  4. tools/device/tensorboard-check.sh (#17 item 4);
#  gg: the grouped_gemm, moe_router, moe_permute and moe_force_balance GPU test families first;
#  force: forced balancing (moe_router_force_load_balancing even / uniform), the micro Mixtral GPU vs CPU.
# Carry .device (stop25.tgz with stripped primus + primus_gpu_tests, fortunes/) and .perf (../shared/perf).
# Usage: tools/device/moe-train-check.sh    PARTS="track ours torch tb" selects.
set -uo pipefail
out=${OUT:-/tmp}
bin=/tmp/moe-bin
mkdir -p "$bin" && tar xzf .device/stop25.tgz -C "$bin" || exit 1
parts=${PARTS:-track ours torch tb}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv,noheader
date -u +"%Y-%m-%dT%H:%M:%SZ"
ws=/tmp/moe-ws
rm -rf "$ws"
run() {  # run NAME ARGS...: one training run, its log in $out/NAME.log
  local name=$1
  shift
  local log=$out/$name.log
  [[ $name == track_* ]] && log=/tmp/$name.log  # few files in $OUT: the device call returns a handful
  PRIMUS_WORKSPACE=$ws PRIMUS_EXP_NAME=$name PRIMUS_USER=dev timeout 300 "$bin/primus" train pretrain "$@" \
    >"$log" 2>&1
  local rc=$?
  echo "== $name rc=$rc"
  grep -E "^iter .*/|done:|error" "$log" | tail -4 | cut -c1-260
}
metrics() { find "$ws" -path "*/$1/metrics.jsonl" | head -1; }

if [[ " $parts " == *" gg "* ]]; then  # the grouped-GEMM and MoE op families against the CPU reference
  timeout 200 "$bin/primus_gpu_tests" grouped_gemm moe_router moe_permute moe_force_balance >/tmp/gpu_moe.txt 2>&1
  echo "gpu tests rc=$?: $(grep -E 'checked cases' /tmp/gpu_moe.txt)"
  grep -E "FAIL|crash" /tmp/gpu_moe.txt | head -10
fi
if [[ " $parts " == *" track "* ]]; then
  for model in micro_mixtral micro_deepseek_moe; do
    for dev in cpu cuda; do
      PRIMUS_E2E_MODEL=$model.yaml PRIMUS_QUICKSTART_DATA=$PWD/.device/fortunes OMP_NUM_THREADS=16 \
        run "track_${model}_$dev" --config tests/e2e/configs/fortunes_micro_llama.yaml --device $dev \
        --train_iters 30 --lr_warmup_iters 3 --eval_interval 0 --log_interval 10
    done
    echo "tracking $model: $(python3 tools/device/compare_tracking.py "$(metrics track_${model}_cpu)" \
      "$(metrics track_${model}_cuda)" --tol 0.02 | tail -1)"
  done
fi
if [[ " $parts " == *" force "* ]]; then  # forced balancing (docs/moe.md): GPU vs CPU under each type
  for type in even uniform; do
    for dev in cpu cuda; do
      PRIMUS_E2E_MODEL=micro_mixtral.yaml PRIMUS_QUICKSTART_DATA=$PWD/.device/fortunes OMP_NUM_THREADS=16 \
        run "track_force_${type}_$dev" --config tests/e2e/configs/fortunes_micro_llama.yaml --device $dev \
        --train_iters 30 --lr_warmup_iters 3 --eval_interval 0 --log_interval 10 \
        --moe_router_force_load_balancing true --moe_router_force_load_balancing_type $type
    done
    echo "tracking forced $type: $(python3 tools/device/compare_tracking.py "$(metrics track_force_${type}_cpu)" \
      "$(metrics track_force_${type}_cuda)" --tol 0.02 | tail -1)"
  done
fi
if [[ " $parts " == *" ours "* ]]; then
  for w in bench_qwen3-30B-A3B-4L bench_mixtral-8x7B-2L; do
    run "$w" --config configs/examples/megatron/$w.yaml
    run "prof_$w" --config configs/examples/megatron/$w.yaml --train_iters 12 --profile true \
      --profile_step_start 9 --profile_step_end 10
    tr=$(ls $ws/bench/dev/prof_$w/trace/rank0.json 2>/dev/null)
    [ -n "$tr" ] && "$bin/primus" report timeline "$tr" >"$out/prof_$w.timeline.txt" 2>&1 &&
      head -45 "$out/prof_$w.timeline.txt"
  done
fi
if [[ " $parts " == *" torch "* ]]; then
  echo "== torch anchor, MoE training section"
  timeout 400 env PYTHONUNBUFFERED=1 OUT="$out" python3 -c "
src = open('.perf/torch_moe_baseline.py').read()
head, rest = src.split('# ---- 1. grouped GEMM', 1)
moe = rest.split('# ---- 3. MoE training', 1)[1].split(chr(10), 1)[1]
exec(compile(head + moe, 'torch_moe_baseline.py[section 3]', 'exec'))
" >"$out/torch_moe.txt" 2>&1
  echo "torch rc=$?"
  grep -E '^[{]"model|fail' "$out/torch_moe.txt" | cut -c1-400
  tail -5 "$out/torch_moe.txt" | cut -c1-300
fi
if [[ " $parts " == *" tb "* ]]; then
  OUT=$out/tensorboard PRIMUS_QUICKSTART_DATA=$PWD/.device/fortunes bash tools/device/tensorboard-check.sh "$bin/primus" |
    tail -12
fi
date -u +"%Y-%m-%dT%H:%M:%SZ"
