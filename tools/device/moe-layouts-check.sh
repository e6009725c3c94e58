#!/usr/bin/env bash
# MoE models under tensor and context parallelism on GPUs (issue #19), one call on nvidia-h100-x2 / h200-x2:
#  ops    the moe_router GPU family (the aux loss's counts and its loss from them, context-parallel chunk
#         layouts, the z-loss's whole-batch mean) against the CPU reference;
#  stage  two ranks sharing GPU 0 through the host-staged tcp communicator: micro Mixtral at TP 2 (SP) and
#         at CP 2, 20 steps on mock data, against one process on the same GPU (bf16: curves within 2e-2);
#  nccl   one rank per GPU over NCCL: micro Mixtral TP 2 (SP), the DeepSeek-style model TP 2 (shared expert,
#         groups, bias), micro Qwen2-MoE TP 2 (gated shared expert), micro Mixtral CP 2 and CP 2 x EP 2 (the
#         two cp ranks exchange tokens), each against one GPU;
#  tied   a tied-embedding micro Llama under PP 2 (1F1B, ZB-H1) over NCCL against one GPU;
#  perf   Qwen3-30B-A3B dims 4L (T 4096), global batch 2, forced even routing: one GPU, TP 2 (SP), CP 2 and EP 2;
#         median of steps 11-30, tokens/s, peak memory and the ratio to one GPU.
# Carry .device (moel.tgz: stripped primus and primus_gpu_tests). Usage: PARTS="ops nccl perf" tools/device/moe-layouts-check.sh
set -uo pipefail
check=moel show='tensor parallel:|context parallel:|data parallel:|pipeline:'
parts=${PARTS:-ops stage nccl tied perf}
source "$(dirname "$0")/train_check_lib.sh"  # run, curves, bitwise; $out, $bin, $ngpu

if [[ " $parts " == *" ops "* ]]; then
  "$bin/primus_gpu_tests" moe_router >"$out/gpu_moe_router.txt" 2>&1
  echo "== ops rc=$?: $(grep -cw ok "$out/gpu_moe_router.txt") rows passed"
  grep -E "FAIL|aux counts T=120|aux loss T=124|z-loss T=120" "$out/gpu_moe_router.txt" | head -8 | cut -c1-160
fi

micro=(--config tests/e2e/configs/fortunes_micro_llama.yaml --mock_data true --train_iters 20 --seq_length 64
       --micro_batch_size 2 --global_batch_size 16 --eval_interval 0 --log_interval 5 --lr_warmup_iters 5)
if [[ " $parts " == *" stage "* ]]; then
  run mixtral_1gpu 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=micro_mixtral.yaml -- "${micro[@]}"
  for layout in "tp2:--tensor_model_parallel_size 2 --sequence_parallel true" "cp2:--context_parallel_size 2"; do
    read -ra lay <<<"${layout#*:}"
    run "mixtral_${layout%%:*}_stage" 2 180 CUDA_VISIBLE_DEVICES=0 PRIMUS_COMM_BACKEND=tcp \
      PRIMUS_E2E_MODEL=micro_mixtral.yaml -- "${micro[@]}" "${lay[@]}"
    curves "mixtral_${layout%%:*}_stage" mixtral_1gpu 2e-2
  done
fi

if [[ " $parts " == *" nccl "* ]] && [ "$ngpu" -ge 2 ]; then
  for model in micro_mixtral micro_deepseek_moe micro_qwen2_moe; do
    run "${model}_1gpu" 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=$model.yaml -- "${micro[@]}"
    run "${model}_tp2" 2 120 PRIMUS_E2E_MODEL=$model.yaml -- "${micro[@]}" --tensor_model_parallel_size 2 \
      --sequence_parallel true
    curves "${model}_tp2" "${model}_1gpu" 2e-2
  done
  run micro_mixtral_cp2 2 120 PRIMUS_E2E_MODEL=micro_mixtral.yaml -- "${micro[@]}" --context_parallel_size 2
  curves micro_mixtral_cp2 micro_mixtral_1gpu 2e-2
  run micro_mixtral_cp2ep2 2 120 PRIMUS_E2E_MODEL=micro_mixtral.yaml -- "${micro[@]}" --context_parallel_size 2 \
    --expert_model_parallel_size 2
  curves micro_mixtral_cp2ep2 micro_mixtral_1gpu 2e-2
fi

if [[ " $parts " == *" tied "* ]] && [ "$ngpu" -ge 2 ]; then
  tied=("${micro[@]}" --num_layers 8 --untie_embeddings_and_output_weights false)
  run tied_1gpu 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=micro_llama.yaml -- "${tied[@]}"
  run tied_pp2 2 120 PRIMUS_E2E_MODEL=micro_llama.yaml -- "${tied[@]}" --pipeline_model_parallel_size 2
  curves tied_pp2 tied_1gpu 2e-2
  run tied_pp2_zbh1 2 120 PRIMUS_E2E_MODEL=micro_llama.yaml -- "${tied[@]}" --pipeline_model_parallel_size 2 \
    --patch_zero_bubble true --enable_zero_bubble true
  curves tied_pp2_zbh1 tied_1gpu 2e-2
fi

if [[ " $parts " == *" perf "* ]] && [ "$ngpu" -ge 2 ]; then
  q=(--config configs/examples/megatron/bench_qwen3-30B-A3B-4L.yaml --train_iters 30 --log_interval 10
     --global_batch_size 2 --moe_router_force_load_balancing true --moe_router_force_load_balancing_type even)
  run qwen3_1gpu 1 150 CUDA_VISIBLE_DEVICES=0 -- "${q[@]}"
  run qwen3_tp2 2 150 -- "${q[@]}" --tensor_model_parallel_size 2 --sequence_parallel true
  run qwen3_cp2 2 150 -- "${q[@]}" --context_parallel_size 2 --overlap_grad_reduce true
  run qwen3_ep2 2 150 -- "${q[@]}" --expert_model_parallel_size 2 --overlap_grad_reduce true
  python3 - "$out" qwen3_1gpu qwen3_tp2 qwen3_cp2 qwen3_ep2 <<'PY'
import json, statistics, sys, os
out = sys.argv[1]
def med(name):
    p = f"{out}/{name}.jsonl"
    if not os.path.exists(p):
        return None, None, None
    rec = [json.loads(l) for l in open(p) if '"iter_ms"' in l]
    tail = [r["iter_ms"] for r in rec[10:]]
    tf = [r["tflops_gpu"] for r in rec[10:] if "tflops_gpu" in r]
    return ((statistics.median(tail) if tail else None), max((r.get("mem_gb", 0) for r in rec), default=0),
            (statistics.median(tf) if tf else None))
base = med(sys.argv[2])[0]
for n in sys.argv[2:]:
    m, mem, tf = med(n)
    if m is None:
        print(f"   {n}: no steps"); continue
    print(f"   {n}: median {m:.1f} ms per global batch of 2 x 4096 tokens, {2 * 4096 / m * 1e3:,.0f} tok/s, "
          f"peak {mem:.2f} GB" + (f", {tf:.0f} TFLOP/s per GPU" if tf else "") +
          (f", {base / m:.3f}x one GPU" if base else ""))
PY
fi
