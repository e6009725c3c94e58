#!/usr/bin/env bash
# Partial rotary (rotary_percent < 1; docs/kernels/fused.md) on one GPU, one call:
#   gpu:   primus_gpu_tests --quick rope rope_positions (the CUDA kernel against the CPU reference, among them
#          four partial cases: 0.5 and 0.25 on the vector path, two scalar-path shapes)
#   track: a micro Llama with 64-element heads, half of each rotated (rotary_percent 0.5: 32 elements, the
#          kernel's vector path), 40 steps on mock data on the GPU and on the CPU reference from the same init
#          and data (compare_tracking.py, 2% per step), and the same with the whole head for contrast
# Usage: tools/device/partial-rotary-check.sh BIN_DIR   (BIN_DIR/primus and BIN_DIR/primus_gpu_tests)
# PARTS="gpu track" selects. Logs in $OUT (default /tmp/partial-rotary).
set -uo pipefail
bin=${1:?usage: partial-rotary-check.sh BIN_DIR}
out=${OUT:-/tmp/partial-rotary}
parts=" ${PARTS:-gpu track} "
mkdir -p "$out"
ws=/tmp/partial-rotary-ws
rm -rf "$ws"
status=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
date -u +%Y-%m-%dT%H:%M:%SZ
if [[ "$parts" == *" gpu "* ]]; then
  timeout 200 "$bin/primus_gpu_tests" --quick rope rope_positions >"$out/gpu_tests.txt" 2>&1
  rc=$?
  echo "== gpu tests rope rope_positions: rc $rc"
  grep -E "rotary|checked cases" "$out/gpu_tests.txt" | cut -c1-160
  grep -E "FAIL|MISMATCH" "$out/gpu_tests.txt" | head -20
  [ $rc -eq 0 ] || status=1
fi
if [[ "$parts" == *" track "* ]]; then
  model=(--config tests/e2e/configs/fortunes_micro_llama.yaml --mock_data true --hidden_size 256
         --num_attention_heads 4 --num_query_groups 2 --ffn_hidden_size 512 --seq_length 128
         --train_iters 40 --lr_warmup_iters 4 --eval_interval 0 --log_interval 10)
  for pct in 0.5 1.0; do
    for dev in cpu cuda; do
      name=track_${pct}_$dev
      PRIMUS_WORKSPACE=$ws PRIMUS_EXP_NAME=$name PRIMUS_USER=dev OMP_NUM_THREADS=16 timeout 300 \
        "$bin/primus" train pretrain "${model[@]}" --device $dev --rotary_percent $pct >"$out/$name.log" 2>&1
      echo "== $name rc=$?"
      grep -E "^model:|^done:" "$out/$name.log" | cut -c1-200
    done
    python3 tools/device/compare_tracking.py "$(find $ws -path "*/track_${pct}_cpu/metrics.jsonl" | head -1)" \
      "$(find $ws -path "*/track_${pct}_cuda/metrics.jsonl" | head -1)" --tol 0.02 | tail -1 |
      sed "s/^/rotary_percent $pct: /"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
fi
echo "partial-rotary-check: $([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
