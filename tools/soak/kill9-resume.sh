#!/usr/bin/env bash
# kill -9 soak (docs/checkpoints.md): a CPU run of the micro Llama with an async save every 2 steps is killed
# with SIGKILL at KILLS random points, then resumed with `--resume auto` to the end; every resumed job must
# match one uninterrupted run bitwise: the loss, grad-norm and lr of every step in metrics.jsonl and the bytes
# of the final checkpoint's model and optimizer files.
#
# The kill points rotate over three phases:
#   forward  a random moment while steps run (the CPU spends nearly all of a step in forward/backward):
#            after a random number of complete metrics lines, plus a random 0-150 ms;
#   save     while an async save is being written: a staging directory (.tmp-iter_*) exists in the save
#            directory (writes slowed with PRIMUS_CKPT_SLOW_WRITE_MS so that there is time to aim), plus a
#            random 0-100 ms;
#   publish  exactly at a save phase, by the checkpoint code's own SIGKILL (PRIMUS_CKPT_CRASH_AT=<phase>@<n>,
#            phase one of shard, manifest, stage, publish, latest, retention; n random).
#
# usage: tools/soak/kill9-resume.sh [--kills 50] [--iters 24] [--seed 1] [--primus build/primus] [--work DIR]
# Prints one line per kill and "soak: K/K resumes bitwise equal"; exits 1 on any mismatch.
set -u -o pipefail

kills=50 iters=24 seed=1 primus=build/primus work=""
while [ $# -gt 0 ]; do
  case "$1" in
    --kills) kills=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --primus) primus=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) echo "usage: $0 [--kills N] [--iters N] [--seed N] [--primus PATH] [--work DIR]" >&2; exit 2 ;;
  esac
done
root=$(cd "$(dirname "$0")/../.." && pwd)
[ -x "$primus" ] || { echo "soak: $primus is not an executable (build primus first)" >&2; exit 2; }
primus=$(cd "$(dirname "$primus")" && pwd)/$(basename "$primus")
[ -n "$work" ] || work=$(mktemp -d /tmp/primus-soak-XXXXXX)
mkdir -p "$work"
RANDOM=$seed
py=/usr/bin/python3
[ -x "$py" ] || py=python3

common=(train pretrain --config "$root/tests/e2e/configs/fortunes_micro_llama.yaml" --train_iters "$iters"
        --save_interval 2 --async_save true --eval_interval 0 --log_interval 10 --lr_warmup_iters 1)

# The environment of one job: its workspace and experiment name (the run directory is under DIR).
job_env() { echo "PRIMUS_WORKSPACE=$1 PRIMUS_EXP_NAME=$2 PRIMUS_USER=soak OMP_NUM_THREADS=1"; }
metrics_of() { echo "$1/e2e/soak/$2/metrics.jsonl"; }
complete_lines() { if [ -f "$1" ]; then tr -cd '\n' <"$1" | wc -c; else echo 0; fi; }  # whole lines only

start_run() {  # start_run DIR EXP "ENV..." -> pid in $run_pid (stdout/stderr in DIR/run-N.log)
  local dir=$1 exp=$2 extra_env=$3
  env -u PRIMUS_CONFIG_PATH -u WORLD_SIZE $(job_env "$dir" "$exp") $extra_env \
    "$primus" "${common[@]}" --save "$dir/ckpt" >>"$dir/run.log" 2>&1 &
  run_pid=$!
}

# The straight run every resumed job is compared against.
ref="$work/ref"
rm -rf "$ref" && mkdir -p "$ref"
t0=$(date +%s)
start_run "$ref" ref ""
wait "$run_pid" || { echo "soak: the uninterrupted run failed:"; tail -20 "$ref/run.log"; exit 1; }
ref_s=$(( $(date +%s) - t0 ))
ref_metrics=$(metrics_of "$ref" ref)
ref_ckpt="$ref/ckpt/$(cat "$ref/ckpt/latest")"
echo "soak: reference run of $iters steps took ${ref_s}s; checkpoint $ref_ckpt"

compare() {  # compare DIR EXP -> prints "ok" or what differs
  local dir=$1 exp=$2 ck
  ck="$dir/ckpt/$(cat "$dir/ckpt/latest" 2>/dev/null)"
  "$py" - "$ref_metrics" "$(metrics_of "$dir" "$exp")" <<'EOF' || return 1
import json, sys
def steps(p):
    # A line counts once its '\n' is written (the writer's contract): a torn tail is not a record.
    text = open(p).read()
    recs = [json.loads(l) for l in text[: text.rfind("\n") + 1].splitlines() if l.strip()]
    return [(r["step"], r["loss"], r["grad_norm"], r["lr"]) for r in recs if "loss" in r]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
if a != b:
    diff = next((f"step {x[0]}: {x} vs {y}" for x, y in zip(a, b) if x != y), f"{len(a)} vs {len(b)} steps")
    print(f"metrics differ: {diff}")
    sys.exit(1)
EOF
  for f in model_rank0.safetensors optim_rank0.safetensors; do
    cmp -s "$ref_ckpt/$f" "$ck/$f" || { echo "checkpoint file $f differs ($ck)"; return 1; }
  done
  [ "$(basename "$ck")" = "$(basename "$ref_ckpt")" ] || { echo "latest is $(basename "$ck")"; return 1; }
  echo ok
}

phases=(shard manifest stage publish latest retention)
modes=(forward save publish)
ok=0 done_kills=0 missed=0 trial=0
while [ "$done_kills" -lt "$kills" ]; do
  trial=$((trial + 1))
  mode=${modes[$((trial % 3))]}
  dir="$work/t$trial"
  exp="t$trial"
  rm -rf "$dir" && mkdir -p "$dir"
  metrics=$(metrics_of "$dir" "$exp")
  what=""
  case "$mode" in
    forward)
      k=$((1 + RANDOM % (iters - 2)))
      ms=$((RANDOM % 150))
      start_run "$dir" "$exp" ""
      while kill -0 "$run_pid" 2>/dev/null && [ "$(complete_lines "$metrics")" -lt "$k" ]; do sleep 0.02; done
      sleep "$(printf '0.%03d' "$ms")"
      kill -9 "$run_pid" 2>/dev/null
      what="after $k steps + ${ms} ms"
      ;;
    save)
      n=$((1 + RANDOM % (iters / 2 - 1)))  # aim at the n-th async save
      ms=$((RANDOM % 100))
      start_run "$dir" "$exp" "PRIMUS_CKPT_SLOW_WRITE_MS=5"
      seen=0
      while kill -0 "$run_pid" 2>/dev/null; do
        if compgen -G "$dir/ckpt/.tmp-iter_*" >/dev/null; then
          seen=$((seen + 1))
          [ "$seen" -ge "$n" ] && break
          while compgen -G "$dir/ckpt/.tmp-iter_*" >/dev/null && kill -0 "$run_pid" 2>/dev/null; do sleep 0.005; done
        fi
        sleep 0.005
      done
      sleep "$(printf '0.%03d' "$ms")"
      kill -9 "$run_pid" 2>/dev/null
      what="inside async save #$n + ${ms} ms"
      ;;
    publish)
      phase=${phases[$((RANDOM % ${#phases[@]}))]}
      n=$((1 + RANDOM % (iters / 2 - 1)))
      start_run "$dir" "$exp" "PRIMUS_CKPT_CRASH_AT=$phase@$n"
      what="at save phase $phase of save #$n"
      ;;
  esac
  wait "$run_pid" 2>/dev/null
  rc=$?
  if [ "$rc" -ne 137 ]; then  # the run ended before the kill landed: not a kill point
    missed=$((missed + 1))
    echo "soak: trial $trial ($mode, $what): not killed (exit $rc), not counted"
    rm -rf "$dir"
    continue
  fi
  done_kills=$((done_kills + 1))
  at=$(complete_lines "$metrics")
  latest=$(cat "$dir/ckpt/latest" 2>/dev/null || echo none)
  env -u PRIMUS_CONFIG_PATH -u WORLD_SIZE $(job_env "$dir" "$exp") \
    "$primus" "${common[@]}" --save "$dir/ckpt" --resume auto >>"$dir/resume.log" 2>&1
  rrc=$?
  if [ "$rrc" -ne 0 ]; then
    result="FAIL: the resume exited $rrc ($(tail -1 "$dir/resume.log"))"
  else
    result=$(compare "$dir" "$exp") || result="FAIL: $result"
  fi
  [ "$result" = ok ] && ok=$((ok + 1))
  printf 'soak: kill %2d/%d %-8s %-34s killed at step %2d, latest %-14s resume: %s\n' "$done_kills" "$kills" \
    "$mode" "$what" "$at" "$latest" "$result"
  [ "$result" = ok ] && rm -rf "$dir"  # keep failing jobs for inspection
done
echo "soak: $ok/$kills resumes bitwise equal ($missed trials ended before the kill; seed $seed; work $work)"
[ "$ok" -eq "$kills" ]
