#!/usr/bin/env bash
# Hugging Face numerics check of Primus checkpoints on the device (docs/checkpoints.md): random-weight Llama,
# Qwen 2 and Qwen 3 models made by transformers -> `primus checkpoint logits` (CPU f32, GPU bf16) vs transformers,
# and `primus convert` round trips loaded back into transformers. Results: $OUT/hf_logits_report.{md,json}.
# Usage (from the repository root): bash tools/device/hf-logits-check.sh PRIMUS_BINARY [--only case,case]
set -uo pipefail
bin=${1:-${PRIMUS_BIN:-}}
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "usage: hf-logits-check.sh PRIMUS_BINARY (a CUDA build of primus; or set PRIMUS_BIN)" >&2
  exit 2
fi
shift || true
out=${OUT:-/tmp/hf-logits-check}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
date -u
"$bin" --version || true
PYTHONUNBUFFERED=1 timeout "${HF_CHECK_SECONDS:-540}" python3 tools/device/hf-logits-check.py --primus "$bin" \
  --out "$out" "$@" 2>&1 | tee "$out/hf_logits_check.log"
rc=${PIPESTATUS[0]}
echo "hf-logits-check: rc=$rc (report: $out/hf_logits_report.md)"
exit "$rc"
