#!/usr/bin/env bash
# Tensor parallelism on GPUs (issue #19), one call on nvidia-h100-x2 / h200-x2 (ops, stage also on one GPU):
#  ops    primus_gpu_tests loss embedding (when the tgz holds it): the vocabulary-parallel kernels;
#  stage  two ranks sharing GPU 0 through the host-staged tcp communicator (CUDA_VISIBLE_DEVICES=0,
#         PRIMUS_COMM_BACKEND=tcp): micro Llama TP 2, micro Llama TP 2 + SP, micro Qwen3 TP 2 + SP, 20 steps on
#         mock data, against one process on the same GPU with the same global batch (bf16: within 2e-2);
#  nccl   the same with one rank per GPU over NCCL, and TP 2 + SP with ZeRO-1 is not possible on 2 GPUs (DP 1):
#         so TP 2 + SP with full recomputation;
#         (CASES: kinds tp, sp, async (SP + tp_comm_overlap), kv1, cp; also micro_llama:kv1 -- one kv head on both TP ranks -- and micro_llama / micro_qwen3 CP 2);
#  ckpt   TP 2 + SP and EP 2 + ZeRO-1 save over NCCL, one GPU resumes: joined curve vs one GPU;
#  bigckpt the Llama-3-8B-dims 4L model saved by TP 2 + SP over NCCL, resumed on one GPU;
#  cpperf Llama-3-8B dims 4L at T 32768 (full recomputation): one GPU vs CP 2;
#  tpprof profiled TP 2 + SP runs of Llama-3-8B dims 4L without and with async TP (traces to $OUT);
#  ncclenv TP 2 + SP with and without async TP under NCCL bandwidth settings (NCCL_ENVS);
#  dpperf the llama3.2-1B shape, global batch 16: one GPU (2 micro-batches accumulated) vs DDP on 2 GPUs
#         (DP_VARIANTS=1: and with the distributed optimizer; 2: that also with its update serial);
#  zero1eq ZeRO-1's shard update under the next forward vs serial: bitwise equal curves over NCCL;
#  perf   the PyTorch anchor (.perf/torch_baseline.py, this shape only), then Llama-3-8B dims 4L (T 8192), global batch 1 and 2: one GPU, then 2 GPUs with TP 2, TP 2 + SP, TP 2 + SP + async TP, and
#         (batch 2) DP 2; median of steps 11-30, tokens/s and the ratio to one GPU; the comm benchmark's
#         all-reduce / all-gather / reduce-scatter bandwidth at the TP message size for the floor.
# Carry .device (tp.tgz: stripped primus). Usage: PARTS="stage nccl perf" tools/device/tp-check.sh
set -uo pipefail
check=tp show='tensor parallel:|context parallel:|done:'
parts=${PARTS:-stage nccl perf}
source "$(dirname "$0")/train_check_lib.sh"  # run, curves, bitwise, medians; $out, $bin, $ngpu

# ops: the new kernels (vocabulary-parallel loss, vocabulary-sharded embedding) against their CPU references.
if [[ " $parts " == *" ops "* ]] && [ -x "$bin/primus_gpu_tests" ]; then
  timeout 300 "$bin/primus_gpu_tests" loss embedding attn_merge >"$out/gpu_tests.txt" 2>&1
  echo "== primus_gpu_tests loss embedding attn_merge rc=$?"
  grep -iE "merge|fail|checked cases" "$out/gpu_tests.txt" | head -30 | cut -c1-200
fi

micro=(--config tests/e2e/configs/fortunes_micro_llama.yaml --mock_data true --train_iters 20 --seq_length 64
       --micro_batch_size 2 --global_batch_size 16 --eval_interval 0 --log_interval 5 --lr_warmup_iters 5)
for part in stage nccl; do
  [[ " $parts " == *" $part "* ]] || continue
  [ "$part" = nccl ] && [ "$ngpu" -lt 2 ] && { echo "== nccl: skipped ($ngpu GPU)"; continue; }
  for case in ${CASES:-micro_llama:tp micro_llama:sp micro_qwen3:sp micro_llama:kv1 micro_llama:cp micro_qwen3:cp}; do
    model=${case%%:*} kind=${case##*:}
    extra=(--tensor_model_parallel_size 2)
    [ "$kind" = sp ] && extra+=(--sequence_parallel true)
    # async: async TP (tp_comm_overlap), the sequence-parallel collectives in slices under the GEMMs
    [ "$kind" = async ] && extra+=(--sequence_parallel true --tp_comm_overlap true)
    # kv1: one key/value head replicated on both TP ranks (the same model on one GPU: --num_query_groups 1)
    [ "$kind" = kv1 ] && extra+=(--num_query_groups 1)
    [ "$kind" = cp ] && extra=(--context_parallel_size 2 --cp_comm_type all_gather)
    kvflag=()
    [ "$kind" = kv1 ] && kvflag=(--num_query_groups 1)
    [ "$part" = nccl ] && [ "$kind" = sp ] && extra+=(--recompute_granularity full --recompute_method uniform)
    one="${model}_1gpu${kvflag[*]:+_kv1}"
    [ -f "$out/$one.jsonl" ] ||
      run "$one" 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=$model.yaml -- "${micro[@]}" "${kvflag[@]}"
    envs=(PRIMUS_E2E_MODEL=$model.yaml)
    [ "$part" = stage ] && envs+=(CUDA_VISIBLE_DEVICES=0 PRIMUS_COMM_BACKEND=tcp)
    run "${model}_${kind}2_$part" 2 180 "${envs[@]}" -- "${micro[@]}" "${extra[@]}"
    curves "${model}_${kind}2_$part" "$one" 2e-2
  done
done

# ckpt: checkpoints gathered over NCCL from split stores load into another layout: TP 2 + SP saves at
# iteration 10 and one GPU resumes to 20; EP 2 + ZeRO-1 the same (its gathers run on the GPU stream); each
# joined curve against the uninterrupted one GPU (bf16: 2e-2).
if [[ " $parts " == *" ckpt "* ]] && [ "$ngpu" -ge 2 ]; then
  for case in "micro_llama:--tensor_model_parallel_size 2 --sequence_parallel true" \
              "micro_mixtral:--expert_model_parallel_size 2 --use_distributed_optimizer true"; do
    model=${case%%:*}
    read -ra split <<<"${case#*:}"
    ck=/tmp/tp-ck/$model
    rm -rf "$ck"
    [ -f "$out/${model}_1gpu.jsonl" ] ||
      run "${model}_1gpu" 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=$model.yaml -- "${micro[@]}"
    run "${model}_save" 2 180 PRIMUS_E2E_MODEL=$model.yaml -- "${micro[@]}" "${split[@]}" --save "$ck" \
      --save_interval 10 --exit_interval 10
    run "${model}_resume" 1 120 CUDA_VISIBLE_DEVICES=0 PRIMUS_E2E_MODEL=$model.yaml -- "${micro[@]}" --save "$ck" \
      --auto_continue_train true
    grep -h "resuming from" "$out/${model}_resume.log" | head -1 | cut -c1-160
    cat "$out/${model}_save.jsonl" "$out/${model}_resume.jsonl" >"$out/${model}_joined.jsonl" 2>/dev/null
    curves "${model}_joined" "${model}_1gpu" 2e-2
  done
fi

# bigckpt: a checkpoint of the Llama-3-8B-dims 4L model (1.9 B parameters) saved by TP 2 + SP over NCCL at
# iteration 6, resumed by one GPU to 12: the joined curve against the uninterrupted one GPU (bf16: 2e-2), and
# the save's time.
if [[ " $parts " == *" bigckpt "* ]] && [ "$ngpu" -ge 2 ]; then
  b=(--config configs/examples/megatron/bench_llama3-8B-4L.yaml --train_iters 12 --log_interval 2)
  ck=/tmp/tp-ck/l8
  rm -rf "$ck"
  run l8_ck_1gpu 1 300 CUDA_VISIBLE_DEVICES=0 -- "${b[@]}"
  run l8_ck_save 2 300 -- "${b[@]}" --tensor_model_parallel_size 2 --sequence_parallel true --save "$ck" \
    --save_interval 6 --exit_interval 6
  grep -hE "checkpoint: (saved|wrote)|saved checkpoint" "$out/l8_ck_save.log" | head -2 | cut -c1-200
  run l8_ck_resume 1 300 CUDA_VISIBLE_DEVICES=0 -- "${b[@]}" --save "$ck" --auto_continue_train true
  grep -h "resuming from" "$out/l8_ck_resume.log" | head -1 | cut -c1-200
  cat "$out/l8_ck_save.jsonl" "$out/l8_ck_resume.jsonl" >"$out/l8_ck_joined.jsonl" 2>/dev/null
  curves l8_ck_joined l8_ck_1gpu 2e-2
  du -sh "$ck"/iter_* 2>/dev/null | head -2
fi

# cpperf: context parallelism on Llama-3-8B dims 4L at T 32768 (full recomputation so that one GPU fits):
# one GPU vs CP 2, same global batch of one sequence.
if [[ " $parts " == *" cpperf "* ]] && [ "$ngpu" -ge 2 ]; then
  c=(--config configs/examples/megatron/bench_llama3-8B-4L.yaml --train_iters ${CP_ITERS:-16} --log_interval 4
     --seq_length 32768 --max_position_embeddings 32768 --recompute_granularity full --recompute_method uniform)
  run l8_32k_1gpu 1 300 CUDA_VISIBLE_DEVICES=0 -- "${c[@]}"
  run l8_32k_cp2 2 300 -- "${c[@]}" --context_parallel_size 2 --cp_comm_type all_gather
  names="l8_32k_1gpu l8_32k_cp2"
  # CP_VARIANTS=1: the K/V gather on the compute stream (PRIMUS_CP_OVERLAP=0), the gradient reduction
  # overlapped with the backward, and that with the distributed optimizer.
  if [ "${CP_VARIANTS:-0}" = 1 ]; then
    run l8_32k_cp2_serialgather 2 300 PRIMUS_CP_OVERLAP=0 -- "${c[@]}" --context_parallel_size 2
    run l8_32k_cp2_ogr 2 300 -- "${c[@]}" --context_parallel_size 2 --overlap_grad_reduce true
    run l8_32k_cp2_zero1 2 300 -- "${c[@]}" --context_parallel_size 2 --overlap_grad_reduce true \
      --use_distributed_optimizer true --overlap_param_gather true
    names="$names l8_32k_cp2_serialgather l8_32k_cp2_ogr l8_32k_cp2_zero1"
  fi
  python3 - "$out" $names <<'PY'
import json, statistics, sys, os
out = sys.argv[1]
def med(n):
    p = f"{out}/{n}.jsonl"
    rec = [json.loads(l) for l in open(p) if '"iter_ms"' in l] if os.path.exists(p) else []
    tail = [r["iter_ms"] for r in rec[len(rec) // 2:]]
    return (statistics.median(tail) if tail else None), max((r.get("mem_gb", 0) for r in rec), default=0), len(rec)
base = med(sys.argv[2])[0]
for n in sys.argv[2:]:
    m, mem, k = med(n)
    print(f"   {n}: " + (f"median of the last {k - k // 2} of {k} steps {m:.1f} ms per 32768 tokens, "
                          f"{32768 / m * 1e3:,.0f} tok/s, peak {mem:.2f} GB, {base / m:.3f}x one GPU"
                          if m and base else "no steps"))
PY
fi

if [[ " $parts " == *" dpperf "* ]] && [ "$ngpu" -ge 2 ]; then
  # DP 2 (DDP, gradient reduction overlapped with the backward) against one GPU at the same global batch
  # (16 sequences of 2048 on the llama3.2-1B shape: one GPU accumulates 2 micro-batches of 8, two GPUs take
  # one each), the issue's DP 2 bar (>= 1.9x).
  d=(--config configs/examples/megatron/bench_llama3.2-1B-shape.yaml --train_iters 30 --log_interval 10
     --global_batch_size 16)
  run b1_1gpu_b16 1 300 CUDA_VISIBLE_DEVICES=0 -- "${d[@]}"
  run b1_dp2_b16 2 300 -- "${d[@]}" --overlap_grad_reduce true
  dnames="b1_1gpu_b16 b1_dp2_b16"
  # DP_VARIANTS=1: the distributed optimizer (reduce-scatter, each rank updates half, the bf16 weights
  # all-gathered under the next forward).
  if [ "${DP_VARIANTS:-0}" -ge 1 ]; then
    run b1_dp2_b16_zero1 2 300 -- "${d[@]}" --overlap_grad_reduce true --use_distributed_optimizer true \
      --overlap_param_gather true
    dnames="$dnames b1_dp2_b16_zero1"
  fi
  # DP_VARIANTS=2: also ZeRO-1 with its shard update on the compute stream (PRIMUS_ZERO1_UPDATE_STREAM=0: the
  # update before the next forward instead of under it).
  if [ "${DP_VARIANTS:-0}" -ge 2 ]; then
    run b1_dp2_b16_zero1_serial 2 300 PRIMUS_ZERO1_UPDATE_STREAM=0 -- "${d[@]}" --overlap_grad_reduce true \
      --use_distributed_optimizer true --overlap_param_gather true
    dnames="$dnames b1_dp2_b16_zero1_serial"
  fi
  # shellcheck disable=SC2086
  medians 10 b1_1gpu_b16 $((16 * 2048)) $dnames
fi

# zero1eq: ZeRO-1 (overlap_param_gather) over NCCL with the shard update on its own stream under the next
# forward vs on the compute stream (PRIMUS_ZERO1_UPDATE_STREAM=0): the same kernels on the same data, so the
# 20-step curves must be bitwise equal; micro Llama and micro Mixtral (expert regions updated with their layer).
if [[ " $parts " == *" zero1eq "* ]] && [ "$ngpu" -ge 2 ]; then
  for model in micro_llama micro_mixtral; do
    z=(--use_distributed_optimizer true --overlap_grad_reduce true --overlap_param_gather true)
    run "${model}_zero1_stream" 2 180 PRIMUS_E2E_MODEL=$model.yaml -- "${micro[@]}" "${z[@]}"
    run "${model}_zero1_serial" 2 180 PRIMUS_E2E_MODEL=$model.yaml PRIMUS_ZERO1_UPDATE_STREAM=0 -- "${micro[@]}" \
      "${z[@]}"
    bitwise "${model}_zero1_stream" "${model}_zero1_serial"
  done
fi

if [[ " $parts " == *" tpprof "* ]] && [ "$ngpu" -ge 2 ]; then
  # Profiled TP 2 + SP runs, without and with async TP (steps 9-10, CUPTI kernels): rank 0's trace and its
  # `primus report timeline`, to see what the collectives overlap.
  source "$(dirname "$0")/find-cupti.sh"
  l=(--config configs/examples/megatron/bench_llama3-8B-4L.yaml --train_iters 12 --log_interval 4
     --tensor_model_parallel_size 2 --sequence_parallel true --profile true --profile_step_start 9
     --profile_step_end 10)
  for v in sp async; do
    extra=()
    [ $v = async ] && extra=(--tp_comm_overlap true)
    run "l8_tp2${v}_prof" 2 200 -- "${l[@]}" "${extra[@]}"
    tr=$(find "/tmp/$check-ws/l8_tp2${v}_prof" -name rank0.json | head -1)
    if [ -n "$tr" ]; then
      "$bin/primus" report timeline "$tr" >"$out/l8_tp2${v}_prof.timeline.txt" 2>&1
      head -40 "$out/l8_tp2${v}_prof.timeline.txt" | cut -c1-200
      gzip -c "$tr" >"${OUT:-/tmp}/l8_tp2${v}_prof.trace.json.gz"
    fi
  done
fi

if [[ " $parts " == *" ncclenv "* ]] && [ "$ngpu" -ge 2 ]; then
  # TP 2 + SP with and without async TP under NCCL settings that trade SMs for bandwidth (NCCL_ENVS: a
  # space-separated list of NAME=VALUE[,NAME=VALUE] variants; "-" is NCCL's defaults).
  l=(--config configs/examples/megatron/bench_llama3-8B-4L.yaml --train_iters 30 --log_interval 10
     --tensor_model_parallel_size 2 --sequence_parallel true)
  names=""
  run l8_1gpu_env 1 200 CUDA_VISIBLE_DEVICES=0 -- --config configs/examples/megatron/bench_llama3-8B-4L.yaml \
    --train_iters 30 --log_interval 10
  for e in ${NCCL_ENVS:-- NCCL_PROTO=Simple NCCL_MIN_NCHANNELS=16 NCCL_MIN_NCHANNELS=32}; do
    envs=()
    [ "$e" != - ] && IFS=, read -ra envs <<<"$e"
    tag=$(echo "$e" | tr -c 'A-Za-z0-9\n' '_' | tr -d '\n')
    for v in sp async; do
      extra=()
      [ $v = async ] && extra=(--tp_comm_overlap true)
      run "l8_tp2${v}_$tag" 2 200 "${envs[@]}" -- "${l[@]}" "${extra[@]}"
      names="$names l8_tp2${v}_$tag"
    done
  done
  medians 10 l8_1gpu_env 8192 l8_1gpu_env $names
fi

if [[ " $parts " == *" perf "* ]] && [ "$ngpu" -ge 2 ]; then
  # The PyTorch anchor for the same shape on GPU 0 (a local copy of ../shared/perf/torch_baseline.py that
  # runs only this workload; carried in .perf).
  if [ -f .perf/torch_baseline.py ]; then
    (cd .perf && CUDA_VISIBLE_DEVICES=0 OUT="$out" TORCH_ONLY=llama3-8B-4L timeout 300 python3 torch_baseline.py \
      >"$out/torch.log" 2>&1)
    grep '"llama3-8B-4L"' "$out/torch.log" | cut -c1-260
  fi
  # The TP messages: [8192, 4096] bf16 = 64 MiB (all-reduce), 32 MiB per rank (all-gather / reduce-scatter).
  timeout 200 "$bin/primus" launch --nproc-per-node 2 --master-port 0 -- benchmark comm --backend nccl \
    --ops all_reduce,all_gather,reduce_scatter --sizes 32M,64M 2>&1 | tail -12 | tee "$out/comm.txt"
  l=(--config configs/examples/megatron/bench_llama3-8B-4L.yaml --train_iters 30 --log_interval 10)
  for gbs in ${TP_GBS:-1 2}; do
    run "l8_1gpu_b$gbs" 1 200 CUDA_VISIBLE_DEVICES=0 -- "${l[@]}" --global_batch_size $gbs
    run "l8_tp2_b$gbs" 2 200 -- "${l[@]}" --global_batch_size $gbs --tensor_model_parallel_size 2
    run "l8_tp2sp_b$gbs" 2 200 -- "${l[@]}" --global_batch_size $gbs --tensor_model_parallel_size 2 \
      --sequence_parallel true
    run "l8_tp2async_b$gbs" 2 200 -- "${l[@]}" --global_batch_size $gbs --tensor_model_parallel_size 2 \
      --sequence_parallel true --tp_comm_overlap true
    if [ $gbs = 2 ]; then
      run l8_dp2_b2 2 200 -- "${l[@]}" --global_batch_size 2 --overlap_grad_reduce true
    fi
  done
  medians 10 l8_1gpu_b1 8192 l8_1gpu_b1 l8_tp2_b1 l8_tp2sp_b1 l8_tp2async_b1
  medians 10 l8_1gpu_b2 16384 l8_1gpu_b2 l8_tp2_b2 l8_tp2sp_b2 l8_tp2async_b2 l8_dp2_b2
fi
