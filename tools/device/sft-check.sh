#!/usr/bin/env bash
# Issue #23 on one GPU, one device call: the GPU test families of the packed-sequence kernels (RoPE at
# per-token positions, flash attention over packed rows), then `train posttrain` of the tiny Llama on WordNet
# instruction pairs on the GPU against the CPU reference (same init and data) for each row layout — packed
# with isolated samples, packed with shared attention, one sample per row — 30 steps, bar 2% per step
# (compare_tracking.py), with each layout's tokens/s.
# Needs BIN_DIR/primus and primus_gpu_tests, and .device/sft/wordnet.jsonl (`primus data sft-wordnet`).
# Usage: tools/device/sft-check.sh BIN_DIR
set -uo pipefail
bin=${1:-build}
final=${OUT:-/tmp/sft-final}
out=/tmp/sft-out
rm -rf "$out"; mkdir -p "$out" "$final"
trap 'tar czf "$final/sft-logs.tgz" -C "$out" .' EXIT
export PRIMUS_WORKSPACE=/tmp/sft-ws PRIMUS_USER=dev
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
date -u +%Y-%m-%dT%H:%M:%SZ
"$bin/primus_gpu_tests" --quick ${GPU_FAMILIES:-rope rope_positions attention_packed} > "$out/gpu_tests.txt" 2>&1
echo "== gpu_tests rc=$?"; tail -3 "$out/gpu_tests.txt"; grep -E "FAIL|time|TF" "$out/gpu_tests.txt" | head -30
common=(--config configs/examples/megatron/sft_tiny_llama-wordnet.yaml --sft_dataset_name .device/sft/wordnet.jsonl
        --tokenizer_type ByteTokenizer --tokenizer_model null --vocab_size null --load null --train_iters 30
        --log_interval 5)
for layout in isolated shared padded; do
  case $layout in
    isolated) ov=(--enable_packed_sequences true --use_packed_attention true) ;;
    shared) ov=(--enable_packed_sequences true --use_packed_attention false) ;;
    padded) ov=(--enable_packed_sequences false) ;;
  esac
  for dev in cpu cuda; do
    PRIMUS_EXP_NAME=${layout}_$dev OMP_NUM_THREADS=16 timeout 240 "$bin/primus" train posttrain "${common[@]}" \
      "${ov[@]}" --device $dev > "$out/${layout}_$dev.log" 2>&1
    echo "== $layout $dev rc=$?"; grep -E "^data|^done" "$out/${layout}_$dev.log" | cut -c1-240
  done
  python3 tools/device/compare_tracking.py "$PRIMUS_WORKSPACE/amd/dev/${layout}_cpu/metrics.jsonl" \
    "$PRIMUS_WORKSPACE/amd/dev/${layout}_cuda/metrics.jsonl" --tol 0.02 | tail -2
done
