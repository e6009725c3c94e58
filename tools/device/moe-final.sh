#!/usr/bin/env bash
# The MoE issue's (#18) closing device checks, time-boxed parts:
#  gpu    primus_gpu_tests --quick for the families in GPU_FAMILIES (default: all) against the CPU reference;
#  hf     tools/device/hf-moe-logits-check.py: transformers vs our logits (CPU f32, GPU bf16) for random
#         Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2 and DeepSeek-V3 models, and round trips;
#  moe    our MoE bench workloads (Qwen3-30B-A3B dims 4L, Mixtral-8x7B dims 2L; T 4096 B 1), 30 steps, median of
#         steps 11-30 and peak memory, once per VARIANTS entry (environment settings, e.g. the A/B switches
#         PRIMUS_UPDATE_PIECES=0; "-" = defaults), then the PyTorch MoE anchor (torch.compile only) in the
#         same call (TORCH=0 skips it; WORKLOADS selects the workloads);
#  prof   a profiled run of each workload (steps 9-10, CUPTI kernels) and `primus report timeline` of it.
# Carry .device (BIN_TGZ, default moe.tgz: stripped primus + primus_gpu_tests) and .perf (../shared/perf).
# Usage: PARTS="gpu hf moe" VARIANTS="- PRIMUS_UPDATE_PIECES=0" tools/device/moe-final.sh
set -uo pipefail
out=/tmp/final-out  # everything here; $OUT gets one archive (a call returns at most 8 files)
rm -rf "$out" && mkdir -p "$out"
bin=/tmp/final-bin
mkdir -p "$bin" && tar xzf ".device/${BIN_TGZ:-moe.tgz}" -C "$bin" || exit 1
parts=${PARTS:-gpu hf moe}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
date -u +"%Y-%m-%dT%H:%M:%SZ"
t0=$SECONDS
finish() { tar czf "${OUT:-/tmp}/final-logs.tgz" -C "$out" . 2>/dev/null; date -u +"%Y-%m-%dT%H:%M:%SZ"; }
trap finish EXIT
if [[ " $parts " == *" gpu "* ]]; then
  # shellcheck disable=SC2086  # the family list splits into arguments
  timeout "${GPU_BOX:-240}" "$bin/primus_gpu_tests" --quick ${GPU_FAMILIES:-} >"$out/gpu.txt" 2>&1
  echo "== gpu rc=$? ($((SECONDS - t0)) s): $(grep -E 'checked cases' "$out/gpu.txt")"
  grep -E "FAIL|crash|exception" "$out/gpu.txt" | cut -c1-200 | head -12
fi
if [[ " $parts " == *" hf "* ]]; then
  PYTHONUNBUFFERED=1 timeout 95 python3 tools/device/hf-moe-logits-check.py --primus "$bin/primus" \
    --out "$out/hf" >"$out/hf.txt" 2>&1
  echo "== hf rc=$? ($((SECONDS - t0)) s)"
  tail -22 "$out/hf.txt" | cut -c1-180
fi
if [[ " $parts " == *" moe "* ]]; then
  ws=/tmp/final-ws
  for variant in ${VARIANTS:--}; do
  for w in ${WORKLOADS:-bench_qwen3-30B-A3B-4L bench_mixtral-8x7B-2L}; do
    rm -rf "$ws"
    settings=()
    [ "$variant" != "-" ] && read -ra settings <<<"${variant//,/ }"
    env "${settings[@]}" PRIMUS_WORKSPACE=$ws PRIMUS_EXP_NAME=$w PRIMUS_USER=dev timeout 45 "$bin/primus" \
      train pretrain --config configs/examples/megatron/$w.yaml --train_iters 30 --log_interval 10 \
      >"$out/$w.${variant//[^A-Za-z0-9_=-]/_}.log" 2>&1
    rc=$?
    python3 tools/device/step_median.py "$(find $ws -name metrics.jsonl | head -1)" "$w [$variant]" "$rc" 4096
  done
  done
  [ "${TORCH:-1}" = 1 ] && timeout "${TORCH_BOX:-220}" env PYTHONUNBUFFERED=1 OUT="$out" python3 -c "
src = open('.perf/torch_moe_baseline.py').read()
head, rest = src.split('# ---- 1. grouped GEMM', 1)
moe = rest.split('# ---- 3. MoE training', 1)[1].split(chr(10), 1)[1].replace('for comp in [False, True]:', 'for comp in [True]:')
exec(compile(head + moe, 'torch_moe_baseline.py[section 3, compile only]', 'exec'))
" >"$out/torch_moe.txt" 2>&1
  [ "${TORCH:-1}" = 1 ] && echo "== torch rc=$? ($((SECONDS - t0)) s)" &&
    grep -E '^[{]"model|^fail' "$out/torch_moe.txt" | cut -c1-330
fi
if [[ " $parts " == *" prof "* ]]; then
  source tools/device/find-cupti.sh
  for w in ${WORKLOADS:-bench_qwen3-30B-A3B-4L bench_mixtral-8x7B-2L}; do
    rm -rf /tmp/prof-ws
    PRIMUS_WORKSPACE=/tmp/prof-ws PRIMUS_EXP_NAME=prof PRIMUS_USER=dev timeout 60 "$bin/primus" train pretrain \
      --config configs/examples/megatron/$w.yaml --train_iters 12 --profile true --profile_step_start 9 \
      --profile_step_end 10 >"$out/prof_$w.log" 2>&1
    echo "== prof $w rc=$? ($((SECONDS - t0)) s)"
    tr=$(find /tmp/prof-ws -name rank0.json | head -1)
    [ -n "$tr" ] && "$bin/primus" report timeline "$tr" >"$out/prof_$w.timeline.txt" 2>&1 &&
      head -60 "$out/prof_$w.timeline.txt" && cp "$tr" "$out/prof_$w.trace.json"
  done
fi
