#!/usr/bin/env bash
# The main job: install dependencies, build, and pretrain the quickstart model (a ~10M-parameter Llama on the
# Debian `fortunes` corpus) on the GPU when one is present, else on the CPU.
# Extra arguments are config overrides, e.g. `scripts/quickstart.sh --train_iters 50`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec ./build/primus train pretrain --config configs/quickstart.yaml "$@"
