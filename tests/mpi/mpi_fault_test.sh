#!/usr/bin/env bash
# Fault tests of the mpi backend under mpirun (ctest runs them; see tests/CMakeLists.txt):
#   die:  rank 1 SIGKILLs itself just before a collective -> every other rank exits non-zero within 30 s and
#         the output names rank 1 (mpirun's report of the dead process).
#   hang: rank 1 stops answering -> the others' watchdog (PRIMUS_COMM_TIMEOUT_S=2) names rank, group, op and
#         seq, and the job exits non-zero within 30 s.
# Usage: mpi_fault_test.sh die|hang MPIRUN PRIMUS NP
set -u
mode=$1 mpirun=$2 primus=$3 np=$4
flags=(--allow-run-as-root --oversubscribe --mca btl_vader_single_copy_mechanism none -x OMP_NUM_THREADS=1
       -x PRIMUS_COMM_TIMEOUT_S=2)
start=$(date +%s%N)
out=$(timeout 60 "$mpirun" "${flags[@]}" -np "$np" "$primus" comm selftest --backend mpi --fault "$mode" \
      --fault-rank 1 2>&1)
code=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$out"
echo "mpi_fault_test: mode $mode, exit code $code, ${elapsed_ms} ms"
fail() { echo "mpi_fault_test FAILED: $*"; exit 1; }
[ "$code" -ne 0 ] || fail "the job exited 0"
[ "$code" -ne 124 ] || fail "the job hung (killed by timeout after 60 s)"
[ "$elapsed_ms" -lt 30000 ] || fail "took ${elapsed_ms} ms (limit 30 s)"
if [ "$mode" = die ]; then
  echo "$out" | grep -Eq "process rank 1 .*(signal 9|Killed)" || fail "the output does not name rank 1 as killed"
else
  echo "$out" | grep -q "group world, op all_reduce 'fault injection' (seq 2) timed out after 2 s" ||
    fail "no watchdog message naming rank, group, op and seq"
fi
echo "mpi_fault_test: passed"
