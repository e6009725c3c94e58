#!/usr/bin/env bash
# Several issues' device checks in one H100 call (device time is scarce; each call costs a machine start).
# Every check writes into its own folder; everything comes back as one archive plus one summary, because the
# device tool returns only a few files.
#   part a: primus_gpu_tests --quick, tokenizer-check.sh, stability-check.sh
#   part b: hf-logits-check.sh (HF logits + GPU bit-exact resume), presets-smoke.sh
# Usage (repo root on the GPU machine): tools/device/h100-session.sh BIN_DIR a|b
#   BIN_DIR holds the stripped `primus` (and `primus_gpu_tests` for part a) built here with CUDA.
set -uo pipefail
bin=${1:?usage: h100-session.sh BIN_DIR a|b}
part=${2:?usage: h100-session.sh BIN_DIR a|b}
final=${OUT:-/tmp/h100-session}
work=/tmp/h100-session-work
rm -rf "$work"; mkdir -p "$work" "$final"
summary=$work/summary.txt
trap 'cp "$summary" "$final"/ 2>/dev/null; tar czf "$final/session-$part.tgz" -C "$work" .' EXIT

step() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  mkdir -p "$work/$name"
  OUT="$work/$name" timeout "$limit" "$@" > "$work/$name/console.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc ($(( $(date +%s) - t0 )) s)" | tee -a "$summary"
  tail -n "${TAIL:-15}" "$work/$name/console.log" | tee -a "$summary"
}

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  date -u +%Y-%m-%dT%H:%M:%SZ
} | tee "$summary"

case "$part" in
  a)
    step gpu_tests 150 "$bin/primus_gpu_tests" --quick
    grep -E "FAIL" "$work/gpu_tests/console.log" | head -20 | tee -a "$summary"
    step tokenizer 120 bash tools/device/tokenizer-check.sh "$bin/primus"
    TAIL=40 step stability 300 bash tools/device/stability-check.sh "$bin/primus"
    ;;
  b)
    TAIL=40 HF_CHECK_SECONDS=330 step hf_logits 360 bash tools/device/hf-logits-check.sh "$bin/primus"
    TAIL=20 step presets 200 bash tools/device/presets-smoke.sh "$bin"
    ;;
  *)
    echo "unknown part '$part' (a or b)" >&2
    exit 2
    ;;
esac
