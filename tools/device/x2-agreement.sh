#!/usr/bin/env bash
# The start-up checks of a multi-GPU job over NCCL (issue #19; parallel/config_agreement.h, comm/rank_names.h):
#  1. DDP on the lent GPUs, the micro Llama on mock data, 10 steps: the configuration agreement (an all-gather
#     of i64 hashes on the GPU) passes and the run trains;
#  2. the same with `seed: ${LOCAL_RANK}` so the ranks disagree: every rank stops with exit 2 before training,
#     rank 1 naming "seed: 1 (rank 0: seed: 0)".
# Carry .device (comm.tgz: stripped primus). Usage on nvidia-h100-x2 / h200-x2: tools/device/x2-agreement.sh
set -uo pipefail
n=${1:-$(nvidia-smi -L | wc -l)}
bin=/tmp/x2-bin
mkdir -p "$bin" && tar xzf .device/comm.tgz -C "$bin" || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
date -u +"%Y-%m-%dT%H:%M:%SZ"
ws=/tmp/x2-ws
common=(--config tests/e2e/configs/fortunes_micro_llama.yaml --device cuda --mock_data true --train_iters 10
        --log_interval 5 --eval_interval 0 --lr_warmup_iters 2)
export NCCL_NVLS_ENABLE=0 PRIMUS_WORKSPACE=$ws PRIMUS_USER=dev PRIMUS_HOME=$PWD  # configs/ of this tree
PRIMUS_EXP_NAME=agree timeout 180 "$bin/primus" launch --nproc-per-node "$n" -- train pretrain "${common[@]}" \
  >/tmp/agree.log 2>&1
echo "== agree rc=$? (expect 0)"
grep -E "iter +10/|error|nccl" /tmp/agree.log | head -6 | cut -c1-200
sed 's/^      clip_grad: .*/&\n      seed: ${LOCAL_RANK:0}/' \
  tests/e2e/configs/fortunes_micro_llama.yaml >/tmp/disagree.yaml
PRIMUS_EXP_NAME=disagree timeout 180 "$bin/primus" launch --nproc-per-node "$n" -- train pretrain \
  --config /tmp/disagree.yaml "${common[@]:2}" >/tmp/disagree.log 2>&1
echo "== disagree rc=$? (expect 2 or the launcher's failure code)"
grep -E "configuration|seed|iter " /tmp/disagree.log | head -8 | cut -c1-220
grep -q "rank 1 resolved a different configuration than rank 0:" /tmp/disagree.log && echo "disagree: reported" ||
  echo "disagree: NOT reported"
date -u +"%Y-%m-%dT%H:%M:%SZ"
