#!/usr/bin/env bash
# Expert parallelism on GPUs (issue #19), one call on nvidia-h100-x2 / h200-x2:
#  stage  two ranks sharing GPU 0 through the host-staged tcp communicator (CUDA_VISIBLE_DEVICES=0,
#         PRIMUS_COMM_BACKEND=tcp): micro Mixtral and micro DeepSeek-style MoE with EP 2, 20 steps on mock data,
#         against one process on the same GPU with the same global batch (bf16: curves within 2e-2);
#  nccl   the same with one rank per GPU over NCCL;
#  perf   Qwen3-30B-A3B dims 4L (T 4096), global batch 2: one GPU, then 2 GPUs with DP 2 (experts replicated)
#         and with EP 2 (overlap_grad_reduce on); median of steps 11-30, tokens/s and the ratio to one GPU;
#  fsdp   EP 2 with FSDP and with ZeRO-1 over NCCL vs one GPU (micro Mixtral, 2e-2);
#  shared the exchange beside the shared expert: micro Qwen2-MoE / DeepSeek-style EP 2 vs one GPU, and
#         DeepSeek-V2-Lite dims 4L one GPU vs EP 2 with and without the overlap (PRIMUS_EP_OVERLAP=0);
#  overlap the overlapped optimizer update under DDP and EP 2 vs the serial one (PRIMUS_OVERLAP_UPDATE=0):
#         bitwise equal curves;
#  prof   a profiled EP 2 run (steps 9-10, rank 0's CUPTI kernels) and `primus report timeline` of it
#         (EP_ARGS: extra arguments).
#  tp     EP 2 x TP 2 (SP) over NCCL on 4 GPUs (Megatron's etp x ep grid, expert TP = TP): micro Mixtral,
#         the micro DeepSeek-style model and micro Qwen2-MoE (its gated shared expert's tp all-reduce runs on the
#         compute stream while the tokens travel over ep on the side stream) vs one GPU (2e-2); then EP 2 x TP 2
#         with ZeRO-1 saves micro Mixtral at iteration 10 and one GPU resumes to 20 (joined curve, 2e-2).
#         Needs nvidia-h100-x4 / h200-x4.
# Carry .device (ep.tgz: stripped primus). Usage: PARTS="stage nccl perf" tools/device/ep-check.sh
set -uo pipefail
check=ep show='data parallel:|done:'
parts=${PARTS:-stage nccl perf}
source "$(dirname "$0")/train_check_lib.sh"  # run, curves, bitwise; $out, $bin, $ngpu

micro=(--config tests/e2e/configs/fortunes_micro_llama.yaml --mock_data true --train_iters 20 --seq_length 64
       --micro_batch_size 2 --global_batch_size 16 --eval_interval 0 --log_interval 5 --lr_warmup_iters 5)
for part in stage nccl; do
  [[ " $parts " == *" $part "* ]] || continue
  [ "$part" = nccl ] && [ "$ngpu" -lt 2 ] && { echo "== nccl: skipped ($ngpu GPU)"; continue; }
  for model in micro_mixtral micro_deepseek_moe; do
    run "${model}_1gpu" 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=$model.yaml -- "${micro[@]}"
    if [ "$part" = stage ]; then
      run "${model}_ep2_$part" 2 180 CUDA_VISIBLE_DEVICES=0 PRIMUS_COMM_BACKEND=tcp PRIMUS_E2E_MODEL=$model.yaml \
        -- "${micro[@]}" --expert_model_parallel_size 2
    else
      run "${model}_ep2_$part" 2 180 PRIMUS_E2E_MODEL=$model.yaml -- "${micro[@]}" --expert_model_parallel_size 2
    fi
    curves "${model}_ep2_$part" "${model}_1gpu" 2e-2
  done
done

# tp: EP 2 x TP 2 with sequence parallelism over NCCL (4 GPUs) against one GPU, and a checkpoint of that layout
# resumed by one GPU.
if [[ " $parts " == *" tp "* ]]; then
  if [ "$ngpu" -lt 4 ]; then
    echo "== tp: skipped ($ngpu GPUs; EP 2 x TP 2 needs 4)"
  else
    eptp=(--expert_model_parallel_size 2 --tensor_model_parallel_size 2)
    for model in micro_mixtral micro_deepseek_moe micro_qwen2_moe; do
      run "${model}_1gpu_sp" 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=$model.yaml -- "${micro[@]}" \
        --sequence_parallel true
      run "${model}_ep2tp2" 4 180 PRIMUS_E2E_MODEL=$model.yaml -- "${micro[@]}" --sequence_parallel true "${eptp[@]}"
      curves "${model}_ep2tp2" "${model}_1gpu_sp" 2e-2
    done
    ck=/tmp/ep-ck/eptp
    rm -rf "$ck"
    z1=(--sequence_parallel true --use_distributed_optimizer true)
    run micro_mixtral_1gpu_z1 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=micro_mixtral.yaml -- "${micro[@]}" \
      "${z1[@]}"
    run micro_mixtral_ep2tp2_save 4 180 PRIMUS_E2E_MODEL=micro_mixtral.yaml -- "${micro[@]}" "${z1[@]}" \
      "${eptp[@]}" --save "$ck" --save_interval 10 --exit_interval 10
    run micro_mixtral_ep2tp2_resume 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=micro_mixtral.yaml -- \
      "${micro[@]}" "${z1[@]}" --save "$ck" --auto_continue_train true
    grep -h "resuming from" "$out/micro_mixtral_ep2tp2_resume.log" | head -1 | cut -c1-160
    cat "$out/micro_mixtral_ep2tp2_save.jsonl" "$out/micro_mixtral_ep2tp2_resume.jsonl" \
      >"$out/micro_mixtral_ep2tp2_joined.jsonl" 2>/dev/null
    curves micro_mixtral_ep2tp2_joined micro_mixtral_1gpu_z1 2e-2
  fi
fi

# fsdp: EP 2 with FSDP and with ZeRO-1 over NCCL against one GPU (the micro Mixtral).
if [[ " $parts " == *" fsdp "* ]] && [ "$ngpu" -ge 2 ]; then
  run micro_mixtral_1gpu 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=micro_mixtral.yaml -- "${micro[@]}"
  run micro_mixtral_ep2_fsdp 2 120 PRIMUS_E2E_MODEL=micro_mixtral.yaml -- "${micro[@]}" \
    --expert_model_parallel_size 2 --use_torch_fsdp2 true
  curves micro_mixtral_ep2_fsdp micro_mixtral_1gpu 2e-2
  run micro_mixtral_ep2_zero1 2 120 PRIMUS_E2E_MODEL=micro_mixtral.yaml -- "${micro[@]}" \
    --expert_model_parallel_size 2 --use_distributed_optimizer true --overlap_param_gather true
  curves micro_mixtral_ep2_zero1 micro_mixtral_1gpu 2e-2
fi

# shared: the exchange beside the shared expert. Correctness: micro Qwen2-MoE (gated shared expert) and the
# DeepSeek-style micro model EP 2 vs one GPU; speed: DeepSeek-V2-Lite dims 4L (2 shared experts, MLA), global
# batch 2, forced even routing: one GPU, EP 2, EP 2 with PRIMUS_EP_OVERLAP=0.
if [[ " $parts " == *" shared "* ]] && [ "$ngpu" -ge 2 ]; then
  for model in micro_qwen2_moe micro_deepseek_moe; do
    run "${model}_1gpu" 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=$model.yaml -- "${micro[@]}"
    run "${model}_ep2_shared" 2 120 PRIMUS_E2E_MODEL=$model.yaml -- "${micro[@]}" --expert_model_parallel_size 2
    curves "${model}_ep2_shared" "${model}_1gpu" 2e-2
  done
  ds=(--config configs/examples/megatron/bench_deepseek_v2_lite-4L.yaml --train_iters 30 --log_interval 10
      --global_batch_size 2 --moe_router_force_load_balancing true --moe_router_force_load_balancing_type even)
  run ds_1gpu_even 1 150 CUDA_VISIBLE_DEVICES=0 -- "${ds[@]}"
  run ds_ep2_even 2 150 -- "${ds[@]}" --overlap_grad_reduce true --expert_model_parallel_size 2
  run ds_ep2_even_nooverlap 2 150 PRIMUS_EP_OVERLAP=0 -- "${ds[@]}" --overlap_grad_reduce true \
    --expert_model_parallel_size 2
  python3 - "$out" <<'PY'
import json, statistics, sys, os
out = sys.argv[1]
def med(n):
    p = f"{out}/{n}.jsonl"
    rec = [json.loads(l) for l in open(p) if '"iter_ms"' in l] if os.path.exists(p) else []
    tail = [r["iter_ms"] for r in rec[10:]]
    return (statistics.median(tail) if tail else None), max((r.get("mem_gb", 0) for r in rec), default=0)
base, _ = med("ds_1gpu_even")
for n in ("ds_1gpu_even", "ds_ep2_even", "ds_ep2_even_nooverlap"):
    m, mem = med(n)
    print(f"   {n}: " + (f"median {m:.1f} ms per global batch of 2 x 4096 tokens, {2 * 4096 / m * 1e3:,.0f} tok/s, "
                          f"peak {mem:.2f} GB, {base / m:.3f}x one GPU" if m and base else "no steps"))
PY
fi

# overlap: the overlapped optimizer update under DDP and EP 2 (NCCL) gives bitwise the serial update's curves.
if [[ " $parts " == *" overlap "* ]] && [ "$ngpu" -ge 2 ]; then
  for model in micro_llama micro_mixtral; do
    ep=1
    [ $model = micro_mixtral ] && ep=2
    for v in 1 0; do
      run "${model}_ov$v" 2 120 PRIMUS_OVERLAP_UPDATE=$v PRIMUS_E2E_MODEL=$model.yaml -- "${micro[@]}" \
        --expert_model_parallel_size $ep --overlap_grad_reduce true
    done
    bitwise "${model}_ov1" "${model}_ov0"
  done
fi

if [[ " $parts " == *" prof "* ]] && [ "$ngpu" -ge 2 ]; then
  source "$(dirname "$0")/find-cupti.sh"
  # shellcheck disable=SC2086
  run qwen3_ep2_prof 2 150 -- --config configs/examples/megatron/bench_qwen3-30B-A3B-4L.yaml --train_iters 12 \
    --global_batch_size 2 --overlap_grad_reduce true --expert_model_parallel_size 2 --profile true \
    --profile_step_start 9 --profile_step_end 10 ${EP_ARGS:-}
  for r in 0 1; do
    tr=$(find /tmp/ep-ws/qwen3_ep2_prof -name "rank$r.json" | head -1)
    [ -n "$tr" ] && "$bin/primus" report timeline "$tr" >"$out/qwen3_ep2_prof.rank$r.timeline.txt" 2>&1
    echo "-- rank $r"
    sed -n '1,12p;/Top kernels/,/Longest/p' "$out/qwen3_ep2_prof.rank$r.timeline.txt" 2>/dev/null | head -24 |
      cut -c1-160
  done
fi

if [[ " $parts " == *" perf "* ]] && [ "$ngpu" -ge 2 ]; then
  q=(--config configs/examples/megatron/bench_qwen3-30B-A3B-4L.yaml --train_iters 30 --log_interval 10
     --global_batch_size 2)
  run qwen3_1gpu 1 150 CUDA_VISIBLE_DEVICES=0 -- "${q[@]}"
  run qwen3_dp2 2 150 -- "${q[@]}" --overlap_grad_reduce true
  run qwen3_ep2 2 150 -- "${q[@]}" --overlap_grad_reduce true --expert_model_parallel_size 2
  names="qwen3_1gpu qwen3_dp2 qwen3_ep2"
  # Forced even routing (Primus's MoE benchmark setting, moe_router_force_load_balancing): on mock data the
  # real router sends up to 16x the mean load to one expert, and under EP the rank owning the busy experts
  # makes the other wait at every all-to-all.
  fb=(--moe_router_force_load_balancing true --moe_router_force_load_balancing_type even)
  run qwen3_1gpu_even 1 150 CUDA_VISIBLE_DEVICES=0 -- "${q[@]}" "${fb[@]}"
  run qwen3_ep2_even 2 150 -- "${q[@]}" "${fb[@]}" --overlap_grad_reduce true --expert_model_parallel_size 2
  names="$names qwen3_1gpu_even qwen3_ep2_even"
  # EVEN_VARIANTS: more forced-even EP 2 runs with extra arguments, ';'-separated
  # (e.g. "--use_distributed_optimizer true --overlap_param_gather true;--grad_reduce_in_bf16 true").
  IFS=';' read -ra evs <<<"${EVEN_VARIANTS:-}"
  for i in "${!evs[@]}"; do
    read -ra extra <<<"${evs[$i]}"
    run "qwen3_ep2_even_v$i" 2 150 -- "${q[@]}" "${fb[@]}" --overlap_grad_reduce true \
      --expert_model_parallel_size 2 "${extra[@]}"
    echo "   (qwen3_ep2_even_v$i: ${evs[$i]})"
    names="$names qwen3_ep2_even_v$i"
  done
  # EP_VARIANTS: more EP 2 runs with environment settings (e.g. PRIMUS_NCCL_BLOCKING=1).
  for v in ${EP_VARIANTS:-}; do
    tag=qwen3_ep2_${v//[^A-Za-z0-9]/_}
    run "$tag" 2 150 "${v//,/ }" -- "${q[@]}" --overlap_grad_reduce true --expert_model_parallel_size 2
    names="$names $tag"
  done
  python3 - "$out" $names <<'PY'
import json, statistics, sys, os
out = sys.argv[1]
def med(name):
    p = f"{out}/{name}.jsonl"
    if not os.path.exists(p):
        return None, None
    rec = [json.loads(l) for l in open(p) if '"iter_ms"' in l]
    tail = [r["iter_ms"] for r in rec[10:]]
    return (statistics.median(tail) if tail else None), max((r.get("mem_gb", 0) for r in rec), default=0)
for n in sys.argv[2:]:
    base, _ = med("qwen3_1gpu_even" if "_even" in n else "qwen3_1gpu")
    m, mem = med(n)
    if m is None:
        print(f"   {n}: no steps"); continue
    tok = 2 * 4096 / m * 1e3
    print(f"   {n}: median {m:.1f} ms per global batch of 2 x 4096 tokens, {tok:,.0f} tok/s, peak {mem:.2f} GB"
          + (f", {base / m:.3f}x one GPU" if base else ""))
PY
fi
