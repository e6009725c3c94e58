#!/usr/bin/env bash
# A profiled primus run of the 8B-dims benchmark (bench_llama3-8B-4L: Llama-3-8B layers x 4, seq 8192) and the
# PyTorch anchor's same shape under torch.profiler, both analysed by `primus report timeline` (and the anchor's
# trace also by the Python mirror of that analysis). Everything lands in $OUT/profile.
# Usage (repo root on the GPU machine): tools/device/profile-compare.sh [PRIMUS_BINARY]
# Needs .perf/torch_baseline.py (carried) for the anchor.
set -uo pipefail
bin=${1:-build-safe-cuda/primus}
out=${OUT:-/tmp/stability-out}/profile
mkdir -p "$out"
source "$(dirname "$0")/find-cupti.sh"
export PRIMUS_WORKSPACE=/tmp/primus-prof PRIMUS_USER=dev PRIMUS_EXP_NAME=prof8b4l PRIMUS_HOME=$PWD
rm -rf /tmp/primus-prof
"$bin" train pretrain --config configs/examples/megatron/bench_llama3-8B-4L.yaml --train_iters 12 \
  --profile true --profile_step_start 9 --profile_step_end 10 > "$out/train.log" 2>&1
echo "== profiled run: exit $?"
grep -E "^iter|profile:|GPU timeline|done:" "$out/train.log" | tail -8
run=/tmp/primus-prof/bench/dev/prof8b4l
cp "$run/trace/rank0.json" "$out/primus_trace.json" 2>/dev/null
"$bin" report timeline "$out/primus_trace.json" --json "$out/primus_timeline.json" --markdown "$out/primus_timeline.md" \
  > "$out/primus_timeline.txt" 2>&1
echo "== primus report timeline (2 steps of primus):"; cat "$out/primus_timeline.txt"
"$bin" report "$run" --output "$out/report.html" > /dev/null 2>&1; echo "== primus report: exit $?"
if [ -f .perf/torch_baseline.py ]; then
  OUT=$out python3 tools/device/profile_torch_anchor.py .perf/torch_baseline.py > "$out/torch.log" 2>&1
  echo "== torch.profiler anchor: exit $?"; cat "$out/torch.log" | tail -30
  "$bin" report timeline "$out/torch_trace.json" --json "$out/torch_timeline_by_primus.json" \
    > "$out/torch_timeline_by_primus.txt" 2>&1
  echo "== primus report timeline on the torch trace:"; head -30 "$out/torch_timeline_by_primus.txt"
else
  echo "== .perf/torch_baseline.py not carried: anchor skipped"
fi
