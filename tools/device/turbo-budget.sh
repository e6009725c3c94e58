#!/usr/bin/env bash
# Issue #24's time budget of the dense workloads, time-boxed parts (everything lands in $OUT/budget-logs-PARTS.tgz):
#  ours   each workload in WORKLOADS, 30 steps, median of steps 11-30, peak memory (once per VARIANTS entry:
#         environment settings such as PRIMUS_CUDA_GRAPH=0; "-" = defaults);
#  prof   a profiled run of each workload (steps 9-10, CUPTI kernels) and `primus report timeline` of it: the
#         per-family and per-kernel GPU time, launches, busy share and the longest idle gaps;
#  gemm   `primus benchmark gemm-dense` of each workload's shapes: every GEMM of the step timed alone (the
#         GEMM floor at cuBLASLt's speed for the shape);
#  attn   `primus benchmark attention --backend all` at the anchor's attention shapes (hd64 B8 S2048, hd128
#         B4 S4096, 32/8 heads);
#  tests  primus_gpu_tests --quick for GPU_FAMILIES (default: all) against the CPU reference;
#  track  the 50-step GPU-vs-CPU loss check: the tiny fortunes model (carry .device/fortunes) on the GPU and
#         on the CPU reference from the same init and data, compared per step (compare_tracking.py);
#  sparse each workload with the dense and the row-sparse embedding gradient (PRIMUS_SPARSE_EMBEDDING_GRAD
#         0 / 1), 20 unclipped deterministic steps: losses compared bitwise, peaks, `primus projection memory`;
#  torch  ../shared/perf/torch_baseline.py with torch.compile only (TORCH_EAGER=1 keeps eager too) in the same
#         call: the ratio anchors.
# Workloads: 124m (bench_llama-124M: V 50304 d 768 L 12, T 1024 B 16), 124m_b4 (the same at B 4), 40m (d 512,
# L 8, 8 heads, FFN 2048, V 50304, T 1024 B 16), 1b (bench_llama3.2-1B-shape, T 2048 B 8), 8b4l
# (bench_llama3-8B-4L, T 8192 B 1).
# Carry .device/turbo (bin.tgz: stripped primus + primus_gpu_tests) and .perf (../shared/perf).
# Usage: PARTS="ours prof gemm attn torch" WORKLOADS="124m 1b" tools/device/turbo-budget.sh
set -uo pipefail
out=/tmp/budget-out
rm -rf "$out" && mkdir -p "$out"
bin=/tmp/budget-bin
mkdir -p "$bin" && tar xzf ".device/${BIN_DIR:-turbo}/bin.tgz" -C "$bin" --strip-components=1 || exit 1
parts=${PARTS:-ours prof gemm attn}
workloads=${WORKLOADS:-124m 124m_b4 40m 1b 8b4l}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
date -u +"%Y-%m-%dT%H:%M:%SZ"
t0=$SECONDS
finish() { tar czf "${OUT:-/tmp}/budget-logs-${parts// /_}.tgz" -C "$out" . 2>/dev/null; date -u +"%Y-%m-%dT%H:%M:%SZ"; }
trap finish EXIT  # one archive per invocation: name it by its parts

# The config and overrides of a workload, into the array `args`; its tokens per step into `tokens`.
workload_args() {
  local m=configs/examples/megatron
  case $1 in
    124m) args=(--config $m/bench_llama-124M.yaml); tokens=16384 ;;
    124m_b4) args=(--config $m/bench_llama-124M.yaml --micro_batch_size 4 --global_batch_size 4); tokens=4096 ;;
    40m) args=(--config $m/bench_llama-124M.yaml --hidden_size 512 --ffn_hidden_size 2048 --num_layers 8
               --num_attention_heads 8 --num_query_groups 8); tokens=16384 ;;
    1b) args=(--config $m/bench_llama3.2-1B-shape.yaml); tokens=16384 ;;
    8b4l) args=(--config $m/bench_llama3-8B-4L.yaml); tokens=8192 ;;
    *) echo "unknown workload $1"; return 1 ;;
  esac
}

if [[ " $parts " == *" tests "* ]]; then
  # shellcheck disable=SC2086  # the family list splits into arguments
  timeout "${GPU_BOX:-240}" "$bin/primus_gpu_tests" --quick ${GPU_FAMILIES:-} >"$out/gpu_tests.txt" 2>&1
  echo "== gpu tests rc=$? ($((SECONDS - t0)) s): $(grep -E 'checked cases' "$out/gpu_tests.txt")"
  grep -E "FAIL|crash" "$out/gpu_tests.txt" | cut -c1-200 | head -12
fi

if [[ " $parts " == *" track "* ]]; then
  for dev in cuda cpu; do
    rm -rf /tmp/track-$dev
    PRIMUS_WORKSPACE=/tmp/track-$dev PRIMUS_EXP_NAME=track PRIMUS_USER=dev PRIMUS_QUICKSTART_DATA=$PWD/.device/fortunes \
      timeout 240 "$bin/primus" train pretrain --config configs/examples/megatron/tiny_llama-fortunes-bytes.yaml \
      --train_iters 50 --eval_interval 0 --device $dev >"$out/track_$dev.log" 2>&1
    echo "== track $dev rc=$? ($((SECONDS - t0)) s)"
  done
  python3 tools/device/compare_tracking.py "$(find /tmp/track-cpu -name metrics.jsonl | head -1)" \
    "$(find /tmp/track-cuda -name metrics.jsonl | head -1)" | tail -4
fi

if [[ " $parts " == *" ours "* ]]; then
  for variant in ${VARIANTS:--}; do
    for w in $workloads; do
      workload_args "$w" || continue
      ws=/tmp/budget-ws && rm -rf "$ws"
      settings=()
      [ "$variant" != "-" ] && read -ra settings <<<"${variant//,/ }"
      log="$out/ours_$w.${variant//[^A-Za-z0-9_=-]/_}.log"
      env "${settings[@]}" PRIMUS_WORKSPACE=$ws PRIMUS_EXP_NAME=$w PRIMUS_USER=dev timeout 90 "$bin/primus" \
        train pretrain "${args[@]}" --train_iters 30 --log_interval 10 >"$log" 2>&1
      rc=$?
      python3 tools/device/step_median.py "$(find $ws -name metrics.jsonl | head -1)" "$w [$variant]" "$rc" "$tokens"
    done
  done
fi

if [[ " $parts " == *" sparse "* ]]; then
  # The row-sparse embedding gradient (train/sparse_embedding.h) against the dense one on the GPU, each
  # workload in WORKLOADS for 20 steps without clipping, in deterministic mode (attention's backward otherwise
  # sums dQ across blocks in any order): updates bitwise equal, so every loss must be too; and
  # the memory projection of each beside the measured peak.
  for w in $workloads; do
    workload_args "$w" || continue
    for mode in 0 1; do
      rm -rf /tmp/sparse-ws-$mode
      PRIMUS_SPARSE_EMBEDDING_GRAD=$mode PRIMUS_WORKSPACE=/tmp/sparse-ws-$mode PRIMUS_EXP_NAME=$w PRIMUS_USER=dev \
        timeout 90 "$bin/primus" train pretrain "${args[@]}" --train_iters 20 --log_interval 10 --clip_grad 0 --deterministic_mode true \
        >"$out/sparse_${w}_$mode.log" 2>&1
      echo "== sparse $w mode $mode rc=$? ($((SECONDS - t0)) s): $(grep -hE 'row-sparse|memory at peak' \
        "$out/sparse_${w}_$mode.log" | cut -c1-160 | tr '\n' ' ')"
    done
    python3 - "$(find /tmp/sparse-ws-0 -name metrics.jsonl | head -1)" "$(find /tmp/sparse-ws-1 -name metrics.jsonl | head -1)" "$w" <<'PY'
import json, sys
def steps(p): return [r for r in map(json.loads, open(p)) if 'loss' in r]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
same = sum(1 for x, y in zip(a, b) if json.dumps(x['loss']) == json.dumps(y['loss']))
gn = max(abs(x['grad_norm'] - y['grad_norm']) / max(1e-30, abs(x['grad_norm'])) for x, y in zip(a, b))
print(f"   {sys.argv[3]}: {same} of {len(a)} losses bitwise equal (dense vs row-sparse, {len(b)} steps); "
      f"grad norm max rel diff {gn:.2e}")
PY
    timeout 60 "$bin/primus" projection memory "${args[@]}" >"$out/sparse_${w}_projection.txt" 2>&1
    grep -iE "gradients|total|peak" "$out/sparse_${w}_projection.txt" | head -6 | cut -c1-160
  done
fi

if [[ " $parts " == *" prof "* ]]; then
  source tools/device/find-cupti.sh
  for w in $workloads; do
    workload_args "$w" || continue
    rm -rf /tmp/prof-ws
    PRIMUS_WORKSPACE=/tmp/prof-ws PRIMUS_EXP_NAME=prof PRIMUS_USER=dev timeout 90 "$bin/primus" train pretrain \
      "${args[@]}" --train_iters 12 --profile true --profile_step_start 9 --profile_step_end 10 \
      >"$out/prof_$w.log" 2>&1
    echo "== prof $w rc=$? ($((SECONDS - t0)) s)"
    tr=$(find /tmp/prof-ws -name rank0.json | head -1)
    if [ -n "$tr" ]; then
      "$bin/primus" report timeline "$tr" --json "$out/prof_$w.timeline.json" >"$out/prof_$w.timeline.txt" 2>&1
      head -70 "$out/prof_$w.timeline.txt"
      gzip -c "$tr" >"$out/prof_$w.trace.json.gz"
    fi
  done
fi

if [[ " $parts " == *" gemm "* ]]; then
  for w in $workloads; do
    case $w in  # the dims of each workload (gemm-dense takes explicit dims with a label)
      124m) dims=(--model llama-124M --hidden-size 768 --ffn-hidden-size 3072 --num-layers 12 --num-attention-heads 12
                  --num-query-groups 12 --head-dim 64 --vocab-size 50304 --mbs 16 --seqlen 1024) ;;
      1b) dims=(--model llama3.2_1B --vocab-size 128256 --mbs 8 --seqlen 2048) ;;
      8b4l) dims=(--model llama3.1_8B --num-layers 4 --mbs 1 --seqlen 8192) ;;
      *) continue ;;
    esac
    timeout 120 "$bin/primus" benchmark gemm-dense "${dims[@]}" --duration 0.3 \
      --output-file "$out/gemm_$w.md" >"$out/gemm_$w.txt" 2>&1
    echo "== gemm-dense $w rc=$? ($((SECONDS - t0)) s)"
    tail -25 "$out/gemm_$w.txt"
  done
fi

if [[ " $parts " == *" attn "* ]]; then
  for shape in "8 2048 64" "4 4096 128"; do
    read -r b s d <<<"$shape"
    timeout 120 "$bin/primus" benchmark attention -b "$b" --seq "$s" --head-dim "$d" --heads 32 --kv-heads 8 \
      --backend all --output-file "$out/attn_b${b}_s${s}_d${d}.md" >"$out/attn_b${b}_s${s}_d${d}.txt" 2>&1
    echo "== attention B$b S$s hd$d rc=$? ($((SECONDS - t0)) s)"
    tail -12 "$out/attn_b${b}_s${s}_d${d}.txt"
  done
fi

if [[ " $parts " == *" torch "* ]]; then
  modes='[True]'
  [ "${TORCH_EAGER:-0}" = 1 ] && modes='[False, True]'
  timeout "${TORCH_BOX:-300}" env PYTHONUNBUFFERED=1 OUT="$out" python3 -c "
src = open('.perf/torch_baseline.py').read().replace('for comp in [False, True]:', 'for comp in $modes:')
exec(compile(src, 'torch_baseline.py', 'exec'))
" >"$out/torch.txt" 2>&1
  echo "== torch rc=$? ($((SECONDS - t0)) s)"
  grep -E '^[{]"model|^fail|gemm_bf16|d2d_copy|attn_cudnn|attn_flash' "$out/torch.txt" | cut -c1-330
fi
