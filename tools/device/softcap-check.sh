#!/usr/bin/env bash
# Grok-2's soft-capping (final_logit_softcapping, router_logit_softcapping; docs/kernels/fused.md) on one GPU:
#   gpu:   primus_gpu_tests --quick softcap loss moe_router (the softcap kernels against the CPU reference,
#          and the families they sit between)
#   track: the micro Mixtral with both caps (3 and 2), 40 steps on mock data, GPU against the CPU reference
#          (compare_tracking.py, 2%)
# Usage: tools/device/softcap-check.sh BIN_DIR   (BIN_DIR/primus and BIN_DIR/primus_gpu_tests)
# PARTS="gpu track" selects. Logs in $OUT (default /tmp/softcap).
set -uo pipefail
bin=${1:?usage: softcap-check.sh BIN_DIR}
out=${OUT:-/tmp/softcap}
parts=" ${PARTS:-gpu track} "
mkdir -p "$out"
ws=/tmp/softcap-ws
rm -rf "$ws"
status=0
date -u +%Y-%m-%dT%H:%M:%SZ
if [[ "$parts" == *" gpu "* ]]; then
  timeout 200 "$bin/primus_gpu_tests" --quick softcap loss moe_router >"$out/gpu_tests.txt" 2>&1
  rc=$?
  echo "== gpu tests softcap loss moe_router: rc $rc"
  grep -E "softcap|checked cases" "$out/gpu_tests.txt" | cut -c1-160
  grep -E "FAIL|MISMATCH" "$out/gpu_tests.txt" | head -20
  [ $rc -eq 0 ] || status=1
fi
if [[ "$parts" == *" track "* ]]; then
  for dev in cpu cuda; do
    PRIMUS_WORKSPACE=$ws PRIMUS_EXP_NAME=track_$dev PRIMUS_USER=dev PRIMUS_E2E_MODEL=micro_mixtral.yaml \
      OMP_NUM_THREADS=16 timeout 300 "$bin/primus" train pretrain \
      --config tests/e2e/configs/fortunes_micro_llama.yaml --mock_data true --train_iters 40 \
      --lr_warmup_iters 4 --eval_interval 0 --log_interval 10 --final_logit_softcapping 3 \
      --router_logit_softcapping 2 --device $dev >"$out/track_$dev.log" 2>&1
    echo "== track_$dev rc=$?"
    grep -E "^model:|^done:" "$out/track_$dev.log" | cut -c1-200
  done
  python3 tools/device/compare_tracking.py "$(find $ws -path "*/track_cpu/metrics.jsonl" | head -1)" \
    "$(find $ws -path "*/track_cuda/metrics.jsonl" | head -1)" --tol 0.02 | tail -1 | sed "s/^/soft-capped: /"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
echo "softcap-check: $([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
