#!/usr/bin/env bash
# Every dense model preset trains on one GPU: 10 steps of mock data each, full depth where the model fits in one
# GPU's memory with AdamW state (18 B/param), else its first 2 layers (every shape of the preset still runs:
# head dim, GQA ratio, q/k/v bias, qk-norm, vocabulary). Prints one line per preset and exits non-zero if any
# run fails. Usage: tools/device/presets-smoke.sh BUILD_DIR
#   PRESETS="qwen3_8B llama3.1_405B"  only these presets
#   NPROC=2 SMOKE_LAYERS=1             FSDP over NPROC GPUs (for presets whose embeddings alone outgrow one GPU)
set -uo pipefail
build=${1:-build-cuda}
nproc=${NPROC:-1}
smoke_layers=${SMOKE_LAYERS:-2}
export PRIMUS_WORKSPACE=/tmp/primus-presets PRIMUS_USER=dev PRIMUS_HOME=$PWD
mem_gb=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
mem_gb=$(( ${mem_gb:-81000} / 1024 ))
fail=0
exp=$(mktemp --suffix .yaml)
all="llama2_7B llama2_13B llama2_70B llama3_8B llama3_70B llama3.1_8B llama3.1_70B llama3.1_405B llama3.2_1B
     llama3.2_3B qwen2.5_0.5B qwen2.5_1.5B qwen2.5_7B qwen2.5_72B qwen3_0.6B qwen3_8B"
for name in ${PRESETS:-$all}; do
  cat > "$exp" <<YAML
work_group: presets
user_name: dev
exp_name: $name
workspace: /tmp/primus-presets
modules:
  pre_trainer:
    framework: megatron
    config: pre_trainer.yaml
    model: $name.yaml
    overrides: {device: cuda, mock_data: true, seq_length: 2048, micro_batch_size: 1, global_batch_size: 1,
                train_iters: 10, lr_warmup_iters: 1, log_interval: 10, eval_interval: 0}
YAML
  # Full depth only when 18 B/param plus ~25% for activations fits the GPU.
  params_b=$("$build/primus" train pretrain --config "$exp" --dry-run 2>/dev/null | awk '/^parameters/ {v = $2; if ($3 == "M") v /= 1000; if ($3 == "T") v *= 1000; print v}')
  layers=()
  if awk -v p="${params_b:-999}" -v m="$((mem_gb * nproc))" 'BEGIN {exit !(p * 18 * 1.25 > m)}'; then
    layers=(--num_layers "$smoke_layers")
  fi
  if [ "$nproc" -gt 1 ]; then
    run=("$build/primus" launch --nproc-per-node "$nproc" --master-port 0 -- train pretrain --use_torch_fsdp2 true
         --global_batch_size "$nproc")
  else
    run=("$build/primus" train pretrain)
  fi
  line=$("${run[@]}" --config "$exp" "${layers[@]}" 2>&1 | grep -E "done:|error" | tail -1)
  rc=${PIPESTATUS[0]}
  [ -z "$line" ] && rc=1
  printf '%-16s %-14s %s\n' "$name" "${layers[*]:-full depth}" "$line"
  [[ "$line" == *done:* ]] || fail=1
done
rm -f "$exp"
exit $fail
