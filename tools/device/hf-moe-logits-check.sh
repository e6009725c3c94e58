#!/usr/bin/env bash
# Hugging Face numerics check of the MoE families on the device (docs/checkpoints.md): random-weight Mixtral,
# Qwen2-MoE, Qwen3-MoE, DeepSeek-V2 and DeepSeek-V3 models made by transformers -> `primus checkpoint logits`
# (CPU f32, GPU bf16) vs transformers, and `primus convert` round trips (per-expert and fused experts) loaded back
# into transformers. DeepSeek is reported REFUSED until the model has multi-latent attention. Then the micro
# Qwen2-MoE (gated shared expert) trains 30 steps on the GPU and on the CPU (losses within 2%), and, when the GPU
# test binary is given, the sigmoid_gate op family (and the gate's GEMM shapes) against the CPU reference.
# Results: $OUT/hf_moe_logits_report.{md,json}, $OUT/track_qwen2moe.txt, $OUT/gpu_tests_gate.txt.
# Usage (from the repository root): bash tools/device/hf-moe-logits-check.sh BINARIES [--only case,case]
#   BINARIES: a .tgz of the stripped `primus` and `primus_gpu_tests` of a CUDA build (the .device/*.tgz the other
#   device scripts take; the two unstripped binaries are over the 64 MiB a device call carries), or a directory
#   holding `primus` (and `primus_gpu_tests` or tests/primus_gpu_tests).
set -uo pipefail
src=${1:-}
shift || true
if [ -f "$src" ]; then
  bindir=/tmp/hf-moe-bin
  rm -rf "$bindir" && mkdir -p "$bindir" && tar xzf "$src" -C "$bindir" || exit 2
elif [ -d "$src" ]; then
  bindir=$src
else
  echo "usage: hf-moe-logits-check.sh BINARIES.tgz|BUILD_DIR [--only case,case]" >&2
  exit 2
fi
bin="$bindir/primus"
gpu_tests="$bindir/primus_gpu_tests"
[ -x "$gpu_tests" ] || gpu_tests="$bindir/tests/primus_gpu_tests"
if [ ! -x "$bin" ]; then
  echo "hf-moe-logits-check: no primus in $src" >&2
  exit 2
fi
out=${OUT:-/tmp/hf-moe-logits-check}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
date -u
"$bin" --version || true
PYTHONUNBUFFERED=1 timeout "${HF_CHECK_SECONDS:-360}" python3 tools/device/hf-moe-logits-check.py --primus "$bin" \
  --out "$out" "$@" 2>&1 | tee "$out/hf_moe_logits_check.log"
rc=${PIPESTATUS[0]}
echo "hf-moe-logits-check: rc=$rc (report: $out/hf_moe_logits_report.md)"
# Training, GPU vs CPU: the micro Qwen2-MoE (gated shared expert, a dense middle layer) trains 30 steps of mock
# data on both from the same init; per-step losses within 2% (compare_tracking.py).
ws=/tmp/hf-moe-track
rm -rf "$ws"
for dev in cpu cuda; do
  PRIMUS_WORKSPACE=$ws PRIMUS_EXP_NAME=qwen2moe_$dev PRIMUS_USER=dev OMP_NUM_THREADS=16 timeout 90 \
    "$bin" train pretrain --config configs/examples/megatron/micro_qwen2_moe-cpu.yaml --device "$dev" \
    --train_iters 30 --log_interval 10 >"$out/track_qwen2moe_$dev.log" 2>&1
  echo "track qwen2moe $dev: rc=$? $(grep -E '^iter' "$out/track_qwen2moe_$dev.log" | tail -1 | cut -c1-160)"
done
python3 tools/device/compare_tracking.py "$ws/amd/dev/qwen2moe_cpu/metrics.jsonl" \
  "$ws/amd/dev/qwen2moe_cuda/metrics.jsonl" --tol 0.02 | tee "$out/track_qwen2moe.txt"
trc=${PIPESTATUS[0]}
echo "hf-moe-logits-check: qwen2-moe GPU-vs-CPU training rc=$trc"
[ "$trc" -ne 0 ] && rc=1
if [ -x "$gpu_tests" ]; then
  "$gpu_tests" sigmoid_gate 2>&1 | tee "$out/gpu_tests_gate.txt"
  grc=${PIPESTATUS[0]}
  echo "hf-moe-logits-check: primus_gpu_tests sigmoid_gate rc=$grc"
  [ "$grc" -ne 0 ] && rc=1
fi
exit "$rc"
