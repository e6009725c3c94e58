#!/usr/bin/env bash
# NCCL backend check on the two-GPU machine (kind nvidia-h200-x2): every collective of `primus comm selftest`
# over NCCL (within the dtype tolerance), then bus bandwidth per collective and size (`primus comm bench`,
# nccl-tests' busbw). NVLink multicast stays off on these hosts (NCCL_NVLS_ENABLE=0).
# Usage: tools/device/nccl-check.sh [BUILD_DIR] [NPROC]     (BUILD_DIR holds a PRIMUS_CUDA=ON build: carry it)
set -uo pipefail
build=${1:-build}
nproc=${2:-2}
bin="$build/primus"
if [ ! -x "$bin" ]; then
  echo "nccl-check: $bin not found; build with -DPRIMUS_CUDA=ON here and carry $build" >&2
  exit 2
fi
export NCCL_NVLS_ENABLE=0
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
out=${OUT:-/tmp}
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader || true
nvidia-smi topo -m || true
status=0
echo "== selftest (nccl, $nproc ranks)"
timeout 300 "$bin" launch --nproc-per-node "$nproc" --master-port 0 -- comm selftest --backend nccl \
  --sizes 1,31,1000,65537,1048576 --dtypes f32,bf16,i32 --timeout 120 2>&1 | tee "$out/nccl_selftest.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "== bus bandwidth (nccl, $nproc ranks, bf16)"
timeout 300 "$bin" launch --nproc-per-node "$nproc" --master-port 0 -- comm bench --backend nccl --check \
  --bytes 1048576,16777216,134217728,1073741824 --iters 20 2>&1 | tee "$out/nccl_bench.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "== a hung rank is caught by the watchdog (PRIMUS_COMM_TIMEOUT_S=5)"
PRIMUS_COMM_TIMEOUT_S=5 timeout 120 "$bin" launch --nproc-per-node "$nproc" --master-port 0 -- comm selftest \
  --backend nccl --fault hang --fault-rank 1 2>&1 | tee "$out/nccl_hang.txt"
if [ "${PIPESTATUS[0]}" -eq 0 ] || ! grep -q "timed out after 5 s" "$out/nccl_hang.txt"; then
  echo "nccl-check: the hung-rank test did not fail with a watchdog message" >&2
  status=1
fi
echo "nccl-check: $([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
