# Sourced by the multi-rank training tests (dp_train_test.sh, ep_train_test.sh): one training run of the
# micro experiment. The caller defines work, primus, mpirun, flags (mpirun's), common (the training arguments),
# fail(), and LAUNCH (non-empty: ranks started by `primus launch`, tcp backend, instead of mpirun).
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
      "$primus" train pretrain "${common[@]}" "$@" >"$log" 2>&1
  elif [ -n "${LAUNCH:-}" ]; then  # primus launch: tcp backend
    env PRIMUS_WORKSPACE="$work" PRIMUS_EXP_NAME="$name" OMP_NUM_THREADS=1 "${envs[@]}" timeout 300 \
      "$primus" launch --nproc-per-node "$n" --master-port 0 -- train pretrain "${common[@]}" "$@" >"$log" 2>&1
  else
    local xs=()
    for e in "${envs[@]}"; do xs+=(-x "$e"); done
    timeout 300 "$mpirun" "${flags[@]}" -x PRIMUS_EXP_NAME="$name" "${xs[@]}" -np "$n" \
      "$primus" train pretrain "${common[@]}" "$@" >"$log" 2>&1
  fi
  local code=$?
  if [ $code -ne 0 ]; then
    tail -40 "$log"
    fail "run $name exited $code"
  fi
  cp "$(find "$work" -path "*/$name/metrics.jsonl" | head -1)" "$work/$name.jsonl" || fail "no metrics for $name"
}
