#!/usr/bin/env bash
# `primus projection memory --backend cpu` against the CPU trainer's measured peak (the allocator's peak bytes,
# metrics.jsonl mem_gb) for the layouts the parallel tests train: one process (no / full / selective
# recompute, Primus's recompute_layer_ids, bf16 Adam moments), DDP, ZeRO-1 (+ bf16 moments), FSDP, TP, TP + SP (+ full recompute), CP, CP x TP, PP 1F1B / interleaved / ZB-H1 /
# ZB-V, tied embeddings over PP, EP (+ ZeRO-1 / FSDP), MoE under TP and CP, and the MoE / MLA / Qwen3 micro
# models. Each projection must be within 10% of
# the measurement (issue #22's bar). A small Llama (d 256, 4 layers, T 256) keeps constant overheads below
# the bar's noise. One step per run: the state is allocated before the first step, and 2 steps measured the
# same peaks to the byte (2026-12-07). Ranks start through `primus launch` (tcp backend; mpirun measured the same).
# Usage: projection_memory_test.sh PRIMUS
set -u
primus=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/primus-projmem-XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
common=(--config "$src/tests/e2e/configs/fortunes_micro_llama.yaml" --train_iters 1 --seq_length 256
        --micro_batch_size 2 --global_batch_size 8 --eval_interval 0 --log_interval 1 --lr_warmup_iters 0
        --mock_data true --hidden_size 256 --ffn_hidden_size 768 --num_layers 4 --num_attention_heads 8
        --num_query_groups 4)
moe=(--ffn_hidden_size 768 --moe_ffn_hidden_size 384 --num_experts 8)
small=(--hidden_size 128 --num_layers 3)
failed=0
# check NAME MODEL NP [overrides...]
check() {
  local name=$1 model=$2 np=$3
  shift 3
  local log="$work/$name.log"
  if [ "$np" -eq 1 ]; then
    env PRIMUS_WORKSPACE="$work" PRIMUS_EXP_NAME="$name" PRIMUS_E2E_MODEL="$model" OMP_NUM_THREADS=1 \
      "$primus" train pretrain "${common[@]}" "$@" >"$log" 2>&1
  else
    env PRIMUS_WORKSPACE="$work" PRIMUS_EXP_NAME="$name" PRIMUS_E2E_MODEL="$model" OMP_NUM_THREADS=1 timeout 300 \
      "$primus" launch --nproc-per-node "$np" --master-port 0 -- train pretrain "${common[@]}" "$@" >"$log" 2>&1
  fi || { tail -20 "$log"; echo "FAILED $name: training exited $?"; failed=1; return; }
  PRIMUS_E2E_MODEL="$model" "$primus" projection memory --backend cpu --nnodes 1 --nproc-per-node "$np" \
    "${common[@]}" "$@" --json >"$work/$name.json" 2>"$work/$name.err" ||
    { cat "$work/$name.err"; echo "FAILED $name: projection exited $?"; failed=1; return; }
  python3 - "$name" "$work/$name.json" "$(find "$work" -path "*/$name/metrics.jsonl" | head -1)" <<'PY' || failed=1
import json, sys
name, proj, metrics = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
measured = max(j.get("mem_gb", 0) for j in map(json.loads, open(metrics))) * 1e9
projected = proj["peak_bytes"]
ratio = projected / measured
print(f"{name:<22} measured {measured / 1e6:8.2f} MB  projected {projected / 1e6:8.2f} MB  ratio {ratio:.3f}")
sys.exit(0 if 0.9 <= ratio <= 1.1 else f"FAILED {name}: projected / measured = {ratio:.3f}, outside [0.9, 1.1]")
PY
}
check single micro_llama.yaml 1
check full_recompute micro_llama.yaml 1 --recompute_granularity full --recompute_method uniform
check selective micro_llama.yaml 1 --recompute_granularity selective
check layer_ids micro_llama.yaml 1 --recompute_granularity full --recompute_layer_ids "0,2"
check ddp2 micro_llama.yaml 2
# The precision-aware optimizer's bf16 moments: 4 bytes per parameter less, whole and sharded.
bf16m=(--use_precision_aware_optimizer true --exp_avg_dtype bf16 --exp_avg_sq_dtype bf16)
check single_bf16m micro_llama.yaml 1 "${bf16m[@]}"
check zero1_4_bf16m micro_llama.yaml 4 --use_distributed_optimizer true "${bf16m[@]}"
check zero1_2 micro_llama.yaml 2 --use_distributed_optimizer true
check zero1_4 micro_llama.yaml 4 --use_distributed_optimizer true
check fsdp4 micro_llama.yaml 4 --use_torch_fsdp2 true
check tp2 micro_llama.yaml 2 --tensor_model_parallel_size 2
check sp2_full micro_llama.yaml 2 --tensor_model_parallel_size 2 --sequence_parallel true \
  --recompute_granularity full --recompute_method uniform
check cp2 micro_llama.yaml 2 --context_parallel_size 2 --cp_comm_type all_gather
check cp2_tp2 micro_llama.yaml 4 --context_parallel_size 2 --tensor_model_parallel_size 2 \
  --sequence_parallel true --cp_comm_type all_gather
check pp2_1f1b micro_llama.yaml 2 --pipeline_model_parallel_size 2
check pp2_vpp2 micro_llama.yaml 4 --pipeline_model_parallel_size 2 --virtual_pipeline_model_parallel_size 2 \
  --num_layers 8
check pp2_zbh1 micro_llama.yaml 2 --pipeline_model_parallel_size 2 --patch_zero_bubble true \
  --enable_zero_bubble true
check pp2_zbv micro_llama.yaml 2 --pipeline_model_parallel_size 2 --patch_zero_bubble true \
  --zero_bubble_v_schedule true
check moe micro_mixtral.yaml 1 "${moe[@]}"
check ep2 micro_mixtral.yaml 2 "${moe[@]}" --expert_model_parallel_size 2
check ep2_zero1 micro_mixtral.yaml 4 "${moe[@]}" --expert_model_parallel_size 2 --use_distributed_optimizer true
check ep2_fsdp micro_mixtral.yaml 2 "${moe[@]}" --expert_model_parallel_size 2 --use_torch_fsdp2 true
check tp2_moe micro_mixtral.yaml 2 "${moe[@]}" --tensor_model_parallel_size 2 --sequence_parallel true
check cp2_moe micro_mixtral.yaml 2 "${moe[@]}" --context_parallel_size 2
check pp2_tied micro_llama.yaml 2 --pipeline_model_parallel_size 2 --untie_embeddings_and_output_weights false
check mla micro_deepseek_mla.yaml 1 "${small[@]}"
check deepseek_moe micro_deepseek_moe.yaml 1 "${small[@]}"
check mtp_full micro_deepseek_moe.yaml 1 "${small[@]}" --mtp_num_layers 1 --recompute_granularity full \
  --recompute_method uniform
check qwen2_moe micro_qwen2_moe.yaml 1 "${small[@]}"
check qwen3 micro_qwen3.yaml 1 --hidden_size 128
[ $failed -eq 0 ] || { echo "projection_memory_test FAILED"; exit 1; }
echo "projection_memory_test passed"
