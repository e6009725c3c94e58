#!/usr/bin/env bash
# Does NCCL's SM share decide DDP's overlap cost? The 1B-shape DDP step on 2 GPUs is 15-20 ms longer than on one
# while its all-reduces should hide under backward. This runs the 2-GPU step with NCCL limited to fewer CTAs
# (NCCL_MAX_CTAS), leaving more SMs to the backward GEMMs, against the default and the 1-GPU step.
# Usage (repo root, nvidia-h200-x2): tools/device/ddp-ctas.sh BIN_DIR
set -uo pipefail
bin=${1:?usage: ddp-ctas.sh BIN_DIR}
final=${OUT:-/tmp/ddp-ctas}
work=/tmp/ddp-ctas-work
rm -rf "$work"; mkdir -p "$work" "$final"
export NCCL_NVLS_ENABLE=0 PRIMUS_WORKSPACE=/tmp/ctas-ws PRIMUS_USER=dev PRIMUS_HOME=$PWD
summary=$work/summary.txt
trap 'cp "$summary" "$final"/; tar czf "$final/ddp-ctas.tgz" -C "$work" .' EXIT
date -u +%Y-%m-%dT%H:%M:%SZ | tee "$summary"
one_b=(--config configs/examples/megatron/bench_llama3.2-1B-shape.yaml --device cuda --train_iters 20)
run() {  # name nproc env-assignment args...
  local name=$1 n=$2 envs=$3
  shift 3
  if [ "$n" -eq 1 ]; then
    env $envs PRIMUS_EXP_NAME=$name timeout 100 "$bin/primus" train pretrain "${one_b[@]}" "$@" > "$work/$name.log" 2>&1
  else
    env $envs PRIMUS_EXP_NAME=$name timeout 100 "$bin/primus" launch --nproc-per-node 2 --master-port 0 -- \
      train pretrain "${one_b[@]}" --global_batch_size 16 --overlap_grad_reduce true "$@" > "$work/$name.log" 2>&1
  fi
  echo "== $name ($envs) rc=$?: $(grep -E "done:" "$work/$name.log" | tail -1)" | tee -a "$summary"
}
run one 1 X=1 --global_batch_size 8
run ddp_default 2 X=1
run ddp_ctas16 2 NCCL_MAX_CTAS=16
run ddp_ctas8 2 NCCL_MAX_CTAS=8
run ddp_ctas4 2 NCCL_MAX_CTAS=4
run zero1_ctas8 2 NCCL_MAX_CTAS=8 --use_distributed_optimizer true --overlap_param_gather true
python3 - "$work" <<'PY' | tee -a "$summary"
import re, sys
d = sys.argv[1]
def tok(n):
    m = re.findall(r"([\d.]+)k tok/s \|", open(f"{d}/{n}.log").read())
    return float(m[-1]) * 1e3 if m else None
base = tok("one")
for n in ("ddp_default", "ddp_ctas16", "ddp_ctas8", "ddp_ctas4", "zero1_ctas8"):
    t = tok(n)
    print(f"  {n}: {t} vs 1 GPU {base} -> {t / base:.3f}x" if t and base else f"  {n}: no result")
PY
