#!/usr/bin/env bash
# The whole test suite N times in a row (issue #17: no flaky tests on a loaded 2-core machine). Runs ctest in
# an existing build folder N times and prints one line per run: passed / failed counts, wall time, and the
# names of the tests that failed; ends with "suite-repeat: K/N runs green". Exit 1 when any run had a failure.
# usage: tools/soak/suite-repeat.sh [--runs 20] [--build build] [--jobs $(nproc)] [--log FILE]
set -u -o pipefail
runs=20 build=build jobs=$(nproc 2>/dev/null || echo 2) log=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --log) log=$2; shift 2 ;;
    *) echo "usage: $0 [--runs N] [--build DIR] [--jobs N] [--log FILE]" >&2; exit 2 ;;
  esac
done
[ -f "$build/CTestTestfile.cmake" ] || { echo "suite-repeat: $build is not a configured build folder" >&2; exit 2; }
green=0
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  out=$(ctest --test-dir "$build" -j "$jobs" --timeout 900 2>&1)
  secs=$(( $(date +%s) - start ))
  summary=$(grep -E "tests passed, [0-9]+ tests failed" <<<"$out" | tail -1)
  failed=$(grep -E "^\s+[0-9]+ - " <<<"$out" | sed -E 's/^\s+[0-9]+ - //' | tr '\n' ' ')
  [ -z "$failed" ] && [ -n "$summary" ] && green=$((green + 1))
  line="suite-repeat: run $i/$runs $(date -u +%H:%M:%SZ) ${secs}s | ${summary:-no summary} | load $(cut -d' ' -f1-3 /proc/loadavg)${failed:+ | failed: $failed}"
  echo "$line"
  [ -n "$log" ] && echo "$line" >>"$log"
done
echo "suite-repeat: $green/$runs runs green"
[ "$green" -eq "$runs" ]
