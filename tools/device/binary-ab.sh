#!/usr/bin/env bash
# Does a change alter GPU results? Two primus binaries (A: before, B: after) train the same workloads on one GPU
# with deterministic_mode, and every step's loss and gradient norm are compared bitwise (from metrics.jsonl).
# Usage (repo root on the GPU machine): [WORKLOADS="124m 8b4l"] [STEPS=20] tools/device/binary-ab.sh BIN_A BIN_B
#   BIN_A / BIN_B: the two primus executables. Prints one line per workload: BITWISE EQUAL or the first step
#   that differs; logs in $OUT/binary-ab.tgz.
set -uo pipefail
a=${1:?usage: binary-ab.sh BIN_A BIN_B} b=${2:?usage: binary-ab.sh BIN_A BIN_B}
work=/tmp/binary-ab
rm -rf "$work" && mkdir -p "$work"
trap 'tar czf "${OUT:-/tmp}/binary-ab.tgz" -C "$work" . 2>/dev/null' EXIT
export PRIMUS_USER=dev PRIMUS_HOME=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
m=configs/examples/megatron
for w in ${WORKLOADS:-124m 8b4l}; do
  case $w in
    124m) args=(--config $m/bench_llama-124M.yaml) ;;
    1b) args=(--config $m/bench_llama3.2-1B-shape.yaml) ;;
    8b4l) args=(--config $m/bench_llama3-8B-4L.yaml) ;;
    qwen3moe) args=(--config $m/bench_qwen3-30B-A3B-4L.yaml) ;;
    *) echo "unknown workload $w"; continue ;;
  esac
  for side in a b; do
    bin=$a
    [ $side = b ] && bin=$b
    ws=$work/ws-$w-$side
    PRIMUS_WORKSPACE=$ws PRIMUS_EXP_NAME=ab timeout 300 "$bin" train pretrain "${args[@]}" --train_iters "${STEPS:-20}" \
      --log_interval 5 --deterministic_mode true >"$work/$w-$side.log" 2>&1
    echo "== $w $side rc=$?: $(grep -E "done:" "$work/$w-$side.log" | cut -c1-150)"
    cp "$(find "$ws" -name metrics.jsonl | head -1)" "$work/$w-$side.jsonl" 2>/dev/null
  done
  python3 - "$work/$w-a.jsonl" "$work/$w-b.jsonl" "$w" <<'PY'
import json, sys
def load(p):
    try:
        return [json.loads(l) for l in open(p) if '"loss"' in l]
    except OSError:
        return []
a, b, w = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
if not a or len(a) != len(b):
    print(f"   {w}: {len(a)} vs {len(b)} steps")
    sys.exit()
diff = [i for i, (x, y) in enumerate(zip(a, b)) if x["loss"] != y["loss"] or x["grad_norm"] != y["grad_norm"]]
print(f"   {w}: {len(a)} steps, " + ("BITWISE EQUAL" if not diff else
      f"first difference at step {a[diff[0]].get('iteration', diff[0])}: loss {a[diff[0]]['loss']} vs {b[diff[0]]['loss']}"))
PY
done
