#!/usr/bin/env bash
# Runs the libFuzzer harnesses (tests/fuzz/fuzz_<name>.cpp) for a fixed time each and prints, per harness,
# executions, coverage (libFuzzer's cov = edges, ft = features) and crashes. Exits non-zero when any harness
# crashed (a sanitizer report, an uncaught exception, a timeout, an out-of-memory or a leak); the input that
# did it is kept under build-fuzz/artifacts/<name>/ (reproduce: build-fuzz/fuzz_<name> <that file>).
#
#   tools/fuzz/run.sh 20             # every harness, 20 s each (what CI runs; the default is 60 s)
#   tools/fuzz/run.sh 3600           # every harness, 1 h each (the long run docs/fuzzing.md records)
#   tools/fuzz/run.sh 300 yaml_config tokenizer_json
#
# Environment: FUZZ_BUILD_DIR (default build-fuzz), FUZZ_PARALLEL (harnesses at a time, default 2),
# FUZZ_RSS_MB (memory limit per harness, default 2048), FUZZ_BUILD_ONLY=1 (build the harnesses, fuzz nothing).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
shift || true
build=${FUZZ_BUILD_DIR:-build-fuzz}
parallel=${FUZZ_PARALLEL:-2}
rss_mb=${FUZZ_RSS_MB:-2048}

if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S tests/fuzz -B "$build" -G Ninja >/dev/null
fi
if ! ninja -C "$build" -j "$(nproc 2>/dev/null || echo 2)" >"$build/ninja.log" 2>&1; then
  tail -40 "$build/ninja.log" >&2
  echo "fuzz: building the harnesses failed (full log: $build/ninja.log)" >&2
  exit 2
fi
[ "${FUZZ_BUILD_ONLY:-0}" = 1 ] && exit 0  # .ci/run builds them in the background while the tests run

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.cpp; do
    n=$(basename "$f" .cpp)
    names+=("${n#fuzz_}")
  done
fi

run_one() {
  local name=$1 bin="$build/fuzz_$1"
  local corpus="$build/corpus/$name" artifacts="$build/artifacts/$name" log="$build/logs/$name.log"
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  touch "$log.start"
  local seeds=()
  [ -d "tests/fuzz/corpus/$name" ] && seeds=("tests/fuzz/corpus/$name")
  # New inputs go to the first directory (the working corpus under the build folder); the checked-in seeds
  # are only read. -timeout: one input running 10 s is reported as a hang.
  set +e
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
    "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb="$rss_mb" -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$corpus" "${seeds[@]}" >"$log" 2>&1
  echo $? >"$log.rc"
  set -e
}

# Inputs that crashed a harness in this run (earlier runs' artifacts stay, but are not counted again).
new_artifacts() {
  find "$build/artifacts/$1" -type f -newer "$build/logs/$1.log.start" \
    \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) 2>/dev/null
}

start=$(date +%s)
for name in "${names[@]}"; do
  if [ ! -x "$build/fuzz_$name" ]; then
    echo "fuzz: no harness fuzz_$name (known: $(ls "$build" | sed -n 's/^fuzz_//p' | tr '\n' ' '))" >&2
    exit 2
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  run_one "$name" &
done
wait

failed=0
printf '%-20s %8s %12s %10s %8s %8s %8s  %s\n' harness seconds executions exec/s cov ft crashes result
for name in "${names[@]}"; do
  log="$build/logs/$name.log"
  rc=$(cat "$log.rc")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
  crashes=$(new_artifacts "$name" | wc -l)
  result=ok
  if [ "$rc" != 0 ] || [ "$crashes" != 0 ]; then
    result="FAILED (exit $rc; see $log)"
    failed=1
  fi
  printf '%-20s %8s %12s %10s %8s %8s %8s  %s\n' "$name" "$seconds" "${execs:-?}" "${rate:-?}" "${cov:-?}" \
    "${ft:-?}" "$crashes" "$result"
done
for name in "${names[@]}"; do
  new_artifacts "$name" | while read -r f; do echo "fuzz: $name kept $f (reproduce: $build/fuzz_$name $f)"; done
done
echo "fuzz: ${#names[@]} harnesses, ${seconds} s each, $(($(date +%s) - start)) s in all"
exit $failed
