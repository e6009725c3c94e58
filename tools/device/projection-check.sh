#!/usr/bin/env bash
# Issue #22's validation on one GPU, one device call: our trainer's measured peak memory and step time against
# `primus projection memory / performance` (same binary, same overrides), and the grids the planner chooses
# from. Each run: STEPS steps, median iter_ms of steps 4..STEPS, peak = max mem_gb (allocator bytes).
#   workloads  124M (T1024 B16), 1B (T2048 B8), 8B-4L (T8192 B1), Qwen3-30B-A3B 4L, Mixtral 2L, each without
#              and with full recompute
#   grid1b     1B, global batch 8: micro-batch 1 / 2 / 4 (8 is in workloads) x no / selective / full recompute
#   grid8b     8B-4L, global batch 4: micro-batch 1 / 2 / 4 x no / selective / full recompute
# Usage: PARTS="workloads grid1b grid8b" tools/device/projection-check.sh BIN_DIR
# Writes $OUT/projection-results.jsonl (one record per run) and the logs as $OUT/projection-logs.tgz.
set -uo pipefail
bin=${1:-build}
parts=${PARTS:-workloads grid1b grid8b}
steps=${STEPS:-10}
final=${OUT:-/tmp/projection-final}
out=/tmp/projection-out
rm -rf "$out"; mkdir -p "$out" "$final"
trap 'tar czf "$final/projection-logs.tgz" -C "$out" . ; cp "$out"/projection-results.jsonl "$final"/ 2>/dev/null' EXIT
export PRIMUS_WORKSPACE=/tmp/primus-ws PRIMUS_USER=dev
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
date -u +%Y-%m-%dT%H:%M:%SZ
case "$gpu_name" in *H200*) gpu=h200 ;; *) gpu=h100 ;; esac
cfg=configs/examples/megatron
none=(recompute_granularity=None)
full=(recompute_granularity=full recompute_method=uniform recompute_num_layers=1)
sel=(recompute_granularity=selective)

# run NAME CONFIG [overrides...]: train, project, append one JSON record
start=$(date +%s)
run() {
  local name=$1 config=$2; shift 2
  if [ $(( $(date +%s) - start )) -gt "${BUDGET_S:-530}" ]; then echo "skip $name (time budget)"; return; fi
  local t0=$(date +%s)
  rm -rf "$PRIMUS_WORKSPACE"
  PRIMUS_EXP_NAME=$name timeout 240 "$bin/primus" train pretrain --config "$config" --train_iters "$steps" \
    --log_interval 1 --eval_interval 0 "$@" > "$out/$name.log" 2>&1
  local rc=$?
  "$bin/primus" projection memory --config "$config" --gpu "$gpu" "$@" --json > "$out/$name.mem.json" 2>/dev/null
  "$bin/primus" projection performance --config "$config" --gpu "$gpu" "$@" --json > "$out/$name.perf.json" 2>/dev/null
  local metrics
  metrics=$(find "$PRIMUS_WORKSPACE" -path "*/$name/metrics.jsonl" | head -1)
  python3 - "$name" "$rc" "$metrics" "$out/$name.mem.json" "$out/$name.perf.json" "$*" >> "$out/projection-results.jsonl" <<'PY'
import json, statistics, sys
name, rc, metrics, mem, perf, args = sys.argv[1:7]
rec = {"name": name, "rc": int(rc), "args": args}
try:
    steps = [j for j in map(json.loads, open(metrics)) if "iter_ms" in j]
    rec["measured_ms"] = statistics.median(j["iter_ms"] for j in steps if j["step"] >= 4)
    rec["measured_peak_gb"] = max(j["mem_gb"] for j in steps)
except Exception as e:
    rec["error"] = repr(e)
try:
    rec["projected_peak_gb"] = json.load(open(mem))["peak_bytes"] / 1e9
    rec["projected_ms"] = json.load(open(perf))["step_time_s"] * 1e3
except Exception as e:
    rec["projection_error"] = repr(e)
print(json.dumps(rec))
PY
  tail -1 "$out/projection-results.jsonl"
  echo "   ($(( $(date +%s) - t0 )) s)"
}

for part in $parts; do
  case "$part" in
    workloads)
      for w in llama-124M llama3.2-1B-shape llama3-8B-4L qwen3-30B-A3B-4L mixtral-8x7B-2L; do
        run "${w}_none" "$cfg/bench_$w.yaml" "${none[@]}"
        run "${w}_full" "$cfg/bench_$w.yaml" "${full[@]}"
      done ;;
    grid1b)
      for mbs in 1 2 4; do
        run "1b_mbs${mbs}_none" "$cfg/bench_llama3.2-1B-shape.yaml" micro_batch_size=$mbs "${none[@]}"
        run "1b_mbs${mbs}_sel" "$cfg/bench_llama3.2-1B-shape.yaml" micro_batch_size=$mbs "${sel[@]}"
        run "1b_mbs${mbs}_full" "$cfg/bench_llama3.2-1B-shape.yaml" micro_batch_size=$mbs "${full[@]}"
      done
      run "1b_mbs8_sel" "$cfg/bench_llama3.2-1B-shape.yaml" "${sel[@]}" ;;
    grid8b)
      for mbs in 1 2 4; do
        for rc in none sel full; do
          declare -n ov=$rc
          run "8b_gbs4_mbs${mbs}_$rc" "$cfg/bench_llama3-8B-4L.yaml" global_batch_size=4 micro_batch_size=$mbs "${ov[@]}"
        done
      done ;;
    gpu_tests)
      "$bin/primus_gpu_tests" --quick ${GPU_FAMILIES:-} > "$out/gpu_tests.txt" 2>&1
      echo "== gpu_tests rc=$?"; tail -3 "$out/gpu_tests.txt"; grep -E "FAIL" "$out/gpu_tests.txt" | head -20 ;;
  esac
done
