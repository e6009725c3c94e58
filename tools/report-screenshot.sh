#!/usr/bin/env bash
# Renders a post-flight report in headless Chromium (Debian's `chromium`, installed here if missing) and keeps
# the screenshot: a short CPU run of the fortunes test model with an injected NaN (skipped), a loss spike and a
# profiled window, then `primus report`, then the screenshot.
# Usage: tools/report-screenshot.sh [BUILD_DIR] [OUTPUT_PNG]   (defaults: build-safe, docs/report.png)
set -euo pipefail
build=${1:-build-safe}
png=${2:-docs/report.png}
command -v chromium > /dev/null || apt-get install -y chromium
ws=$(mktemp -d)
PRIMUS_WORKSPACE=$ws PRIMUS_EXP_NAME=demo PRIMUS_USER=ci \
PRIMUS_INJECT_NAN="30:layers.1.mlp.down_proj.weight:7" PRIMUS_INJECT_LOSS_SPIKE="45:20" \
  "$build/primus" train pretrain --config tests/e2e/configs/fortunes_micro_llama.yaml --train_iters 80 \
  --lr_warmup_iters 5 --eval_interval 10 --log_interval 20 --nan_policy skip --check_for_spiky_loss true \
  --profile true --profile_step_start 5 --profile_step_end 6 > "$ws/train.log" 2>&1
"$build/primus" report "$ws/e2e/ci/demo"
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --screenshot="$png" --window-size=1280,2000 \
  "file://$ws/e2e/ci/demo/report.html" 2> /dev/null
echo "wrote $png"
rm -rf "$ws"
