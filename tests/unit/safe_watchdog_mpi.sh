#!/usr/bin/env bash
# The in-flight monitors under mpirun (ctest, tests/CMakeLists.txt), with `primus preflight --hang-drill` on NP
# ranks of the mpi backend:
#   straggler: PRIMUS_INJECT_SLOW=1:2 (rank 1 works twice as long per step) -> rank 0 flags rank 1, exit 0;
#   hang: PRIMUS_INJECT_STALL=1:5 (rank 1 stops before its 5th collective) -> exit 5 (kExitHang) within 30 s,
#   the watchdog output naming rank 1 as the stuck rank.
# Usage: safe_watchdog_mpi.sh MPIRUN PRIMUS NP
set -u
mpirun=$1 primus=$2 np=$3
dir=$(mktemp -d)
flags=(--allow-run-as-root --oversubscribe --mca btl_vader_single_copy_mechanism none -x OMP_NUM_THREADS=1
       -x PRIMUS_INJECT_STALL=1:5)
# Straggler first: rank 1 works twice as long per step; rank 0's check must name it, and nothing hangs.
slow=$(timeout 90 "$mpirun" "${flags[@]/PRIMUS_INJECT_STALL=1:5/PRIMUS_INJECT_SLOW=1:2}" -np "$np" "$primus" \
       preflight --hang-drill --drill-backend mpi --drill-steps 10 --drill-timeout 5 --drill-dir "$dir/slow" 2>&1)
slow_code=$?
echo "$slow" | grep -E "straggler|hang drill"
[ "$slow_code" -eq 0 ] || { echo "safe_watchdog_mpi FAILED: straggler drill exited $slow_code"; echo "$slow"; exit 1; }
echo "$slow" | grep -q "straggler at step 5: rank 1:" || { echo "safe_watchdog_mpi FAILED: rank 1 not flagged"; exit 1; }
start=$(date +%s%N)
out=$(timeout 90 "$mpirun" "${flags[@]}" -np "$np" "$primus" preflight --hang-drill --drill-backend mpi \
      --drill-steps 40 --drill-timeout 3 --drill-dir "$dir" 2>&1)
code=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$out"
echo "safe_watchdog_mpi: exit code $code, ${elapsed_ms} ms"
fail() { echo "safe_watchdog_mpi FAILED: $*"; rm -rf "$dir"; exit 1; }
[ "$code" -ne 0 ] || fail "the job exited 0"
[ "$code" -ne 124 ] || fail "the job hung (killed by timeout after 90 s)"
[ "$elapsed_ms" -lt 30000 ] || fail "took ${elapsed_ms} ms (limit 30 s)"
echo "$out" | grep -q "stuck rank(s): 1;" || fail "no watchdog message naming rank 1 as stuck"
echo "$out" | grep -q "exiting with code 5" || fail "the watchdog did not end the job with code 5"
ls "$dir"/hang-rank-*.json > /dev/null 2>&1 || fail "no hang report written"
rm -rf "$dir"
echo "safe_watchdog_mpi: passed"
