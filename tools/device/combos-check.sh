#!/usr/bin/env bash
# Layout and recipe combinations that train on the CPU reference, checked on GPUs (issues #19, #20, #23), one
# call on nvidia-h100-x2 / h200-x2; each against one GPU with the same global batch, 20 steps, bf16:
#  lora   LoRA SFT (rank 4 on the micro Llama, packed JSONL written here): FP8 base projections (delayed
#         scaling) against BF16 on one GPU (within FP8's rounding, 5e-2); attention adapters on a micro MoE, DP 2
#         over NCCL; PP 2 over NCCL (rows without isolation);
#  mtp    the DeepSeek-style MoE with one multi-token-prediction depth, 8 layers, PP 2 (1F1B and ZB-H1) over NCCL;
#  zbfsdp a micro Llama of 8 layers under ZB-H1 x FSDP 2 on 4 ranks... on two GPUs: PP 2 x FSDP 1 is not FSDP, so
#         this part runs PP 2 ZB-H1 with FSDP over 2 ranks sharing each GPU through the host-staged
#         communicator (4 ranks on 2 GPUs).
#  bias   the DeepSeek-style micro MoE (expert bias, aux-loss-free balancing) with sharded optimizer state:
#         DP 2 with the distributed optimizer and FSDP 2 over NCCL;
#  mtptp  the DeepSeek-style micro MoE with one MTP depth under TP 2 (+ SP) and CP 2 over NCCL;
#  eptp   the micro Mixtral under EP 2 x TP 2 (x DP 2 folded): 4 ranks on 2 GPUs, host-staged communicator.
# Carry .device (combo.tgz: stripped primus). Usage: PARTS="lora mtp zbfsdp" tools/device/combos-check.sh
set -uo pipefail
check=combo show='LoRA: rank|pipeline parallel:|data parallel:'
parts=${PARTS:-lora mtp zbfsdp}
source "$(dirname "$0")/train_check_lib.sh"  # run, curves, bitwise; $out, $bin, $ngpu

if [[ " $parts " == *" lora "* ]]; then
  export PRIMUS_SFT_DATA=$out/sft.jsonl
  python3 tests/mpi/spell_backwards_sft.py "$PRIMUS_SFT_DATA"  # (run from the repository root)
  lora=(--config tests/e2e/configs/sft_lora_micro_llama.yaml --train_iters 20 --seq_length 96 --micro_batch_size 2
        --global_batch_size 16 --eval_interval 0 --log_interval 5 --lr_warmup_iters 5 --clip_grad 0.5)
  STAGE=posttrain run lora_bf16 1 120 CUDA_VISIBLE_DEVICES=0 -- "${lora[@]}"
  STAGE=posttrain run lora_fp8 1 120 CUDA_VISIBLE_DEVICES=0 -- "${lora[@]}" --fp8 hybrid
  curves lora_fp8 lora_bf16 5e-2
  if [ "$ngpu" -ge 2 ]; then
    moe=(--num_experts 4 --moe_router_topk 2 --moe_ffn_hidden_size 96 --moe_aux_loss_coeff 0.01
         --lora.target_modules "['linear_qkv','linear_proj']")
    STAGE=posttrain run lora_moe_1gpu 1 120 CUDA_VISIBLE_DEVICES=0 -- "${lora[@]}" "${moe[@]}"
    STAGE=posttrain run lora_moe_dp2 2 120 -- "${lora[@]}" "${moe[@]}"
    curves lora_moe_dp2 lora_moe_1gpu 2e-2
    pp=(--num_layers 4 --use_packed_attention false)
    STAGE=posttrain run lora_pp_1gpu 1 120 CUDA_VISIBLE_DEVICES=0 -- "${lora[@]}" "${pp[@]}"
    STAGE=posttrain run lora_pp2 2 120 -- "${lora[@]}" "${pp[@]}" --pipeline_model_parallel_size 2
    curves lora_pp2 lora_pp_1gpu 2e-2
  fi
fi

micro=(--config tests/e2e/configs/fortunes_micro_llama.yaml --mock_data true --train_iters 20 --seq_length 64
       --micro_batch_size 2 --global_batch_size 16 --eval_interval 0 --log_interval 5 --lr_warmup_iters 5)
if [[ " $parts " == *" mtp "* ]] && [ "$ngpu" -ge 2 ]; then
  mtp=("${micro[@]}" --num_layers 8 --moe_layer_freq "([0]*2+[1]*6)" --mtp_num_layers 1)
  run mtp_1gpu 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=micro_deepseek_moe.yaml -- "${mtp[@]}"
  run mtp_pp2 2 120 PRIMUS_E2E_MODEL=micro_deepseek_moe.yaml -- "${mtp[@]}" --pipeline_model_parallel_size 2
  curves mtp_pp2 mtp_1gpu 2e-2
  run mtp_pp2_zbh1 2 120 PRIMUS_E2E_MODEL=micro_deepseek_moe.yaml -- "${mtp[@]}" \
    --pipeline_model_parallel_size 2 --patch_zero_bubble true --enable_zero_bubble true
  curves mtp_pp2_zbh1 mtp_1gpu 2e-2
fi

# zbdiag: the same 4-rank layout twice (bitwise equal unless something races), and with 1F1B x FSDP and ZB-H1 x
# DDP beside it, to place a difference.
if [[ " $parts " == *" zbdiag "* ]] && [ "$ngpu" -ge 2 ]; then
  zb=("${micro[@]}" --num_layers 8)
  four=(PRIMUS_COMM_BACKEND=tcp PRIMUS_E2E_MODEL=micro_llama.yaml)
  run zb_1gpu 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=micro_llama.yaml -- "${zb[@]}"
  for v in a b; do
    run "zbfsdp_$v" 4 180 "${four[@]}" -- "${zb[@]}" --pipeline_model_parallel_size 2 --patch_zero_bubble true \
      --enable_zero_bubble true --use_torch_fsdp2 true
  done
  bitwise zbfsdp_a zbfsdp_b
  run f1b_fsdp 4 180 "${four[@]}" -- "${zb[@]}" --pipeline_model_parallel_size 2 --use_torch_fsdp2 true
  run zb_ddp 4 180 "${four[@]}" -- "${zb[@]}" --pipeline_model_parallel_size 2 --patch_zero_bubble true \
    --enable_zero_bubble true
  run dp_fsdp 4 180 "${four[@]}" -- "${zb[@]}" --use_torch_fsdp2 true
  for n in zbfsdp_a f1b_fsdp zb_ddp dp_fsdp; do curves "$n" zb_1gpu 2e-2; done
  python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def g(n):
    try:
        return [round(json.loads(l)["grad_norm"], 4) for l in open(f"{out}/{n}.jsonl") if '"loss"' in l]
    except OSError:
        return []
for n in ("zb_1gpu", "zbfsdp_a", "zbfsdp_b", "f1b_fsdp", "zb_ddp", "dp_fsdp"):
    print(f"   {n:10s} grad norms {g(n)}")
PY
fi

if [[ " $parts " == *" zbfsdp "* ]] && [ "$ngpu" -ge 2 ]; then
  zb=("${micro[@]}" --num_layers 8)
  run zb_1gpu 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=micro_llama.yaml -- "${zb[@]}"
  # 4 ranks on 2 GPUs (two per GPU): the host-staged tcp communicator.
  run zb_pp2_fsdp2 4 180 PRIMUS_COMM_BACKEND=tcp PRIMUS_E2E_MODEL=micro_llama.yaml -- "${zb[@]}" \
    --pipeline_model_parallel_size 2 --patch_zero_bubble true --enable_zero_bubble true --use_torch_fsdp2 true
  curves zb_pp2_fsdp2 zb_1gpu 2e-2
fi

if [[ " $parts " == *" bias "* ]] && [ "$ngpu" -ge 2 ]; then
  ds=("${micro[@]}" --num_layers 3)
  run bias_1gpu 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=micro_deepseek_moe.yaml -- "${ds[@]}"
  run bias_zero1 2 120 PRIMUS_E2E_MODEL=micro_deepseek_moe.yaml -- "${ds[@]}" --use_distributed_optimizer true
  curves bias_zero1 bias_1gpu 2e-2
  run bias_fsdp 2 120 PRIMUS_E2E_MODEL=micro_deepseek_moe.yaml -- "${ds[@]}" --use_torch_fsdp2 true
  curves bias_fsdp bias_1gpu 2e-2
fi

if [[ " $parts " == *" mtptp "* ]] && [ "$ngpu" -ge 2 ]; then
  mt=("${micro[@]}" --num_layers 3 --mtp_num_layers 1)
  run mtptp_1gpu 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=micro_deepseek_moe.yaml -- "${mt[@]}"
  run mtptp_tp2 2 120 PRIMUS_E2E_MODEL=micro_deepseek_moe.yaml -- "${mt[@]}" --tensor_model_parallel_size 2 \
    --sequence_parallel true
  curves mtptp_tp2 mtptp_1gpu 2e-2
  run mtptp_cp2 2 120 PRIMUS_E2E_MODEL=micro_deepseek_moe.yaml -- "${mt[@]}" --context_parallel_size 2
  curves mtptp_cp2 mtptp_1gpu 2e-2
fi

if [[ " $parts " == *" eptp "* ]] && [ "$ngpu" -ge 2 ]; then
  run eptp_1gpu 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=micro_mixtral.yaml -- "${micro[@]}"
  run eptp_4 4 180 PRIMUS_COMM_BACKEND=tcp PRIMUS_E2E_MODEL=micro_mixtral.yaml -- "${micro[@]}" \
    --tensor_model_parallel_size 2 --sequence_parallel true --expert_model_parallel_size 2
  curves eptp_4 eptp_1gpu 2e-2
fi
