# Sourced by the multi-rank training tests (dp_, ep_, tp_, pp_train_test.sh): their set-up, a training run of
# the micro experiment, the comparison of two runs' curves, and a refusal check. The caller defines src,
# primus and mpirun, calls init_runs, and may set LAUNCH (non-empty: ranks started by `primus launch`, tcp
# backend, instead of mpirun).

# init_runs TAG [mpirun flags...]: $work (a scratch folder, removed at exit unless KEEP is set), flags
# (mpirun's), common (the micro experiment's training arguments: 20 steps, global batch 16 of micro-batches
# of 2, mock data when the fortunes corpus is absent) and fail().
init_runs() {
  local tag=$1
  shift
  work=$(mktemp -d "/tmp/primus-$tag-XXXXXX")
  [ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
  flags=(--allow-run-as-root --oversubscribe --mca btl_vader_single_copy_mechanism none -x OMP_NUM_THREADS=1
         -x PRIMUS_WORKSPACE="$work" "$@")
  common=(--config "$src/tests/e2e/configs/fortunes_micro_llama.yaml" --train_iters 20 --seq_length 64
          --micro_batch_size 2 --global_batch_size 16 --eval_interval 0 --log_interval 5 --lr_warmup_iters 5
          --clip_grad 0.5)
  if [ ! -d /usr/share/games/fortunes ]; then
    common+=(--mock_data true)
  fi
  eval "fail() { echo \"${tag}_train_test FAILED: \$*\"; exit 1; }"
}

# run NAME NP(0 = single process) [env...] -- [overrides...]: metrics copied to $work/NAME.jsonl
run() {
  local name=$1 n=$2
  shift 2
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local log="$work/$name.log"
  if [ "$n" -eq 0 ]; then
    env PRIMUS_WORKSPACE="$work" PRIMUS_EXP_NAME="$name" OMP_NUM_THREADS=1 "${envs[@]}" \
      "$primus" train "${STAGE:-pretrain}" "${common[@]}" "$@" >"$log" 2>&1
  elif [ -n "${LAUNCH:-}" ]; then  # primus launch: tcp backend
    env PRIMUS_WORKSPACE="$work" PRIMUS_EXP_NAME="$name" OMP_NUM_THREADS=1 "${envs[@]}" timeout 300 \
      "$primus" launch --nproc-per-node "$n" --master-port 0 -- train "${STAGE:-pretrain}" "${common[@]}" "$@" >"$log" 2>&1
  else
    local xs=()
    for e in "${envs[@]}"; do xs+=(-x "$e"); done
    timeout 300 "$mpirun" "${flags[@]}" -x PRIMUS_EXP_NAME="$name" "${xs[@]}" -np "$n" \
      "$primus" train "${STAGE:-pretrain}" "${common[@]}" "$@" >"$log" 2>&1
  fi
  local code=$?
  if [ $code -ne 0 ]; then
    tail -40 "$log"
    fail "run $name exited $code"
  fi
  cp "$(find "$work" -path "*/$name/metrics.jsonl" | head -1)" "$work/$name.jsonl" || fail "no metrics for $name"
}

# run_reference NAME NP [env...] -- [overrides...]: run, for the reference runs many cases share (the single
# process, the emulated layouts): a run with the same binary, configuration files, environment and arguments
# finished earlier (by this or another case; ctest runs them in any order, two at a time) is not trained again,
# its metrics and log are copied (the runs are deterministic: bitwise equal on a repeat, which
# TrainE2E.SameSeedGivesBitwiseIdenticalLosses checks). A run that saves or loads a checkpoint always trains.
# The cache lives beside the binary (build/Testing/reference-runs); REFERENCE_CACHE=0 turns it off.
run_reference() {
  local name=$1 n=$2 a
  for a in "$@"; do
    case "$a" in --save | --load | --auto_continue_train | --pretrained_checkpoint | --finetune) run "$@"; return ;; esac
  done
  if [ "${REFERENCE_CACHE:-1}" = 0 ]; then run "$@"; return; fi
  local cache
  cache="$(dirname "$primus")/Testing/reference-runs"
  mkdir -p "$cache" || { run "$@"; return; }
  local key
  key=$({
    stat -c '%i %s %Y' "$primus"
    printf '%s\n' "n=$n" "stage=${STAGE:-pretrain}" "launch=${LAUNCH:-}" "${common[@]}" "--" "${@:3}"
    env | grep '^PRIMUS_' | grep -v '^PRIMUS_WORKSPACE=\|^PRIMUS_EXP_NAME=' | sort
    find "$src/configs" "$src/tests/e2e/configs" -type f | sort | xargs cat
  } | sha256sum | cut -c1-32)
  if [ -f "$cache/$key.jsonl" ] && [ -f "$cache/$key.log" ]; then
    cp "$cache/$key.jsonl" "$work/$name.jsonl" && cp "$cache/$key.log" "$work/$name.log" && {
      echo "reference run $name: the same run's results from $cache/$key.jsonl"
      return
    }
  fi
  run "$@"
  # Another case may be writing the same key: each writes its own temporary file and renames it in place.
  cp "$work/$name.log" "$cache/$key.log.$$" && mv -f "$cache/$key.log.$$" "$cache/$key.log"
  cp "$work/$name.jsonl" "$cache/$key.jsonl.$$" && mv -f "$cache/$key.jsonl.$$" "$cache/$key.jsonl"
}

# compare A B TOL [TOL_GRAD [TOL_STATS]]: every step's loss and grad_norm (20 steps), the routing statistics and
# MTP loss where the runs log them, and the validation losses; TOL 0 = bitwise. TOL_GRAD applies to the gradient
# norm, TOL_STATS to the routing statistics (moe_*; both default to TOL). A resumed run appends: a step's last
# record wins.
compare() {
  python3 - "$work/$1.jsonl" "$work/$2.jsonl" "$3" "${4:-$3}" "${5:-$3}" <<'PY'
import json, sys
def load(p):
    steps, vals = {}, {}
    for j in map(json.loads, open(p)):
        if "loss" in j:
            steps[j["step"]] = j
        if "val_loss" in j:
            vals[j["step"]] = j["val_loss"]
    return [steps[k] for k in sorted(steps)], vals
(a, va), (b, vb), tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
tol_grad = float(sys.argv[4])  # the gradient norm's tolerance (the 4th argument; default: the same)
tol_stats = float(sys.argv[5])  # the routing statistics' (the 5th argument; default: the same)
assert len(a) == len(b) == 20, f"step counts {len(a)} {len(b)}"
worst = 0.0
def check(what, x, y, tol=tol):
    global worst
    if x == 0 and y == 0:
        return
    d = abs(x - y) / max(abs(y), 1e-30)
    worst = max(worst, d)
    if (tol == 0 and x != y) or d > tol:
        sys.exit(f"{what}: {x!r} vs {y!r} (relative {d:.3g}, allowed {tol})")
for x, y in zip(a, b):
    for k in ("loss", "grad_norm", "moe_aux_loss", "moe_max_load_ratio", "moe_dropped_fraction", "mtp_loss"):
        if k in y:
            check(f"step {x['step']}: {k}", x[k], y[k],
                  tol_grad if k == "grad_norm" else tol_stats if k.startswith("moe_") else tol)
if va.keys() != vb.keys():
    sys.exit(f"validation steps differ: {sorted(va)} vs {sorted(vb)}")
for k in va:
    check(f"validation at step {k}", va[k], vb[k])
if va:
    print(f"validation losses at steps {sorted(va)} compared")
print(f"{sys.argv[1].split('/')[-1]} vs {sys.argv[2].split('/')[-1]}: 20 steps, max relative difference {worst:.3g}"
      f" (loss {a[0]['loss']:.5f} -> {a[-1]['loss']:.5f})")
PY
  [ $? -eq 0 ] || fail "curves differ: $1 vs $2"
}

# compare_expert_bias DIR DIR...: the MoE expert bias of every layer in these checkpoint directories (the f32
# master file, or the model file where that is the master) is bitwise the first one's, which has moved from its
# initial zeros (else equality would prove nothing).
compare_expert_bias() {
  python3 - "$@" <<'PY'
import json, os, struct, sys
def biases(d):
    f = d + "/master_rank0.safetensors"
    if not os.path.exists(f):
        f = d + "/model_rank0.safetensors"
    out = {}
    with open(f, "rb") as h:
        n = struct.unpack("<Q", h.read(8))[0]
        for k, v in json.loads(h.read(n)).items():
            if not k.endswith("expert_bias"):
                continue
            if v["dtype"] != "F32":
                sys.exit(f"{f}: {k} is {v['dtype']}, not F32")
            b, e = v["data_offsets"]
            h.seek(8 + n + b)
            out[k] = struct.unpack(f"<{(e - b) // 4}f", h.read(e - b))
    return out
ref = biases(sys.argv[1])
largest = max((abs(x) for t in ref.values() for x in t), default=0.0)
if largest == 0:
    sys.exit(f"{sys.argv[1]}: no expert bias, or it never moved")
for d in sys.argv[2:]:
    got = biases(d)
    if got.keys() != ref.keys():
        sys.exit(f"{d}: expert biases {sorted(got)}, {sys.argv[1]}: {sorted(ref)}")
    for k in ref:
        if got[k] != ref[k]:
            worst = max(abs(a - b) for a, b in zip(got[k], ref[k]))
            sys.exit(f"{d}: {k} differs from {sys.argv[1]}'s (largest difference {worst:.3g})")
print(f"expert bias of {len(ref)} layers bitwise equal in {len(sys.argv) - 1} checkpoints "
      f"(largest |bias| {largest:.3g})")
PY
  [ $? -eq 0 ] || fail "the expert bias differs between the checkpoints"
}

# refuse NAME EXPECTED NP [env...] -- [overrides...]: the run fails (every rank) with EXPECTED in its output,
# before any step (NP 0: one process).
refuse() {
  local name=$1 expect=$2 n=$3
  shift 3
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local out
  if [ "$n" -eq 0 ]; then
    out=$(env PRIMUS_WORKSPACE="$work" PRIMUS_EXP_NAME="$name" "${envs[@]}" timeout 60 "$primus" train "${STAGE:-pretrain}" \
      "${common[@]}" "$@" 2>&1)
  else
    local xs=()
    for e in "${envs[@]}"; do xs+=(-x "$e"); done
    out=$(timeout 60 "$mpirun" "${flags[@]}" -x PRIMUS_EXP_NAME="$name" "${xs[@]}" -np "$n" "$primus" train \
      "${STAGE:-pretrain}" "${common[@]}" "$@" 2>&1)
  fi
  local code=$?
  echo "$out" | grep -m1 -A1 "error:" | cut -c1-220
  [ $code -ne 0 ] && [ $code -ne 124 ] || fail "$name: exit code $code"
  echo "$out" | grep -qF "$expect" || fail "$name: the output does not say '$expect'"
  echo "$out" | grep -q "iter 1/" && fail "$name: a step ran"
  return 0
}
