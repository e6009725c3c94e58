#!/usr/bin/env bash
# The overlapped optimizer update (src/train/overlapped_update.h), A/B on one GPU in one call:
#   (a) primus_gpu_tests --quick GPU_TESTS (default: overlap optimizer embedding);
#   (b) the quickstart model 50 steps with the update serial and overlapped: losses must be identical;
#   (c) both anchor workloads under each of VARIANTS (';'-separated environment settings; default: serial
#       update, overlapped with 0 / 24 / 32 SMs reserved), ROUNDS times (default 1; A B C ... A B C ... shows clock drift);
#   (d) PROFILE=1: a profiled overlapped run of the 1B shape (steps 9-10) and its timeline.
# Usage (repo root on the GPU machine): tools/device/overlap-ab.sh BIN_DIR
set -uo pipefail
bin=${1:?usage: overlap-ab.sh BIN_DIR}
final=${OUT:-/tmp/overlap-ab}
work=/tmp/overlap-ab-work
rm -rf "$work" /tmp/ab-ws; mkdir -p "$work" "$final"
export PRIMUS_WORKSPACE=/tmp/ab-ws PRIMUS_QUICKSTART_DATA=$PWD/.perf/fortunes PRIMUS_USER=dev PRIMUS_HOME=$PWD
summary=$work/summary.txt
trap 'cp "$summary" "$final"/; tar czf "$final/overlap-ab.tgz" -C "$work" .' EXIT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$summary"
date -u +%Y-%m-%dT%H:%M:%SZ | tee -a "$summary"

if [ -x "$bin/primus_gpu_tests" ]; then
  # shellcheck disable=SC2086
  "$bin/primus_gpu_tests" --quick ${GPU_TESTS:-overlap optimizer embedding} > "$work/gpu_tests.txt" 2>&1
  echo "== gpu_tests rc=$?" | tee -a "$summary"
  grep -E "overlap|updated|FAIL|passed|failed" "$work/gpu_tests.txt" | tail -24 | tee -a "$summary"
fi

tiny=(--config configs/examples/megatron/tiny_llama-fortunes-bytes.yaml --train_iters 50 --eval_interval 0 --device cuda)
for v in 0 1; do
  PRIMUS_OVERLAP_UPDATE=$v PRIMUS_EXP_NAME=tiny_ov$v timeout 120 "$bin/primus" train pretrain "${tiny[@]}" \
    > "$work/tiny_ov$v.log" 2>&1
  echo "== tiny overlap=$v rc=$?" | tee -a "$summary"
  cp /tmp/ab-ws/amd/dev/tiny_ov$v/metrics.jsonl "$work/tiny_ov$v.jsonl" 2>/dev/null
done
python3 - "$work" <<'PY' | tee -a "$summary"
import json, sys
d = sys.argv[1]
def losses(v):
    return [(r.get("iter"), r.get("loss")) for r in map(json.loads, open(f"{d}/tiny_ov{v}.jsonl")) if "loss" in r]
a, b = losses(0), losses(1)
same = sum(1 for x, y in zip(a, b) if x == y)
print(f"  tiny model: {same}/{len(a)} logged steps with identical loss (serial vs overlapped), last {a[-1:]} {b[-1:]}")
PY

ab() {  # name config env...
  local name=$1 cfg=$2
  shift 2
  env "$@" PRIMUS_EXP_NAME=$name timeout 150 "$bin/primus" train pretrain --config "configs/examples/megatron/$cfg.yaml" \
    --device cuda > "$work/$name.log" 2>&1
  echo "== $name ($*) rc=$?: $(grep -E "done:" "$work/$name.log" | tail -1)" | tee -a "$summary"
}
IFS=';' read -r -a variants <<< "${VARIANTS:-PRIMUS_OVERLAP_UPDATE=0;PRIMUS_UPDATE_SM_RESERVE=0;PRIMUS_UPDATE_SM_RESERVE=24;PRIMUS_UPDATE_SM_RESERVE=32}"
for round in $(seq 1 "${ROUNDS:-1}"); do
  for w in bench_llama3.2-1B-shape bench_llama3-8B-4L; do
    i=0
    for v in "${variants[@]}"; do
      i=$((i + 1))
      # shellcheck disable=SC2086
      ab "${w}_v${i}_$round" $w $v
    done
  done
done
if [ "${PROFILE:-0}" = 1 ]; then
  source "$(dirname "$0")/find-cupti.sh" | tee -a "$summary"
  w=bench_llama3.2-1B-shape
  PRIMUS_EXP_NAME=prof_ov timeout 150 "$bin/primus" train pretrain --config configs/examples/megatron/$w.yaml \
    --device cuda --train_iters 12 --profile true --profile_step_start 9 --profile_step_end 10 > "$work/prof_ov.log" 2>&1
  tr=/tmp/ab-ws/bench/dev/prof_ov/trace/rank0.json
  [ -f "$tr" ] && "$bin/primus" report timeline "$tr" > "$work/prof_ov.timeline.txt" 2>&1
  echo "== timeline, overlapped update, 1B shape (2 steps)" | tee -a "$summary"
  head -40 "$work/prof_ov.timeline.txt" | tee -a "$summary"
fi
