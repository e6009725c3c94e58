#!/usr/bin/env bash
# FP8 training (issue #21, docs/fp8.md) on one H100/H200 in one call. Parts (PARTS="tests smoke perf gemm accuracy"):
#   tests     primus_gpu_tests' quant and fp8_gemm families (byte-exact casts, GEMMs vs the CPU reference, the
#             Llama-3-8B shapes timed beside BF16) and the gemm family (the BF16 path must not have moved)
#   smoke     the tiny fortunes model for 30 steps in BF16 and under each recipe (finite, learning, the log line)
#   perf      Llama-3-8B dims 4L T8192 B1 (bench_llama3-8B-4L.yaml): BF16 and each FP8 recipe (without and with the
#             output layer in FP8), then the PyTorch
#             anchor's same workload (torch_baseline.py, that entry only) in the same call
#   gemm      torch._scaled_mm on torch_moe_baseline.py's FP8 shapes (its FP8 section only, same call as tests)
#   primus    Primus's own llama3.1_8B-FP8-pretrain.yaml (from .device/primus-configs) with 2 layers, 3 steps of 4
#             micro-batches, as written (delayed) and blockwise; `benchmark gemm --dtype fp8` for each scaling
#   accuracy  the Llama-124M shape on the fortunes bytes, STEPS (1000) steps: BF16 and each recipe from the same
#             init and data; validation loss at the end (the issue's 1% bar)
# Usage: tar xzf .device/fp8.tgz && PARTS="tests smoke" tools/device/fp8-check.sh .device/bin
# Carry .device (fp8.tgz: stripped primus + primus_gpu_tests; fortunes/; torch_baseline.py, torch_moe_baseline.py).
set -uo pipefail
bin=${1:-.device/bin}
parts=${PARTS:-tests smoke perf gemm primus accuracy}
steps=${STEPS:-1000}
out=/tmp/fp8-out
final=${OUT:-/tmp/fp8-final}
rm -rf "$out"; mkdir -p "$out" "$final"
trap 'tar czf "$final/fp8-logs.tgz" -C "$out" . ; cp "$out"/*.json "$out"/*.txt "$out"/*.html "$final"/ 2>/dev/null' EXIT
export PRIMUS_WORKSPACE=/tmp/primus-ws PRIMUS_QUICKSTART_DATA=$PWD/.device/fortunes PRIMUS_USER=dev PRIMUS_HOME=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
date -u +%Y-%m-%dT%H:%M:%SZ
has() { [[ " $parts " == *" $1 "* ]]; }

run() {  # name, then primus arguments
  local name=$1; shift
  local t0=$(date +%s)
  PRIMUS_EXP_NAME=$name "$bin/primus" train pretrain "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc ($(( $(date +%s) - t0 )) s)"
  grep -E "^iter|fp8:|ERROR|error|validation" "$out/$name.log" | tail -4
}

declare -A recipe=(
  [delayed]="--fp8 hybrid"
  [current]="--fp8 hybrid --fp8_recipe tensorwise"
  [rowwise]="--fp8 e4m3 --fp8_recipe rowwise"
  [blockwise]="--fp8 e4m3 --fp8_recipe blockwise"
)
names="delayed current rowwise blockwise"

if has tests; then
  # shellcheck disable=SC2086
  "$bin/primus_gpu_tests" ${GPU_TESTS:-quant fp8_gemm gemm} > "$out/gpu_tests.txt" 2>&1
  echo "== gpu_tests rc=$?"; tail -4 "$out/gpu_tests.txt"; grep -E "FAIL|probe|TFLOP" "$out/gpu_tests.txt" | head -60
fi
if has gemm; then
  # The anchor's FP8 GEMM section alone (its MoE training section is another issue's).
  python3 - > "$out/torch_fp8_gemm.txt" 2>&1 <<'EOF'
src = open('.device/torch_moe_baseline.py').read()
cut = src.index('# ---- 1. grouped GEMM')
fp8 = src.index('# ---- 2. FP8 GEMM'); end = src.index('# ---- 3. MoE training')
exec(src[:cut] + src[fp8:end])
EOF
  echo "== torch fp8 gemm rc=$?"; cat "$out/torch_fp8_gemm.txt" | tail -6
fi
if has smoke; then
  tiny=(--config configs/examples/megatron/tiny_llama-fortunes-bytes.yaml --train_iters 30 --eval_interval 0
        --log_interval 10 --lr_warmup_iters 5 --device cuda)
  run tiny_bf16 "${tiny[@]}"
  for n in $names; do
    # shellcheck disable=SC2086
    run tiny_$n "${tiny[@]}" ${recipe[$n]}
  done
fi
if has perf; then
  b8=(--config configs/examples/megatron/bench_llama3-8B-4L.yaml)
  run b8_bf16 "${b8[@]}"
  for n in $names; do
    # shellcheck disable=SC2086
    run b8_$n "${b8[@]}" ${recipe[$n]}
    # The output layer in FP8 too (TorchTitan's float8 default; Megatron keeps it BF16).
    # shellcheck disable=SC2086
    run b8_${n}_out "${b8[@]}" ${recipe[$n]} --fp8_output_layer true
  done
  python3 - > "$out/torch_baseline_8b4l.txt" 2>&1 <<'EOF'
src = open('.device/torch_baseline.py').read()
src = src.replace("for (name,V,d,L,h,kv,ffn,T,B) in cfgs:",
                  "for (name,V,d,L,h,kv,ffn,T,B) in [c for c in cfgs if c[0] == 'llama3-8B-4L']:")
exec(src)
EOF
  echo "== torch baseline 8B-4L rc=$?"; grep -E "llama3-8B-4L" "$out/torch_baseline_8b4l.txt" | tail -2
fi
if has primus; then
  ex=.device/primus-configs/examples/megatron/configs/MI300X/llama3.1_8B-FP8-pretrain.yaml
  few=(--config "$ex" --num_layers 2 --train_iters 3 --global_batch_size 8 --log_interval 1 --lr_warmup_iters 1)
  PRIMUS_CONFIG_PATH=.device/primus-configs/primus/configs run primus_fp8 "${few[@]}"
  PRIMUS_CONFIG_PATH=.device/primus-configs/primus/configs run primus_fp8_blockwise "${few[@]}" --fp8_recipe blockwise
  for sc in tensorwise rowwise blockwise; do
    "$bin/primus" benchmark gemm --dtype fp8 --scaling "$sc" --M 8192 --N 8192 --K 8192 --duration 2 \
      --output-file "$out/bench_gemm_fp8_$sc.md" > "$out/bench_gemm_fp8_$sc.log" 2>&1
    echo "== benchmark gemm fp8 $sc rc=$?"; tail -3 "$out/bench_gemm_fp8_$sc.log"
  done
fi
if has accuracy; then
  # ACC_ARGS: extra overrides for every accuracy run (e.g. "--micro_batch_size 4 --global_batch_size 4").
  # shellcheck disable=SC2206
  acc=(--config configs/examples/megatron/fp8_accuracy_llama-124M-fortunes.yaml --train_iters "$steps" --device cuda
       ${ACC_ARGS:-})
  run acc_bf16 "${acc[@]}"
  # The BF16 run again from another initialisation: how far two BF16 runs land apart (the noise under the bar).
  run acc_bf16_seed2 "${acc[@]}" --seed 4321
  for n in delayed rowwise blockwise; do
    # shellcheck disable=SC2086
    run acc_$n "${acc[@]}" ${recipe[$n]}
  done
  for n in bf16 bf16_seed2 delayed rowwise blockwise; do
    cp "/tmp/primus-ws/amd/dev/acc_$n/metrics.jsonl" "$out/acc_${n}_metrics.jsonl" 2>/dev/null
  done
  grep -H "validation at" "$out"/acc_*.log
  # The curves side by side (docs/fp8.md links the page).
  ws=/tmp/primus-ws/amd/dev
  "$bin/primus" report "$ws/acc_bf16" --compare "$ws/acc_bf16_seed2" "$ws/acc_delayed" "$ws/acc_rowwise" \
    "$ws/acc_blockwise" -o "$out/fp8_accuracy_report.html" > "$out/report.txt" 2>&1
  echo "== report rc=$?"; grep -o "<tr><td>acc_[^/]*</td>.\{0,220\}" "$out/fp8_accuracy_report.html"
fi
date -u +%Y-%m-%dT%H:%M:%SZ
