#!/usr/bin/env bash
# Data-parallel training under mpirun (ctest runs these; see tests/CMakeLists.txt). A micro Llama on the CPU,
# 20 steps, global batch 16 (micro-batch 2), mpi backend.
#   ddp|ddp_bf16|zero1|fsdp|hsdp NP: the DP run's loss and grad-norm curves equal, bitwise, those of one process
#        emulating the layout's reduction order (PRIMUS_DP_EMULATE=NP: the same micro-batches, per-rank partial
#        sums added in the group's rank order), and stay within 1e-5 relative of the plain single-process curve
#        (sequential accumulation of all micro-batches; a different f32 summation order)
#   ddp_fp8 / fsdp_fp8 NP: the same with FP8 projections (delayed hybrid: the amaxes reduced over dp make
#        every rank cast with the single process's scales; rowwise under FSDP), bitwise against the emulation
#   ddp_sparse NP: DDP with the input embedding's gradient row-sparse (forced: the byte vocabulary is small),
#        the ranks reserving the union of their rows and all-reducing those slots, against DDP with the dense
#        gradient: the losses bitwise (unclipped: each row's sum over the ranks in the same order, untouched
#        rows adding zeros), the gradient norm within f32 rounding (it sums the slots after the rest)
#   dszero1 NP: the micro DeepSeek-style MoE (expert bias, groups, shared expert, a dense first layer) with
#        ZeRO-1, whose ranks hold chunks of the optimizer state but the whole expert bias: the curves as above
#        (bitwise the emulation's but for the logged aux loss, 1e-5 of one process); the expert bias of every
#        MoE layer in the runs' iteration-20 checkpoints bitwise equal (and moved); the run resumed from the
#        distributed run's iteration-10 checkpoint at NP ranks continues it bitwise, bias included
#   dsfsdp NP: the same with FSDP against the emulation (the one process and the resume go through the same
#        code as under ZeRO-1: left to dszero1, for time)
#   resume NP1 NP2: FSDP; save at iteration 10 at NP1 ranks, resume at NP2 ranks; bitwise equal to the
#        emulated single process doing the same (10 steps as NP1, resume, 10 steps as NP2)
#   zero1_bf16m NP / resume_bf16m NP1 NP2: ZeRO-1 / the FSDP resume with the precision-aware optimizer's bf16
#        moments (sharded; gathered into the f32 checkpoint store and loaded back): bitwise the emulation's
#   kill NP: rank 2 SIGKILLs itself in the middle of iteration 3: the job exits non-zero within 30 s and the
#        output names the dead rank
#   sigterm NP: DDP; rank 1 alone gets SIGTERM as iteration 3 starts: the job saves iteration 3 and every rank
#        stops there with exit code 0, rank 0 saying "received SIGTERM" (the request travels with the losses)
#   disagree NP: the ranks resolve different seeds (mpirun's MPMD form gives the last rank another; under
#        `primus launch` the config reads ${LOCAL_RANK}): every rank stops at start-up, exit non-zero within
#        60 s, the last rank naming the differing line (parallel/config_agreement.h)
#   launch_<mode>: the same with ranks started by `primus launch` (tcp backend) instead of mpirun
# Usage: dp_train_test.sh MODE MPIRUN PRIMUS NP [NP2]
set -u
mode=$1 mpirun=$2 primus=$3 np=$4 np2=${5:-2}
src=$(cd "$(dirname "$0")/../.." && pwd)
source "$src/tests/mpi/train_runs.sh"  # init_runs, run, compare, refuse
init_runs dp


case "$mode" in
  launch_*)  # the same cases with ranks started by `primus launch` (tcp backend) instead of mpirun
    LAUNCH=1
    mode=${mode#launch_}
    ;;
esac
# The precision-aware optimizer's bf16 moments (the shards hold them; checkpoints gather them into f32 and
# load them back).
bf16m=(--use_precision_aware_optimizer true --exp_avg_dtype bf16 --exp_avg_sq_dtype bf16)
case "$mode" in
  ddp) keys=(--overlap_grad_reduce true) ;;
  ddp_sparse) keys=(--overlap_grad_reduce true --clip_grad 0) ;;
  ddp_bf16) keys=(--overlap_grad_reduce true --grad_reduce_in_bf16 true) ;;
  ddp_fp8) keys=(--overlap_grad_reduce true --fp8 hybrid) ;;
  fsdp_fp8) keys=(--use_torch_fsdp2 true --fp8 e4m3 --fp8_recipe rowwise) ;;
  zero1) keys=(--use_distributed_optimizer true --overlap_grad_reduce true --overlap_param_gather true) ;;
  fsdp | resume | dsfsdp) keys=(--use_torch_fsdp2 true) ;;
  zero1_bf16m) keys=(--use_distributed_optimizer true --overlap_grad_reduce true "${bf16m[@]}") ;;
  resume_bf16m) keys=(--use_torch_fsdp2 true "${bf16m[@]}") ;;
  dszero1) keys=(--use_distributed_optimizer true --overlap_grad_reduce true --overlap_param_gather true) ;;
  hsdp) keys=(--use_torch_fsdp2 true --data_parallel_replicate_degree 2) ;;
  kill | disagree) keys=() ;;
  sigterm) keys=(--overlap_grad_reduce true) ;;
  *) fail "unknown mode $mode" ;;
esac

case "$mode" in
  ddp | ddp_bf16 | ddp_fp8 | zero1 | zero1_bf16m | fsdp | fsdp_fp8 | hsdp)
    run dist "$np" -- "${keys[@]}"
    run_reference emulated 0 PRIMUS_DP_EMULATE="$np" -- "${keys[@]}"
    compare dist emulated 0
    # bf16 reductions, FP8 casts and bf16 moments turn the single process's other f32 summation order into
    # more than 1e-5.
    if [ "$mode" != ddp_bf16 ] && [ "$mode" != ddp_fp8 ] && [ "$mode" != fsdp_fp8 ] &&
       [ "$mode" != zero1_bf16m ]; then
      run_reference single 0 -- "${keys[@]}"
      compare dist single 1e-5
    fi
    grep -h "data parallel:" "$work/dist.log" | head -1
    if [ "$mode" = fsdp ] || [ "$mode" = hsdp ]; then
      # Memory: each rank holds 1/shards of the master weights, moments and gradients.
      shards=$np
      [ "$mode" = hsdp ] && shards=$((np / 2))
      grep -h "parameter state per rank" "$work/dist.log" | head -1 | python3 -c '
import re, sys
line, k = sys.stdin.read(), int(sys.argv[1])
v = dict(re.findall(r"(master|moments|gradients|whole model:) ([0-9.]+)", line))
whole, per = float(v["whole model:"]), float(v["master"]) + float(v["moments"]) + float(v["gradients"])
print(f"state per rank {per} vs whole {whole} / {k} shards")
sys.exit(0 if abs(per * k - whole) <= 0.02 * whole else 1)' "$shards" || fail "per-rank state is not 1/$shards"
    fi
    ;;
  ddp_sparse)
    run dist "$np" PRIMUS_SPARSE_EMBEDDING_GRAD=2 -- "${keys[@]}"
    grep -q "input embedding gradient: row-sparse" "$work/dist.log" ||
      fail "the DDP run did not hold the embedding gradient row-sparse"
    run dense "$np" PRIMUS_SPARSE_EMBEDDING_GRAD=0 -- "${keys[@]}"
    grep -q "input embedding gradient: row-sparse" "$work/dense.log" && fail "the dense run was row-sparse"
    compare dist dense 0 1e-6
    ;;
  dszero1 | dsfsdp)
    ds=PRIMUS_E2E_MODEL=micro_deepseek_moe.yaml
    run dist "$np" "$ds" -- "${keys[@]}" --save "$work/ckpt_dist" --save_interval 10
    run emulated 0 "$ds" PRIMUS_DP_EMULATE="$np" -- "${keys[@]}" --save "$work/ckpt_emulated"
    # Bitwise but the logged aux loss: a sum over the ranks in the all-reduce's order (the emulation adds the
    # virtual ranks' forwards in turn).
    compare dist emulated 0 0 1e-7
    if [ "$mode" = dsfsdp ]; then
      compare_expert_bias "$work"/ckpt_{dist,emulated}/iter_0000020
      echo "dp_train_test: $mode passed"
      exit 0
    fi
    run single 0 "$ds" -- "${keys[@]}" --save "$work/ckpt_single"
    compare dist single 1e-5
    # Iterations 11-20 again, from the sharded run's checkpoint (its bias gathered from the chunks, then
    # whole on every rank again), joined to the first 10 of the uninterrupted run.
    run resumed "$np" "$ds" -- "${keys[@]}" --load "$work/ckpt_dist/iter_0000010" --save "$work/ckpt_resumed"
    grep -q "resuming from" "$work/resumed.log" || fail "the resumed run did not load iteration 10"
    python3 - "$work/dist.jsonl" "$work/resumed.jsonl" <<'PY'
import json, sys
first = [l for l in open(sys.argv[1]) if json.loads(l).get("step", 0) <= 10]
rest = open(sys.argv[2]).read()
open(sys.argv[2], "w").write("".join(first) + rest)
PY
    compare dist resumed 0
    compare_expert_bias "$work"/ckpt_{dist,emulated,single,resumed}/iter_0000020
    ;;
  resume | resume_bf16m)
    save=(--save "$work/ckpt_dist" --save_interval 10 --exit_interval 10)
    run dist "$np" -- "${keys[@]}" "${save[@]}"
    run dist "$np2" -- "${keys[@]}" "${save[@]}" --auto_continue_train true
    grep -q "resuming from" "$work/dist.log" || fail "the $np2-rank run did not resume"
    esave=(--save "$work/ckpt_emu" --save_interval 10 --exit_interval 10)
    run emulated 0 PRIMUS_DP_EMULATE="$np" -- "${keys[@]}" "${esave[@]}"
    run emulated 0 PRIMUS_DP_EMULATE="$np2" -- "${keys[@]}" "${esave[@]}" --auto_continue_train true
    compare dist emulated 0
    if [ "$mode" = resume ]; then
      run_reference single 0 -- "${keys[@]}"
      compare dist single 1e-5
    fi
    ;;
  sigterm)
    run dist "$np" PRIMUS_INJECT_SIGTERM=3:1 -- "${keys[@]}" --save "$work/ckpt" --save_interval 100
    # run() already required exit code 0 from every rank: had rank 1 stopped alone, the others would have
    # failed in the next step's collectives. Rank 0 (the one that logs) must name rank 1's signal.
    grep -q "rank 1 sends itself SIGTERM in iteration 3" "$work/dist.log" || fail "the injection did not fire"
    grep -q "stopping after iteration 3: received SIGTERM (checkpoint saved)" "$work/dist.log" ||
      { tail -20 "$work/dist.log"; fail "rank 0 did not stop after iteration 3 on rank 1's SIGTERM"; }
    [ "$(cat "$work/ckpt/latest" 2>/dev/null)" = iter_0000003 ] ||
      fail "the latest checkpoint is not iteration 3: $(ls "$work/ckpt")"
    steps=$(grep -c '"loss"' "$work/dist.jsonl")
    [ "$steps" -eq 3 ] || fail "$steps steps recorded, expected 3"
    ;;
  disagree)
    start=$(date +%s%N)
    if [ -n "${LAUNCH:-}" ]; then  # one command for all ranks: the seed comes from each rank's LOCAL_RANK
      sed 's/^      clip_grad: .*/&\n      seed: ${LOCAL_RANK:0}/' "$src/tests/e2e/configs/fortunes_micro_llama.yaml" \
        >"$work/disagree.yaml"
      out=$(PRIMUS_WORKSPACE="$work" PRIMUS_EXP_NAME=disagree OMP_NUM_THREADS=1 timeout 60 \
            "$primus" launch --nproc-per-node "$np" --master-port 0 -- train pretrain \
            --config "$work/disagree.yaml" "${common[@]:2}" 2>&1)
      code=$?
      expect="seed: $((np - 1)) (rank 0: seed: 0)"
    else  # mpirun's MPMD form: the last rank gets another seed
      out=$(timeout 60 "$mpirun" "${flags[@]}" -x PRIMUS_EXP_NAME=disagree \
            -np $((np - 1)) "$primus" train pretrain "${common[@]}" --seed 1234 : \
            -np 1 "$primus" train pretrain "${common[@]}" --seed 99 2>&1)
      code=$?
      expect="seed: 99 (rank 0: seed: 1234)"
    fi
    elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
    echo "$out" | grep -E "configuration|seed" | head -12
    echo "dp_train_test: disagree: exit code $code, ${elapsed_ms} ms"
    [ "$code" -ne 0 ] || fail "the job exited 0"
    [ "$code" -ne 124 ] || fail "the job hung (killed by timeout after 60 s)"
    echo "$out" | grep -q "rank $((np - 1)) resolved a different configuration than rank 0:" ||
      fail "rank $((np - 1)) did not log its different configuration"
    echo "$out" | grep -qF "$expect" || fail "the differing line ($expect) is not named"
    echo "$out" | grep -q "iter 1" && fail "a step ran although the ranks disagree"
    ;;
  kill)
    start=$(date +%s%N)
    if [ -n "${LAUNCH:-}" ]; then
      out=$(PRIMUS_WORKSPACE="$work" PRIMUS_EXP_NAME=kill PRIMUS_INJECT_KILL=3:2 OMP_NUM_THREADS=1 timeout 60 \
            "$primus" launch --nproc-per-node "$np" --master-port 0 -- train pretrain "${common[@]}" 2>&1)
    else
      out=$(timeout 60 "$mpirun" "${flags[@]}" -x PRIMUS_EXP_NAME=kill -x PRIMUS_INJECT_KILL=3:2 -np "$np" \
            "$primus" train pretrain "${common[@]}" 2>&1)
    fi
    code=$?
    elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
    echo "$out" | tail -15
    echo "dp_train_test: kill: exit code $code, ${elapsed_ms} ms"
    [ "$code" -ne 0 ] || fail "the job exited 0"
    [ "$code" -ne 124 ] || fail "the job hung (killed by timeout after 60 s)"
    [ "$elapsed_ms" -lt 30000 ] || fail "took ${elapsed_ms} ms (limit 30 s)"
    echo "$out" | grep -Eq "process rank 2 .*(signal 9|Killed)|primus launch: failed: rank 2 was killed by SIGKILL" ||
      fail "the output does not name rank 2 as killed"
    ;;
esac
echo "dp_train_test: $mode passed"
