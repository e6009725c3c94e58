#!/usr/bin/env bash
# One device call: our trainer on the anchor's workloads and the PyTorch anchor, side by side.
# Usage (from the repo root on the GPU machine): tools/device/perf-run.sh BUILD_DIR [--no-torch]
# Needs: BUILD_DIR/primus (built here with CUDA), .perf/torch_baseline.py and .perf/fortunes (carried).
# Switches (environment): GPU_TESTS="gemm ..." limits primus_gpu_tests to those families (empty: all);
# TRACK_WARMUPS="default 5" the tracking runs; TUNE=0 skips the GEMM tuning pass; PROFILE=1 adds a profiled
# run of both workloads (steps 9-10) and prints its GPU timeline and op summary; SERIAL_UPDATE=1 also runs both
# workloads with the optimizer update after the step instead of under the next forward (PRIMUS_OVERLAP_UPDATE=0);
# DETERMINISTIC=1 also runs both with deterministic_mode (bitwise reproducible attention backward).
set -uo pipefail
build=${1:-build-cuda}
torch=1
[ "${2:-}" = "--no-torch" ] && torch=0
# Logs gather in a scratch folder and come back as one archive (the device tool returns at most 8 files).
final=${OUT:-/tmp/perf-final}
out=/tmp/perf-out
rm -rf "$out"; mkdir -p "$out" "$final"
trap 'tar czf "$final/perf-logs.tgz" -C "$out" . ; cp "$out"/*.json "$final"/ 2>/dev/null' EXIT
export PRIMUS_WORKSPACE=/tmp/primus-ws PRIMUS_QUICKSTART_DATA=$PWD/.perf/fortunes PRIMUS_USER=dev PRIMUS_HOME=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
date -u +%Y-%m-%dT%H:%M:%SZ

run() {  # name, then primus arguments
  local name=$1; shift
  local t0=$(date +%s)
  "$build/primus" train pretrain "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc ($(( $(date +%s) - t0 )) s)"
  grep -E "^iter|^done|ERROR|error" "$out/$name.log" | tail -4
}

# 0. Every op family against the CPU reference (when the test binary was carried).
if [ -x "$build/primus_gpu_tests" ]; then
  # shellcheck disable=SC2086
  "$build/primus_gpu_tests" --quick ${GPU_TESTS:-} > "$out/gpu_tests.txt" 2>&1
  echo "== gpu_tests rc=$?"; tail -3 "$out/gpu_tests.txt"; grep -E "FAIL" "$out/gpu_tests.txt" | head -20
fi
# 1. The quickstart model for 50 steps on the GPU and on the CPU reference (same init, same data).
# With the config's own warm-up, and with a 5-step warm-up (a harder test: larger early updates).
for warm in ${TRACK_WARMUPS-default 5}; do
  tiny=(--config configs/examples/megatron/tiny_llama-fortunes-bytes.yaml --train_iters 50 --eval_interval 0)
  [ "$warm" != default ] && tiny+=(--lr_warmup_iters "$warm")
  export PRIMUS_EXP_NAME=tiny_gpu_$warm; run tiny_gpu_$warm "${tiny[@]}" --device cuda
  export PRIMUS_EXP_NAME=tiny_cpu_$warm; run tiny_cpu_$warm "${tiny[@]}" --device cpu
  unset PRIMUS_EXP_NAME
  cp /tmp/primus-ws/amd/dev/tiny_gpu_$warm/metrics.jsonl "$out/tiny_gpu_${warm}_metrics.jsonl"
  cp /tmp/primus-ws/amd/dev/tiny_cpu_$warm/metrics.jsonl "$out/tiny_cpu_${warm}_metrics.jsonl"
  echo "== tracking, warm-up $warm"
  python3 tools/device/compare_tracking.py "$out/tiny_cpu_${warm}_metrics.jsonl" "$out/tiny_gpu_${warm}_metrics.jsonl" | tail -6
done
# 2. The anchor's workloads, with cuBLASLt's heuristic choice (untuned) ...
run bench_1b --config configs/examples/megatron/bench_llama3.2-1B-shape.yaml
grep -E "^iter (10|20)/" "$out/bench_1b.log"
run bench_8b4l --config configs/examples/megatron/bench_llama3-8B-4L.yaml
if [ "${SERIAL_UPDATE:-0}" = 1 ]; then
  PRIMUS_OVERLAP_UPDATE=0 run bench_1b_serial_update --config configs/examples/megatron/bench_llama3.2-1B-shape.yaml
  PRIMUS_OVERLAP_UPDATE=0 run bench_8b4l_serial_update --config configs/examples/megatron/bench_llama3-8B-4L.yaml
fi
if [ "${DETERMINISTIC:-0}" = 1 ]; then  # bitwise reproducible mode (docs/performance.md, "Reproducibility")
  run bench_1b_deterministic --config configs/examples/megatron/bench_llama3.2-1B-shape.yaml --deterministic_mode true
  run bench_8b4l_deterministic --config configs/examples/megatron/bench_llama3-8B-4L.yaml --deterministic_mode true
fi
if [ "${PROFILE:-0}" = 1 ]; then  # where the time goes, same binary and workloads
  source "$(dirname "$0")/find-cupti.sh"
  for w in bench_llama3.2-1B-shape bench_llama3-8B-4L; do
    export PRIMUS_EXP_NAME=prof_$w
    run prof_$w --config configs/examples/megatron/$w.yaml --train_iters 12 --profile true \
      --profile_step_start 9 --profile_step_end 10
    tr=$(ls /tmp/primus-ws/bench/dev/prof_$w/trace/rank0.json 2>/dev/null)
    [ -n "$tr" ] && "$build/primus" report timeline "$tr" > "$out/prof_$w.timeline.txt" 2>&1
    [ -n "$tr" ] && cp "$tr" "$out/prof_$w.trace.json"  # every kernel, for reading beyond the summary
    echo "== timeline $w (2 steps)"; head -45 "$out/prof_$w.timeline.txt"
    unset PRIMUS_EXP_NAME
  done
fi
# ... and after tuning every GEMM shape of both steps (primus benchmark gemm-dense --tune), loaded by the
# trainer through PRIMUS_GEMM_TUNING_FILE. The tuning reports (uplift per shape) come back in the logs.
tune=$out/gemm_tuning.json
if [ "${TUNE:-1}" = 1 ]; then
"$build/primus" benchmark gemm-dense --model llama3.2_1B --mbs 8 --seqlen 2048 --vocab-size 128256 --tune \
  --tuning-file "$tune" --output-file "$out/tune_1b.md" > "$out/tune_1b.log" 2>&1
echo "== tune 1b rc=$?"; tail -4 "$out/tune_1b.log"
"$build/primus" benchmark gemm-dense --model llama3.1_8B --mbs 1 --seqlen 8192 --num-layers 4 --tune \
  --tuning-file "$tune" --output-file "$out/tune_8b4l.md" > "$out/tune_8b4l.log" 2>&1
echo "== tune 8b4l rc=$?"; tail -4 "$out/tune_8b4l.log"
export PRIMUS_GEMM_TUNING_FILE=$tune
run bench_1b_tuned --config configs/examples/megatron/bench_llama3.2-1B-shape.yaml
run bench_1b_selective_tuned --config configs/examples/megatron/bench_llama3.2-1B-shape.yaml --recompute_granularity selective
run bench_8b4l_tuned --config configs/examples/megatron/bench_llama3-8B-4L.yaml
unset PRIMUS_GEMM_TUNING_FILE
fi
# 3. The PyTorch anchor, same machine, same call.
if [ "$torch" = 1 ]; then
  (cd .perf && OUT="$out" PYTHONUNBUFFERED=1 timeout 420 python3 torch_baseline.py > "$out/torch.log" 2>&1)
  echo "== torch rc=$?"
  grep -E '"model"|fail' "$out/torch.log" | cut -c1-220
fi
