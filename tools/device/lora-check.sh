#!/usr/bin/env bash
# Issue #23 (LoRA) on one GPU, one device call:
#   1. primus_gpu_tests --quick of the families LoRA runs through ($GPU_TESTS, default gemm norm attention_packed dropout)
#   2. LoRA `train posttrain` of the micro and tiny Llama on the GPU against the CPU reference (same init and
#      data), 40 steps, bar 2% per step (compare_tracking.py)
#   3. the PEFT adapter of a GPU LoRA run against HF transformers + peft (lora_peft_check.py)
#   4. the bar on the llama3.2-1B shape, T 2048, micro-batch 8, packed variable-length samples (50-2048 byte
#      tokens): pretraining (mock data, fixed length) vs full SFT vs LoRA (rank 16, attention + MLP): tokens/s
#      and peak memory; LoRA >= 1.3x full SFT's tokens/s at <= 60% of its peak; packed SFT >= 90% of
#      pretraining's tokens/s.
#   5. (PARTS with profile) profiled steps 9-10 of the full-SFT and LoRA runs: their GPU timelines
#   6. (PARTS with peftmla) the same PEFT check on the micro DeepSeek-style model (multi-latent attention with a
#      query latent, dense MLPs): adapters on MLA's five projections and the MLP, exported with HF DeepSeek names
#      and interleaved rotary rows, against transformers + peft; and its GPU LoRA curve against the CPU's
# PARTS (default "tests track peft bench") picks the sections.
# Needs BIN_DIR/primus and BIN_DIR/primus_gpu_tests. Usage: tools/device/lora-check.sh BIN_DIR
set -uo pipefail
bin=${1:-build}
final=${OUT:-/tmp/lora-final}
out=/tmp/lora-out
rm -rf "$out"; mkdir -p "$out" "$final"
trap 'tar czf "$final/lora-logs.tgz" -C "$out" .; cp "$out"/*.json "$final"/ 2>/dev/null' EXIT
export PRIMUS_WORKSPACE=/tmp/lora-ws PRIMUS_USER=dev
rm -rf "$PRIMUS_WORKSPACE"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
date -u +%Y-%m-%dT%H:%M:%SZ
python3 -c "import peft; print('peft', peft.__version__)" 2>&1 | tail -1

parts=" ${PARTS:-tests track peft bench} "
want() { [[ "$parts" == *" $1 "* ]]; }
if want tests; then
  # shellcheck disable=SC2086
  timeout 300 "$bin/primus_gpu_tests" --quick ${GPU_TESTS:-gemm norm attention_packed dropout} > "$out/gpu_tests.txt" 2>&1
  echo "== gpu_tests rc=$?"; tail -3 "$out/gpu_tests.txt"; grep -E "FAIL" "$out/gpu_tests.txt" | head -20
fi

# Synthetic instruction data: reversed words (learnable), and variable-length samples for the bar.
python3 - "$out" <<'PY'
import json, random, sys
out = sys.argv[1]
r = random.Random(1)
with open(f"{out}/words.jsonl", "w") as f:
    for i in range(2000):
        w = "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(3, 12)))
        f.write(json.dumps({"instruction": "Spell backwards: " + w, "output": w[::-1]}) + "\n")
r = random.Random(3)
with open(f"{out}/bench.jsonl", "w") as f:
    for i in range(3000):  # byte tokens: lengths 50-2048 with the template's few
        n = r.randint(50, 2000); a = r.randint(10, n - 10)
        t = "".join(r.choice("abcdefghij klmnopqrstuvwxyz.,") for _ in range(n))
        f.write(json.dumps({"instruction": t[:a], "output": t[a:]}) + "\n")
PY

exp() {  # name model: an SFT experiment of $model on words.jsonl
  cat > "$out/$1.yaml" <<YAML
work_group: amd
user_name: dev
exp_name: \${PRIMUS_EXP_NAME:$1}
workspace: \${PRIMUS_WORKSPACE:./output}
modules:
  post_trainer:
    framework: megatron
    config: sft_trainer.yaml
    model: $2
    overrides:
      load: null
      sft_dataset_name: $out/words.jsonl
      tokenizer_type: ByteTokenizer
      make_vocab_size_divisible_by: 8
      enable_packed_sequences: true
      use_packed_attention: true
      seq_length: 256
      micro_batch_size: 8
      global_batch_size: 16
      train_iters: 40
      lr: 1.0e-3
      min_lr: 1.0e-4
      lr_warmup_iters: 4
      log_interval: 10
      eval_interval: 0
      lora:
        enabled: true
        dim: 8
        alpha: 16
YAML
}
exp lora_micro_llama micro_llama.yaml
exp lora_tiny_llama tiny_llama.yaml
# (the third run: LoRA dropout 0.1, whose position-keyed masks are the same on both devices)
want track && for run in micro_llama tiny_llama tiny_llama:dropout; do
  model=${run%%:*}
  name=${run/:/_}
  extra=()
  [ "$run" != "$model" ] && extra=(--lora.dropout 0.1)
  for dev in cpu cuda; do
    PRIMUS_EXP_NAME=${name}_$dev OMP_NUM_THREADS=16 timeout 240 "$bin/primus" train posttrain \
      --config "$out/lora_$model.yaml" --device $dev "${extra[@]}" > "$out/${name}_$dev.log" 2>&1
    echo "== lora $name $dev rc=$?"; grep -E "^LoRA: rank|^done" "$out/${name}_$dev.log" | cut -c1-200
  done
  python3 tools/device/compare_tracking.py "$PRIMUS_WORKSPACE/amd/dev/${name}_cpu/metrics.jsonl" \
    "$PRIMUS_WORKSPACE/amd/dev/${name}_cuda/metrics.jsonl" --tol 0.02 | grep -E "over|max relative"
done

# 3. HF transformers + peft: a full-SFT base of the tiny Llama exported to HF (f32), LoRA on it on the GPU.
if want peft; then
exp base tiny_llama.yaml
sed -i 's/        enabled: true/        enabled: false/' "$out/base.yaml"
PRIMUS_EXP_NAME=base timeout 120 "$bin/primus" train posttrain --config "$out/base.yaml" --train_iters 20 \
  --save "$out/base-ckpt" > "$out/base.log" 2>&1
echo "== base rc=$?"
"$bin/primus" convert primus-to-hf -i "$out/base-ckpt" -o "$out/base-hf" --dtype float32 > "$out/convert.log" 2>&1
echo "== convert rc=$?"
PRIMUS_EXP_NAME=peft timeout 120 "$bin/primus" train posttrain --config "$out/lora_tiny_llama.yaml" \
  --load "$out/base-hf" --train_iters 30 > "$out/peft_train.log" 2>&1
echo "== lora on the HF base rc=$?"; grep -E "^LoRA|^done" "$out/peft_train.log" | cut -c1-200
timeout 200 python3 tools/device/lora_peft_check.py "$bin/primus" "$out/base-hf" \
  "$PRIMUS_WORKSPACE/amd/dev/peft/peft_adapter" "$out/peft" 2>&1 | grep -v Warning | tail -8
echo "== peft check rc=${PIPESTATUS[0]}"
cp "$out/peft/lora_peft_report.json" "$out/" 2>/dev/null
fi

# 6. Multi-latent attention: the micro DeepSeek-style model without its MoE layers; packed rows with isolated
# samples (MLA's RoPE at per-sample positions in its pack step), except with the MTP depth (not carried there).
if want peftmla; then
mla=(--num_experts null)
mla_targets="['linear_q_down_proj','linear_q_up_proj','linear_kv_down_proj','linear_kv_up_proj','linear_proj','linear_fc1','linear_fc2']"
exp lora_mla micro_deepseek_mla.yaml
exp base_mla micro_deepseek_mla.yaml
sed -i 's/        enabled: true/        enabled: false/' "$out/base_mla.yaml"
# (mla_mtp: with the model's MTP depth on, which runs frozen while its loss trains the trunk's adapters)
for run in ${MLA_TRACK-mla mla_mtp}; do
  extra=(--mtp_num_layers 0)
  [ $run = mla_mtp ] && extra=(--mtp_num_layers 1 --use_packed_attention false)
  for dev in cpu cuda; do
    PRIMUS_EXP_NAME=${run}_$dev OMP_NUM_THREADS=16 timeout 240 "$bin/primus" train posttrain \
      --config "$out/lora_mla.yaml" --device $dev "${mla[@]}" "${extra[@]}" --lora.target_modules "$mla_targets" \
      > "$out/${run}_$dev.log" 2>&1
    echo "== lora $run $dev rc=$?"; grep -E "^LoRA: rank|^done" "$out/${run}_$dev.log" | cut -c1-200
  done
  python3 tools/device/compare_tracking.py "$PRIMUS_WORKSPACE/amd/dev/${run}_cpu/metrics.jsonl" \
    "$PRIMUS_WORKSPACE/amd/dev/${run}_cuda/metrics.jsonl" --tol 0.02 | grep -E "over|max relative"
done
mla+=(--mtp_num_layers 0)  # the PEFT check: transformers drops DeepSeek-V3's MTP layers
PRIMUS_EXP_NAME=base_mla timeout 120 "$bin/primus" train posttrain --config "$out/base_mla.yaml" "${mla[@]}" \
  --train_iters 20 --save "$out/base-mla-ckpt" > "$out/base_mla.log" 2>&1
echo "== mla base rc=$?"
"$bin/primus" convert primus-to-hf -i "$out/base-mla-ckpt" -o "$out/base-mla-hf" --dtype float32 \
  > "$out/convert_mla.log" 2>&1
echo "== mla convert rc=$?"; tail -2 "$out/convert_mla.log"
# The PEFT run adapts the five MLA projections only: peft 0.21 with transformers 5.17 maps DeepSeek-V3's
# gate/up/down target names onto the experts' fused parameters and drops adapters on dense MLP layers (its
# warning: target_parameters={'down_proj', 'gate_up_proj'} ... no parameter was matched; device 2026-12-07),
# so its logits would leave our MLP adapters out while merge-lora keeps them (ours = merged to 1e-7 there).
peft_targets=${MLA_PEFT_TARGETS:-"['linear_q_down_proj','linear_q_up_proj','linear_kv_down_proj','linear_kv_up_proj','linear_proj']"}
PRIMUS_EXP_NAME=peft_mla timeout 120 "$bin/primus" train posttrain --config "$out/lora_mla.yaml" "${mla[@]}" \
  --lora.target_modules "$peft_targets" --load "$out/base-mla-hf" --train_iters 30 > "$out/peft_mla_train.log" 2>&1
echo "== mla lora on the HF base rc=$?"; grep -E "^LoRA|^done|rror" "$out/peft_mla_train.log" | cut -c1-200
timeout 200 python3 tools/device/lora_peft_check.py "$bin/primus" "$out/base-mla-hf" \
  "$PRIMUS_WORKSPACE/amd/dev/peft_mla/peft_adapter" "$out/peft_mla" 2>&1 | grep -v Warning | tail -8
echo "== mla peft check rc=${PIPESTATUS[0]}"
cp "$out/peft_mla/lora_peft_report.json" "$out/lora_peft_report_mla.json" 2>/dev/null
fi

# 4. The bar: pretraining vs full SFT vs LoRA on the 1B shape, one GPU, this call.
bench() {  # name, then primus arguments
  local name=$1; shift
  PRIMUS_EXP_NAME=$name timeout 300 "$bin/primus" train "$@" > "$out/$name.log" 2>&1
  echo "== $name rc=$?"; grep -E "^data|^done" "$out/$name.log" | cut -c1-260
}
export PRIMUS_SFT_DATA=$out/bench.jsonl
if want bench; then
bench bench_pretrain pretrain --config configs/examples/megatron/bench_llama3.2-1B-shape.yaml
bench bench_sft_full posttrain --config configs/examples/megatron/bench_sft_llama3.2-1B-shape.yaml
bench bench_sft_lora posttrain --config configs/examples/megatron/bench_sft_llama3.2-1B-shape.yaml \
  --lora.enabled true
python3 - "$out" <<'PY'
import json, re, sys
out = sys.argv[1]
def done(name):
    t = open(f"{out}/{name}.log").read()
    m = re.search(r"median (\d+) ms/step, ([\d.]+)(k?) tok/s \| peak mem ([\d.]+) GB", t)
    if not m:
        return None
    fill = re.search(r"(\d+\.\d)% filled", t)
    return {"ms": int(m.group(1)), "tok_s": float(m.group(2)) * (1000 if m.group(3) else 1),
            "peak_gb": float(m.group(4)), "fill": float(fill.group(1)) / 100 if fill else 1.0}
r = {n: done(n) for n in ("bench_pretrain", "bench_sft_full", "bench_sft_lora")}
print(json.dumps(r))
if all(r.values()):
    p, f, l = r["bench_pretrain"], r["bench_sft_full"], r["bench_sft_lora"]
    res = {"lora_vs_full_tok_s": l["tok_s"] / f["tok_s"], "lora_vs_full_peak": l["peak_gb"] / f["peak_gb"],
           "packed_sft_vs_pretrain_tok_s": f["tok_s"] / p["tok_s"],
           "packed_sft_vs_pretrain_real_tok_s": f["tok_s"] * f["fill"] / p["tok_s"], "runs": r}
    print(f"LoRA / full SFT: tokens/s {res['lora_vs_full_tok_s']:.3f}x (bar >= 1.3), peak "
          f"{res['lora_vs_full_peak']:.3f} (bar <= 0.6); packed SFT / pretraining tokens/s "
          f"{res['packed_sft_vs_pretrain_tok_s']:.3f} (bar >= 0.9; {res['packed_sft_vs_pretrain_real_tok_s']:.3f} "
          f"counting only the rows' filled {f['fill']:.3f})")
    json.dump(res, open(f"{out}/lora_bench.json", "w"), indent=1)
PY
fi

# 5. Where the time goes: profiled steps 9-10 of full SFT and LoRA.
if want profile; then
  source "$(dirname "$0")/find-cupti.sh"
  for v in full lora; do
    extra=()
    [ $v = lora ] && extra=(--lora.enabled true)
    bench prof_$v posttrain --config configs/examples/megatron/bench_sft_llama3.2-1B-shape.yaml --train_iters 12 \
      --profile true --profile_step_start 9 --profile_step_end 10 "${extra[@]}"
    tr=$(ls "$PRIMUS_WORKSPACE"/bench/dev/prof_$v/trace/rank0.json 2>/dev/null)
    [ -n "$tr" ] && "$bin/primus" report timeline "$tr" > "$out/prof_$v.timeline.txt" 2>&1
    echo "== timeline $v (2 steps)"; head -60 "$out/prof_$v.timeline.txt"
  done
fi
