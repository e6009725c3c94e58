#!/usr/bin/env bash
# Pipeline-parallel training under mpirun (ctest runs these; see tests/CMakeLists.txt): a micro Llama with 8
# layers on the CPU, 20 steps, global batch 16 (micro-batch 2). Each case's loss and grad-norm curves stay
# within 1e-5 relative of the same layout without pipeline parallelism (NP / PP ranks; one process when that
# is 1) training the same global batch: every stage accumulates its micro-batches' gradients in the same
# order, so the losses match to the bit until the first update; the gradient norm is then summed per stage
# and over the stages (f32 rounding), which the clipped update carries on. (The reference is the layout
# without PP because this 8-layer model at this learning rate already turns DP 2's or TP 2's reduction-order
# rounding into 3e-5 / 3e-4 grad-norm differences from one process by step 12.)
#   1f1b NP PP       Megatron's default schedule, PP ranks x NP/PP data-parallel (DDP) ranks
#   gpipe NP PP      GPipe (all forwards, then all backwards), selected by Primus-C++'s pipeline_schedule key
#   vpp NP PP        interleaved 1F1B, 2 chunks per rank (virtual_pipeline_model_parallel_size 2)
#   zbh1 NP PP       zero-bubble ZB-H1 (patch_zero_bubble + enable_zero_bubble): backward split into the
#                    input-gradient pass and the deferred weight-gradient pass
#   zbv NP PP        zero-bubble V schedule (zero_bubble_v_schedule): 2 chunks per rank in a V, the loss on
#                    rank 0
#   uneven NP PP     decoder_first_pipeline_num_layers 3 (the other layers evenly)
#   layout NP PP     pipeline_model_parallel_layout "E|t*4|t*4|L": 2 chunks per rank (interleaved), the
#                    embedding alone in rank 0's first chunk and the loss alone in the last rank's last
#   recompute NP PP  full recomputation on every stage
#   eval NP PP       evaluation every 10 steps (forward stage after stage; the loss stage's sums)
#   zero1 NP PP      PP x the distributed optimizer over the data-parallel ranks of each stage
#   tp NP PP         PP x TP 2 with sequence parallelism (NP = 2 PP)
#   tpasync NP PP    PP (ZB-H1) x TP 2 with async TP: the weight gradients deferred from under the sliced
#                    reduce-scatters (NP = 2 PP)
#   fsdp NP PP       PP x FSDP over the data-parallel ranks of each stage (interleaved: 2 chunks per rank)
#   zbh1fsdp NP PP   PP (ZB-H1) x FSDP: each layer's reduce-scatter waits for its deferred weight gradients
#                    (the BW passes; later stages hold several micro-batches' BW at once)
#   zbvfsdp NP PP    PP (ZB-V) x FSDP, the embedding and the loss on rank 0
#   zbh1hsdp NP PP   PP (ZB-H1) x HSDP: 2 replicas of FSDP (NP = 4 PP), against HSDP without PP
#   cp NP PP         PP x CP 2 under ZB-V, with evaluation (NP = 2 PP)
#   qwen3 NP PP      micro Qwen3 (q/k-norm, q/k/v biases), untied embeddings
#   moe NP PP        micro Mixtral (8 MoE layers, aux and z losses): the routing statistics of every stage's
#                    layers logged as one process logs them
#   ep NP PP         micro Mixtral PP x EP 2 (NP = 2 PP) against EP 2
#   deepseek NP PP   micro DeepSeek-style model (MLA, 2 dense then 6 MoE layers, shared experts), ZB-H1
#   resume NP PP     save at iteration 10 with PP, resume with one process: the joined curve equals the
#                    uninterrupted single process's (a checkpoint holds the whole model)
#   resumesame NP PP save at iteration 10 with PP (ZB-H1), resume with the same layout: bitwise the
#                    uninterrupted PP run
#   resumebf16m NP PP  PP x TP 2 with bf16 Adam moments (precision-aware optimizer): save at iteration 10,
#                    resume with the same layout: bitwise the uninterrupted run (the moments gathered over tp and
#                    the stages into the f32 whole-model store, saved, and narrowed back exactly)
#   resumefp8 NP PP  FP8 delayed scaling (hybrid): save at iteration 10 with PP (1F1B), resume with the same
#                    layout: bitwise the uninterrupted PP run (every stage's amax histories are in the
#                    checkpoint and each stage takes its own); the same checkpoint also resumes in one process
#   tied<MODE> NP PP  MODE (1f1b, vpp, zbh1, zbv, zero1, fsdp, zbvfsdp, tp, resume) with tied embeddings
#                    (untie_embeddings_and_output_weights false): the head's stage holds a copy of the
#                    embedding, the two stages sum their gradients of it, the norm counts it once (zbv: rank
#                    0 holds both, no copy). tiedresume also resumes a one-process checkpoint with PP, and its
#                    PP save checks that the copy equals the embedding bitwise after 10 steps
#   mtp[dense][MODE] NP PP  multi-token prediction (--mtp_num_layers 1) with MODE (none: 1f1b; vpp, zbh1, zbv,
#                    layout, resume, ep, zero1, fsdp, ...): the DeepSeek-style MoE model (micro_deepseek_moe, 2 dense
#                    then 6 MoE layers; the MTP depth's layer is MoE, its routing statistics logged), or with
#                    "dense" micro Llama (untied; tiedmtpdense: tied). The depth sits with the loss; the loss's
#                    stage holds a copy of the embedding for the shifted tokens, summed with the first stage's
#                    as the tied copy is; mtp_loss is compared with one process's too. mtplayout places the
#                    depth with the explicit layout "E|t*4|t*4|mL"
#   bad              refusals, each a clear error naming the key before training
# Usage: pp_train_test.sh MODE MPIRUN PRIMUS NP PP
set -u
mode=$1 mpirun=$2 primus=$3 np=${4:-2} pp=${5:-2}
src=$(cd "$(dirname "$0")/../.." && pwd)
source "$src/tests/mpi/train_runs.sh"  # init_runs, run, compare, refuse
init_runs pp -x PRIMUS_E2E_MODEL
common+=(--num_layers 8 --lr 1e-3 --min_lr 1e-4)

export PRIMUS_E2E_MODEL=micro_llama.yaml
if [ "$mode" = bad ]; then
  refuse layers "num_layers=8 (command line (--num_layers 8)) is not divisible by pipeline_model_parallel_size=3" 3 -- --pipeline_model_parallel_size 3
  # Multi-token prediction runs in the loss's chunk; a layout that gives it a chunk of its own is refused.
  refuse mtpchunk "not supported yet: pipeline parallelism with multi-token-prediction layers in a chunk without the loss" 2 \
    -- --pipeline_model_parallel_size 2 --mtp_num_layers 1 --pipeline_model_parallel_layout "E|t*4|t*4m|L"
  refuse vppmicro "micro-batches" 4 -- --pipeline_model_parallel_size 4 --virtual_pipeline_model_parallel_size 2 \
    --global_batch_size 4
  refuse oneFoneBv "not supported yet: the pipeline schedule" 2 -- --pipeline_model_parallel_size 2 \
    --patch_zero_bubble true --enable_1f1b_v true
  refuse schedname "unknown pipeline schedule 'zb-h2'" 2 -- --pipeline_model_parallel_size 2 \
    --pipeline_schedule zb-h2
  refuse layoutbad "pipeline_model_parallel_layout" 2 -- --pipeline_model_parallel_size 2 \
    --pipeline_model_parallel_layout "Et*3|t*4L"
  echo "pp_train_test: bad passed"
  exit 0
fi
keys=()  # every run (the single process too)
par=()   # the layout: the distributed runs only
name=$mode
tied=()
if [[ $mode == tied* ]]; then
  # The tied weight's gradient is the two stages' partial sums added (another order than one process's);
  # at lr 1e-3 this model turns that rounding into a 1e-3 grad-norm difference at a spike in step 18,
  # at 5e-4 the curves stay within 2e-7.
  tied=(--untie_embeddings_and_output_weights false --lr 5e-4 --min_lr 5e-5)
  mode=${mode#tied}
fi
mtp=()
if [[ $mode == mtp* ]]; then
  mode=${mode#mtp}
  if [[ $mode == dense* ]]; then
    mode=${mode#dense}
  else
    export PRIMUS_E2E_MODEL=micro_deepseek_moe.yaml
    mtp=(--moe_layer_freq "([0]*2+[1]*6)")
  fi
  mtp+=(--mtp_num_layers 1)
  [ -z "$mode" ] && mode=1f1b
fi
case "$mode" in
  1f1b) ;;
  gpipe) par=(--pipeline_schedule gpipe) ;;
  vpp) par=(--virtual_pipeline_model_parallel_size 2) ;;
  zbh1) par=(--patch_zero_bubble true --enable_zero_bubble true) ;;
  zbv) par=(--patch_zero_bubble true --zero_bubble_v_schedule true --zero_bubble_v_schedule_mem_setup zb) ;;
  uneven) par=(--decoder_first_pipeline_num_layers 3) ;;
  layout)
    par=(--pipeline_model_parallel_layout "E|t*4|t*4|L")
    [ ${#mtp[@]} -gt 0 ] && par=(--pipeline_model_parallel_layout "E|t*4|t*4|mL")
    ;;
  recompute) keys=(--recompute_granularity full --recompute_method uniform) ;;
  eval) keys=(--eval_interval 10 --eval_iters 2) ;;
  zero1) keys=(--use_distributed_optimizer true --overlap_param_gather true) ;;
  fsdp)
    keys=(--use_torch_fsdp2 true)
    par=(--virtual_pipeline_model_parallel_size 2)
    ;;
  zbh1fsdp)
    keys=(--use_torch_fsdp2 true)
    par=(--patch_zero_bubble true --enable_zero_bubble true)
    ;;
  zbh1hsdp)
    keys=(--use_torch_fsdp2 true --data_parallel_replicate_degree 2)
    par=(--patch_zero_bubble true --enable_zero_bubble true)
    ;;
  zbvfsdp)
    keys=(--use_torch_fsdp2 true)
    par=(--patch_zero_bubble true --zero_bubble_v_schedule true --zero_bubble_v_schedule_mem_setup zb)
    ;;
  cp)
    # lr 5e-4, as the tied cases: at 1e-3 the micro Llama's grad norm spikes at step 19 (1.75 -> 2.84) and turns
    # the chunked attention's merge order (own key chunks first since bf764f6) into 1.2e-5 there (1e-8 on
    # the other steps).
    keys=(--context_parallel_size 2 --eval_interval 10 --eval_iters 2 --lr 5e-4 --min_lr 5e-5)
    par=(--patch_zero_bubble true --zero_bubble_v_schedule true --zero_bubble_v_schedule_mem_setup zb)
    ;;
  tp)
    par=(--tensor_model_parallel_size 2)
    keys=(--sequence_parallel true)
    ;;
  tpasync)
    par=(--tensor_model_parallel_size 2 --tp_comm_overlap true --patch_zero_bubble true --enable_zero_bubble true)
    keys=(--sequence_parallel true)
    ;;
  qwen3)
    export PRIMUS_E2E_MODEL=micro_qwen3.yaml
    keys=(--lr 5e-4 --min_lr 5e-5 --untie_embeddings_and_output_weights true)
    ;;
  moe) export PRIMUS_E2E_MODEL=micro_mixtral.yaml ;;
  ep)
    [ ${#mtp[@]} -eq 0 ] && export PRIMUS_E2E_MODEL=micro_mixtral.yaml  # mtpep: the DeepSeek-style model
    keys=(--expert_model_parallel_size 2)
    ;;
  deepseek)
    export PRIMUS_E2E_MODEL=micro_deepseek_mla.yaml
    keys=(--mtp_num_layers 0 --moe_layer_freq "([0]*2+[1]*6)")
    par=(--patch_zero_bubble true --enable_zero_bubble true)
    ;;
  resume) ;;
  resumesame) par=(--patch_zero_bubble true --enable_zero_bubble true) ;;
  resumebf16m)  # PP x TP 2 with the precision-aware optimizer's bf16 moments
    par=(--tensor_model_parallel_size 2)
    keys=(--use_precision_aware_optimizer true --exp_avg_dtype bf16 --exp_avg_sq_dtype bf16)
    ;;
  resumefp8) keys=(--fp8 hybrid) ;;
  *) fail "unknown mode $mode" ;;
esac

read -ra extra <<<"${PP_EXTRA:-}"  # more overrides for every run of the case (debugging)
keys+=("${tied[@]}" "${mtp[@]}" "${extra[@]}")
if [ "$mode" = resumesame ] || [ "$mode" = resumefp8 ] || [ "$mode" = resumebf16m ]; then
  save=(--save "$work/ckpt" --save_interval 10)
  run dist "$np" -- --pipeline_model_parallel_size "$pp" "${par[@]}" "${keys[@]}" "${save[@]}" --exit_interval 10
  run dist "$np" -- --pipeline_model_parallel_size "$pp" "${par[@]}" "${keys[@]}" "${save[@]}" \
    --auto_continue_train true
  grep -q "resuming from" "$work/dist.log" || fail "the PP run did not resume"
  run whole "$np" -- --pipeline_model_parallel_size "$pp" "${par[@]}" "${keys[@]}"
  compare dist whole 0
  if [ "$mode" = resumefp8 ]; then
    # One process finds every projection's history in the pipeline's checkpoint (it would refuse a missing
    # one by name).
    run one 0 -- "${keys[@]}" --load "$work/ckpt" --train_iters 12
    grep -q "resuming from" "$work/one.log" || fail "one process did not resume the pipeline's FP8 checkpoint"
  fi
  echo "pp_train_test: $name passed"
  exit 0
fi
if [ "$mode" = resume ]; then
  save=(--save "$work/ckpt" --save_interval 10 --exit_interval 10)
  run dist "$np" -- --pipeline_model_parallel_size "$pp" "${keys[@]}" "${save[@]}"
  run dist 0 -- "${keys[@]}" "${save[@]}" --auto_continue_train true
  grep -q "resuming from" "$work/dist.log" || fail "the single process did not resume"
  if [ ${#tied[@]} -gt 0 ]; then
    # And back: a one-process checkpoint resumed with PP (the head's stage fills its copy from the stored
    # embedding).
    save1=(--save "$work/ckpt1" --save_interval 10 --exit_interval 10)
    run back 0 -- "${keys[@]}" "${save1[@]}"
    run back "$np" -- --pipeline_model_parallel_size "$pp" "${keys[@]}" "${save1[@]}" --auto_continue_train true
    grep -q "resuming from" "$work/back.log" || fail "the PP run did not resume the one-process checkpoint"
  fi
else
  run dist "$np" -- --pipeline_model_parallel_size "$pp" "${par[@]}" "${keys[@]}"
  grep -h "pipeline parallel:" "$work/dist.log" | head -"$pp"
  grep -q "pipeline parallel: $pp ranks" "$work/dist.log" || fail "the run did not split the model into stages"
  grep -q "ran the simulator's order" "$work/dist.log" || fail "the runtime's order was not checked"
  # The logged steps measured the pipeline's timeline; the post-flight report draws the latest.
  rundir=$(dirname "$(find "$work" -path "*/dist/pipeline_timeline.json" | head -1)")
  [ -d "$rundir" ] || fail "no pipeline_timeline.json in the run directory"
  "$primus" report "$rundir" >/dev/null 2>&1 || fail "primus report failed on the pipeline run"
  grep -q "Pipeline timeline (latest measured step)" "$rundir/report.html" ||
    fail "the report does not draw the pipeline timeline"
fi
ref=$((np / pp))
[ "$mode" = resume ] && ref=1
if [ "$ref" -gt 1 ]; then
  reference=("${keys[@]}")
  [ "$mode" = tp ] && reference+=(--tensor_model_parallel_size 2)
  run_reference single "$ref" -- "${reference[@]}"
else
  run_reference single 0 -- "${keys[@]}"
fi
# MoE models: the micro models' top-k near-ties at steps 17-18 move that step's gradient norm and routing
# statistics by 1e-5 - 2e-5 under the stages' last-bit differences (2026-11-28, this session's machine, not
# bisected: ep 1.6e-5, mtp / mtpzbv / mtpep 1.29e-5), as in tp_train_test.sh (moe_grad_tol): they are held
# to 2e-4 there, the loss to 1e-5. With an MTP depth on the MoE model (mtp, mtpzbv, mtpep) the flipped routing
# at step 18 carries into the next steps' losses (1.06e-5 at step 20): their loss is held to 5e-5.
tol=1e-5 tol_grad=1e-5
case "${PRIMUS_E2E_MODEL:-}" in *mixtral* | *moe* | *deepseek*) tol_grad=2e-4 ;; esac
[ ${#mtp[@]} -gt 0 ] && [[ ${PRIMUS_E2E_MODEL:-} == *moe* ]] && tol=5e-5
compare dist single "$tol" "$tol_grad" "$tol_grad"
if [ "$mode" = resume ] && [ ${#tied[@]} -gt 0 ]; then compare back single 1e-5; fi
echo "pp_train_test: $name passed"
