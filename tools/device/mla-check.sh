#!/usr/bin/env bash
# Multi-latent attention, YaRN and MTP on one GPU (issue #18 item 3; docs/mla.md), in one device call:
#  gpu:   the mla, attention (MLA cases, the timed 192/128 case) and rope GPU test families against the CPU;
#  track: the micro DeepSeek-V3-style model (MLA + YaRN + MoE + MTP) trains 30 steps of byte-level fortunes on
#         the GPU and on the CPU reference from the same init and data (compare_tracking.py, 2% per step);
#  bench: bench_deepseek_v2_lite-4L (T 4096, B 1) with the auto attention backend, with the flash backend, and
#         with one MTP depth: tok/s, TFLOP/s and which attention backend ran (--debug log lines).
# Carry the build directory (or the two stripped binaries in BIN_DIR) and .device/fortunes.
# Usage: tools/device/mla-check.sh [BIN_DIR]    PARTS="gpu track bench" selects.
set -uo pipefail
bin=${1:-build}
primus="$bin/primus"
tests="$bin/tests/primus_gpu_tests"
[ -x "$tests" ] || tests="$bin/primus_gpu_tests"
out=${OUT:-/tmp}
parts=${PARTS:-gpu track bench}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
ws=/tmp/mla-ws
rm -rf "$ws"
run() {  # run NAME ARGS...: one training run, its log in $out/NAME.log
  local name=$1
  shift
  PRIMUS_WORKSPACE=$ws PRIMUS_EXP_NAME=$name PRIMUS_USER=dev timeout 400 "$primus" ${PRIMUS_FLAGS:-} train pretrain "$@" \
    >"$out/$name.log" 2>&1
  echo "== $name rc=$?"
  grep -E "^iter .*/|done:|error|attention (forward|backward)" "$out/$name.log" | sort -u | tail -6 | cut -c1-260
}
metrics() { find "$ws" -path "*/$1/metrics.jsonl" | head -1; }

if [[ " $parts " == *" gpu "* ]]; then
  timeout 400 "$tests" mla attention rope >"$out/gpu_mla.txt" 2>&1
  echo "gpu tests rc=$?: $(grep -E 'checked cases' "$out/gpu_mla.txt")"
  grep -E "FAIL|crash|Dv|skip" "$out/gpu_mla.txt" | head -40 | cut -c1-220
fi
if [[ " $parts " == *" track "* ]]; then
  for dev in cpu cuda; do
    PRIMUS_E2E_MODEL=micro_deepseek_mla.yaml PRIMUS_QUICKSTART_DATA=$PWD/.device/fortunes OMP_NUM_THREADS=16 \
      run "track_mla_$dev" --config tests/e2e/configs/fortunes_micro_llama.yaml --device $dev --train_iters 30 \
      --lr_warmup_iters 3 --eval_interval 0 --log_interval 10
  done
  echo "tracking micro_deepseek_mla: $(python3 tools/device/compare_tracking.py "$(metrics track_mla_cpu)" \
    "$(metrics track_mla_cuda)" --tol 0.02 | tail -1)"
fi
if [[ " $parts " == *" bench "* ]]; then
  PRIMUS_FLAGS=--debug run bench_mla_auto --config configs/examples/megatron/bench_deepseek_v2_lite-4L.yaml
  PRIMUS_ATTENTION_BACKEND=flash run bench_mla_flash --config configs/examples/megatron/bench_deepseek_v2_lite-4L.yaml
  PRIMUS_BENCH_MTP=1 run bench_mla_mtp --config configs/examples/megatron/bench_deepseek_v2_lite-4L.yaml
fi
date -u +"%Y-%m-%dT%H:%M:%SZ"
