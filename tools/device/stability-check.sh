#!/usr/bin/env bash
# Issue #8 on the lent H100 in one call: preflight (quick perf must pass in <= 60 s; smoke; exit 3 on an
# impossible threshold), `benchmark comm` on the one GPU, a profiled 8B-dims run vs the torch.profiler anchor
# (timeline + op summary), and the post-flight report. All outputs go to $OUT (one archive + summaries).
# Usage (repo root on the GPU machine): tools/device/stability-check.sh [PRIMUS_BINARY]
set -uo pipefail
bin=${1:-build-safe-cuda/primus}
final=${OUT:-/tmp/stability-final}
export OUT=/tmp/stability-out
rm -rf "$OUT"; mkdir -p "$OUT" "$final"
trap 'tar czf "$final/stability-logs.tgz" -C "$OUT" . ; cp "$OUT"/summary.txt "$OUT"/profile/report.html "$OUT"/profile/*timeline*.md "$final"/ 2>/dev/null' EXIT
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  date -u +%Y-%m-%dT%H:%M:%SZ
  tools/device/preflight-check.sh "$bin"
  echo "== benchmark comm (1 rank, nccl, --check)"
  "$bin" benchmark comm --backend nccl --max-bytes 64M --warmup 2 --iters 5 --check --output-file "$OUT/comm.md" 2>&1 | tail -4
  tools/device/profile-compare.sh "$bin"
} 2>&1 | tee "$OUT/summary.txt"
