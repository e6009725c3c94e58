#!/usr/bin/env bash
# Issue #22's measured op times: `primus projection calibrate` for the five one-GPU workloads of
# projection-check.sh (each also with full recompute: same shapes), then `projection performance` with and
# without the cache, printed beside the step times measured by projection-check.sh (docs/projection.md).
# Usage: tools/device/projection-calibrate-check.sh BIN_DIR
set -uo pipefail
bin=${1:-build}
export PRIMUS_PROJECTION_CACHE=${OUT:-/tmp}/projection-cache
mkdir -p "$PRIMUS_PROJECTION_CACHE"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
date -u +%Y-%m-%dT%H:%M:%SZ
cfg=configs/examples/megatron
for w in llama-124M llama3.2-1B-shape llama3-8B-4L qwen3-30B-A3B-4L mixtral-8x7B-2L; do
  t0=$(date +%s)
  "$bin/primus" projection calibrate --config "$cfg/bench_$w.yaml" --seconds 0.2 2>/dev/null | tail -2
  for rc in none full; do
    ov=(recompute_granularity=None)
    [ $rc = full ] && ov=(recompute_granularity=full recompute_method=uniform recompute_num_layers=1)
    roof=$("$bin/primus" projection performance --config "$cfg/bench_$w.yaml" "${ov[@]}" --json --no-calibration 2>/dev/null |
      python3 -c "import json,sys; print(round(json.load(sys.stdin)['step_time_s']*1e3,1))")
    meas=$("$bin/primus" projection performance --config "$cfg/bench_$w.yaml" "${ov[@]}" --json 2>/dev/null |
      python3 -c "import json,sys; print(round(json.load(sys.stdin)['step_time_s']*1e3,1))")
    echo "$w $rc: roofline $roof ms, calibrated $meas ms"
  done
  echo "   ($(( $(date +%s) - t0 )) s)"
done
