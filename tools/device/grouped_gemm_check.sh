#!/usr/bin/env bash
# Grouped GEMM on the lent GPU, in one call: the GPU-vs-CPU tests of the family, `primus benchmark grouped-gemm`
# (every path, equal and uneven loads, fwd/dgrad/wgrad on the six anchor shapes), then the PyTorch anchor's
# grouped-GEMM section (torch._grouped_mm and a dense GEMM of the same FLOPs; section 1 of
# .perf/torch_moe_baseline.py only, which has no flag for it) and a side-by-side table.
# Usage: tools/device/grouped_gemm_check.sh [BINARIES.tar.gz]   (carry: .perf and the tarball of stripped primus
# and primus_gpu_tests: the two unpacked binaries exceed the 64 MiB the device call carries)
set -uo pipefail
tarball=${1:-.device/ggemm.tar.gz}
out=${OUT:-/tmp}
bin=/tmp/ggemm-bin
mkdir -p "$bin" && tar xzf "$tarball" -C "$bin" || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv,noheader
date -u +"%Y-%m-%dT%H:%M:%SZ"
if [ "${GG_TESTS:-1}" = 1 ]; then  # GG_TESTS=0: the benchmark and the anchor only
  timeout 150 "$bin/primus_gpu_tests" grouped_gemm >"$out/gpu_tests.txt" 2>&1
  echo "== gpu tests (rc $?)"
  grep -E "grouped_gemm|FAIL|exception|passed|failed" "$out/gpu_tests.txt" | cut -c1-220 | tail -80
fi
timeout 200 "$bin/primus" benchmark grouped-gemm --paths ${GG_PATHS:-all} --loads ${GG_LOADS:-both} \
  --output-file "$out/grouped_gemm.jsonl" >"$out/bench.txt" 2>&1
echo "== benchmark (rc $?)"
grep -vE "^\[|^$" "$out/bench.txt" | cut -c1-200 | tail -140
echo "== torch anchor, section 1"
timeout 150 env PYTHONUNBUFFERED=1 python3 -c "
src = open('.perf/torch_moe_baseline.py').read().split('# ---- 2. FP8 GEMM')[0]
exec(compile(src, 'torch_moe_baseline.py[section 1]', 'exec'))
" 2>&1 | tail -12
python3 tools/device/grouped_gemm_vs_torch.py "$out/grouped_gemm.jsonl" "$out/torch_moe_baseline.json"
