# Sourced by the multi-rank GPU checks (ep-check.sh, tp-check.sh): unpacks .device/$check.tgz, keeps every log
# under /tmp/$check-out (packed into $OUT/$check-logs.tgz at exit), and defines
#   run NAME NPROC LIMIT [env...] -- args...   a training run (NPROC > 1: primus launch), metrics in $out/NAME.jsonl;
#                                              its summary line shows the log lines matching $show
#   curves A B TOL                             loss (and grad norm, reported) of every step within TOL
#   bitwise A B                                every step's loss and grad norm equal
#   medians SKIP BASE TOKENS NAME...           each run's median step (after SKIP steps), tokens/s, peak memory
#                                              and ratio to BASE; TOKENS: tokens per step
# The caller sets check (the name), show (a grep -E pattern) and PARTS' default; DEVICE (default cuda) lets the
# parts that need no GPU run on the CPU; STAGE (default pretrain) is the `train` subcommand (posttrain: SFT).
out=/tmp/$check-out
rm -rf "$out" && mkdir -p "$out"
bin=/tmp/$check-bin
mkdir -p "$bin" && tar xzf ".device/$check.tgz" -C "$bin" || exit 1
ngpu=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
date -u +"%Y-%m-%dT%H:%M:%SZ"
finish() { tar czf "${OUT:-/tmp}/$check-logs.tgz" -C "$out" . 2>/dev/null; date -u +"%Y-%m-%dT%H:%M:%SZ"; }
trap finish EXIT
export NCCL_NVLS_ENABLE=0 PRIMUS_USER=dev PRIMUS_HOME=$PWD

# run NAME NPROC LIMIT [env...] -- args...: metrics copied to $out/NAME.jsonl
run() {
  local name=$1 n=$2 limit=$3
  shift 3
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local ws=/tmp/$check-ws/$name
  rm -rf "$ws"
  if [ "$n" -eq 1 ]; then
    env "${envs[@]}" PRIMUS_WORKSPACE=$ws PRIMUS_EXP_NAME=$name timeout "$limit" "$bin/primus" train "${STAGE:-pretrain}" \
      --device "${DEVICE:-cuda}" "$@" >"$out/$name.log" 2>&1
  else
    env "${envs[@]}" PRIMUS_WORKSPACE=$ws PRIMUS_EXP_NAME=$name timeout "$limit" "$bin/primus" launch \
      --nproc-per-node "$n" --master-port 0 -- train "${STAGE:-pretrain}" --device "${DEVICE:-cuda}" "$@" >"$out/$name.log" 2>&1
  fi
  local rc=$?
  cp "$(find "$ws" -name metrics.jsonl | head -1)" "$out/$name.jsonl" 2>/dev/null
  echo "== $name rc=$rc: $(grep -E "$show" "$out/$name.log" | cut -c1-160 | tr '\n' ' ')"
  [ $rc -eq 0 ] || grep -iE "error|fail" "$out/$name.log" | head -5 | cut -c1-240
}

# curves A B TOL: loss (and grad norm, reported) of every step
curves() {
  python3 - "$out/$1.jsonl" "$out/$2.jsonl" "$3" <<'PY'
import json, sys
def load(p):
    try:
        return [json.loads(l) for l in open(p) if '"loss"' in l]
    except OSError:
        return []
a, b, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
if not a or len(a) != len(b):
    sys.exit(f"curves: {len(a)} vs {len(b)} steps")
dl = max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(a, b))
dg = max(abs(x["grad_norm"] - y["grad_norm"]) / abs(y["grad_norm"]) for x, y in zip(a, b))
ok = dl <= tol
print(f"   {sys.argv[1].split('/')[-1]} vs {sys.argv[2].split('/')[-1]}: {len(a)} steps, loss max rel diff {dl:.2e}, "
      f"grad-norm {dg:.2e} (loss {a[0]['loss']:.4f} -> {a[-1]['loss']:.4f}) {'OK' if ok else 'DIFFERS'}")
PY
}

# bitwise A B: every step's loss and grad norm equal
bitwise() {
  python3 - "$out/$1.jsonl" "$out/$2.jsonl" <<'PY'
import json, sys
def load(p):
    try:
        return [json.loads(l) for l in open(p) if '"loss"' in l]
    except OSError:
        return []
a, b = load(sys.argv[1]), load(sys.argv[2])
same = bool(a) and len(a) == len(b) and all(x["loss"] == y["loss"] and x["grad_norm"] == y["grad_norm"]
                                            for x, y in zip(a, b))
print(f"   {sys.argv[1].split('/')[-1]} vs {sys.argv[2].split('/')[-1]}: {len(a)} / {len(b)} steps, "
      f"{'BITWISE EQUAL' if same else 'DIFFERENT'}")
PY
}

# medians SKIP BASE TOKENS NAME...: the timing table of the perf parts
medians() {
  python3 - "$out" "$@" <<'PY'
import json, statistics, sys, os
out, skip, base_name, tokens = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def med(n):
    p = f"{out}/{n}.jsonl"
    rec = [json.loads(l) for l in open(p) if '"iter_ms"' in l] if os.path.exists(p) else []
    tail = [r["iter_ms"] for r in rec[skip:]]
    return (statistics.median(tail) if tail else None), max((r.get("mem_gb", 0) for r in rec), default=0)
base, _ = med(base_name)
for n in sys.argv[5:]:
    m, mem = med(n)
    print(f"   {n}: " + (f"median {m:.1f} ms per step of {tokens:,} tokens, {tokens / m * 1e3:,.0f} tok/s, "
                          f"peak {mem:.2f} GB, {base / m:.3f}x {base_name}" if m and base else "no steps"))
PY
}
