#!/usr/bin/env bash
# Hugging Face numerics check of the MoE families on the device (docs/checkpoints.md): random-weight Mixtral,
# Qwen2-MoE, Qwen3-MoE, DeepSeek-V2 and DeepSeek-V3 models made by transformers -> `primus checkpoint logits`
# (CPU f32, GPU bf16) vs transformers, and `primus convert` round trips (per-expert and fused experts) loaded back
# into transformers. DeepSeek is reported REFUSED until the model has multi-latent attention. Then, when the GPU
# test binary is beside the build (BUILD_DIR/tests/primus_gpu_tests), the sigmoid_gate op family (Qwen2-MoE's
# gated shared expert) against the CPU reference. Results: $OUT/hf_moe_logits_report.{md,json}, $OUT/gpu_tests_gate.txt.
# Usage (from the repository root): bash tools/device/hf-moe-logits-check.sh BUILD_DIR [--only case,case]
set -uo pipefail
build=${1:-build}
shift || true
bin="$build/primus"
if [ ! -x "$bin" ]; then
  echo "usage: hf-moe-logits-check.sh BUILD_DIR (a CUDA build with BUILD_DIR/primus)" >&2
  exit 2
fi
out=${OUT:-/tmp/hf-moe-logits-check}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
date -u
"$bin" --version || true
PYTHONUNBUFFERED=1 timeout "${HF_CHECK_SECONDS:-420}" python3 tools/device/hf-moe-logits-check.py --primus "$bin" \
  --out "$out" "$@" 2>&1 | tee "$out/hf_moe_logits_check.log"
rc=${PIPESTATUS[0]}
echo "hf-moe-logits-check: rc=$rc (report: $out/hf_moe_logits_report.md)"
if [ -x "$build/tests/primus_gpu_tests" ]; then
  "$build/tests/primus_gpu_tests" sigmoid_gate 2>&1 | tee "$out/gpu_tests_gate.txt"
  grc=${PIPESTATUS[0]}
  echo "hf-moe-logits-check: primus_gpu_tests sigmoid_gate rc=$grc"
  [ "$grc" -ne 0 ] && rc=1
fi
exit "$rc"
