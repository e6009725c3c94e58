#!/usr/bin/env bash
# All-to-all-v over NCCL between the lent GPUs (issue #19 item 7: the expert-parallel dispatch's collective),
# beside all_to_all and all_reduce, every result checked on every rank. Carry .device (comm.tgz: stripped
# primus). Usage on nvidia-h100-x2 / h200-x2: tools/device/comm-a2av.sh [NPROC]
set -uo pipefail
n=${1:-$(nvidia-smi -L | wc -l)}
bin=/tmp/comm-bin
mkdir -p "$bin" && tar xzf .device/comm.tgz -C "$bin" || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nvidia-smi topo -m | head -4
date -u +"%Y-%m-%dT%H:%M:%SZ"
NCCL_NVLS_ENABLE=0 timeout 300 "$bin/primus" launch --nproc-per-node "$n" -- benchmark comm --backend nccl --check \
  --ops all_to_all_v,all_to_all,all_reduce --min-bytes 1M --max-bytes 1G --output-file "${OUT:-/tmp}/comm-a2av.md" 2>&1 |
  grep -E "rank 0\]" | cut -c1-150
echo "rc=${PIPESTATUS[0]}"
date -u +"%Y-%m-%dT%H:%M:%SZ"
