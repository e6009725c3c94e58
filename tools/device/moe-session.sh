#!/usr/bin/env bash
# One H100 call for the MoE kernels and #17's TensorBoard check (stop 25): every GPU test family (--quick), the
# MoE families in full plus compute-sanitizer memcheck (moe-check.sh), the grouped-GEMM benchmark against
# torch._grouped_mm from the same call (grouped_gemm_check.sh), then the TensorBoard event-file check.
# Carry .device (stop25.tgz: stripped primus + primus_gpu_tests; fortunes/: Debian's fortunes text) and .perf
# (../shared/perf). Usage: tools/device/moe-session.sh
set -uo pipefail
out=${OUT:-/tmp}
bin=/tmp/ggemm-bin
mkdir -p "$bin" && tar xzf .device/stop25.tgz -C "$bin" || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv,noheader
date -u +"%Y-%m-%dT%H:%M:%SZ"
start=$SECONDS
echo "== all GPU test families, --quick"
timeout 420 "$bin/primus_gpu_tests" --quick >"$out/gpu_all_quick.txt" 2>&1
echo "rc $? ($((SECONDS - start)) s): $(grep -E 'checked cases' "$out/gpu_all_quick.txt")"
grep -E "FAIL|crashed|exception" "$out/gpu_all_quick.txt" | cut -c1-200 | head -30
echo "== MoE families in full + memcheck"
s=$SECONDS
OUT=$out bash tools/device/moe-check.sh "$bin/primus_gpu_tests" 100
echo "moe-check rc $? ($((SECONDS - s)) s)"
echo "== grouped GEMM vs torch"
s=$SECONDS
OUT=$out bash tools/device/grouped_gemm_check.sh .device/stop25.tgz
echo "grouped_gemm_check rc $? ($((SECONDS - s)) s)"
echo "== TensorBoard"
s=$SECONDS
OUT=$out/tensorboard PRIMUS_QUICKSTART_DATA=$PWD/.device/fortunes bash tools/device/tensorboard-check.sh "$bin/primus"
echo "tensorboard-check rc $? ($((SECONDS - s)) s)"
echo "session: $((SECONDS - start)) s"
