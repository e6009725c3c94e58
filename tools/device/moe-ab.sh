#!/usr/bin/env bash
# MoE training A/B on one GPU (issue #18): the two bench workloads (Qwen3-30B-A3B dims 4L, Mixtral-8x7B dims 2L,
# T 4096 B 1) under each grouped-GEMM path and update mode, 40 steps each; prints the median step time of steps
# 11-40 (routing settles in the first steps) and the peak memory per variant.
# Carry .device (stop25.tgz with the stripped primus). Usage: tools/device/moe-ab.sh   VARIANTS="..." selects.
set -uo pipefail
out=${OUT:-/tmp}
bin=/tmp/moe-ab-bin
mkdir -p "$bin" && tar xzf .device/stop25.tgz -C "$bin" primus || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv,noheader
date -u +"%Y-%m-%dT%H:%M:%SZ"
variants=${VARIANTS:-"default GG=streams GG=loop GG=grouped OVERLAP=0 RESERVE=0"}
ws=/tmp/moe-ab-ws
for w in ${WORKLOADS:-bench_qwen3-30B-A3B-4L bench_mixtral-8x7B-2L}; do
  for v in $variants; do
    env=()
    case $v in
      GG=*) env+=(PRIMUS_GROUPED_GEMM=${v#GG=}) ;;
      OVERLAP=*) env+=(PRIMUS_OVERLAP_UPDATE=${v#OVERLAP=}) ;;
      RESERVE=*) env+=(PRIMUS_UPDATE_SM_RESERVE=${v#RESERVE=}) ;;
      REM=*) env+=(PRIMUS_MASTER_REMAINDERS=${v#REM=}) ;;  # REM=0: an f32 master buffer (18 B/param)
    esac
    name="${w}_${v//=/_}"
    rm -rf "$ws"
    env "${env[@]}" PRIMUS_WORKSPACE=$ws PRIMUS_EXP_NAME=$name PRIMUS_USER=dev timeout 240 "$bin/primus" train \
      pretrain --config configs/examples/megatron/$w.yaml --train_iters ${ITERS:-40} --log_interval 10 \
      >"$out/ab.log" 2>&1
    rc=$?
    m=$(find "$ws" -name metrics.jsonl | head -1)
    python3 tools/device/step_median.py "$m" "$w $v" "$rc" 4096
    [ "$rc" -ne 0 ] && tail -5 "$out/ab.log"
  done
done
date -u +"%Y-%m-%dT%H:%M:%SZ"
