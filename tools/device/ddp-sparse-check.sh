#!/usr/bin/env bash
# The row-sparse input-embedding gradient under DDP (docs/distributed.md) on a GPU machine, one call:
#   (a) primus_gpu_tests --quick row_sparse_grad (case vii: row_sparse_reserve, then a backward, against the CPU
#       reference and the dense GPU backward) and the packed-row families of stop 39 (mla, attention_packed)
#   (b) two DDP ranks, row-sparse (PRIMUS_SPARSE_EMBEDDING_GRAD=2) against dense (=0), the micro Llama on mock
#       data, unclipped: loss curves bitwise equal. One GPU: two processes sharing it through the host-staged
#       tcp communicator (the CUDA path of every kernel, no NCCL); two GPUs: NCCL.
#   (c) two GPUs only: DDP on the llama3.2-1B shape (T 2048, micro-batch 8 per GPU), row-sparse (the default
#       there) against dense, tokens/s of each and of one GPU (issue #19's DP 2 bar: >= 1.9x one GPU)
# Usage: tools/device/ddp-sparse-check.sh BIN_DIR   (BIN_DIR/primus and BIN_DIR/primus_gpu_tests from a CUDA
# build, stripped and carried). Summary in $OUT/summary.txt, logs in $OUT/ddp-sparse-logs.tgz.
set -uo pipefail
bin_dir=${1:?usage: ddp-sparse-check.sh BIN_DIR}
bin="$bin_dir/primus"
[ -x "$bin" ] || { echo "ddp-sparse-check: $bin not found" >&2; exit 2; }
final=${OUT:-/tmp/ddp-sparse-final}
out=/tmp/ddp-sparse-out
rm -rf "$out" /tmp/primus-ddp-sparse
mkdir -p "$out" "$final"
trap 'tar czf "$final/ddp-sparse-logs.tgz" -C "$out" . ; cp "$out/summary.txt" "$final/" 2>/dev/null' EXIT
export NCCL_NVLS_ENABLE=0 PRIMUS_WORKSPACE=/tmp/primus-ddp-sparse PRIMUS_USER=dev PRIMUS_HOME=$PWD
summary="$out/summary.txt"
: >"$summary"
status=0
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee -a "$summary"

# (a)
if [ -x "$bin_dir/primus_gpu_tests" ]; then
  timeout 400 "$bin_dir/primus_gpu_tests" --quick row_sparse_grad mla attention_packed >"$out/gpu_tests.log" 2>&1
  echo "== gpu tests: rc $?" | tee -a "$summary"
  tail -3 "$out/gpu_tests.log" | tee -a "$summary"
  grep -E "MISMATCH|FAIL" "$out/gpu_tests.log" | head -20 | tee -a "$summary"
fi

# run NAME SPARSE_MODE NPROC train-arguments...   (the launcher; tcp backend when both ranks share one GPU)
run() {
  local name=$1 mode=$2 n=$3
  shift 3
  local backend=()
  [ "$gpus" -lt "$n" ] && backend=(env PRIMUS_COMM_BACKEND=tcp)
  local t0=$(date +%s)
  if [ "$n" -eq 1 ]; then
    PRIMUS_SPARSE_EMBEDDING_GRAD=$mode PRIMUS_EXP_NAME=$name timeout 300 "$bin" train pretrain "$@" \
      >"$out/$name.log" 2>&1
  else
    PRIMUS_SPARSE_EMBEDDING_GRAD=$mode PRIMUS_EXP_NAME=$name timeout 300 "${backend[@]}" "$bin" launch \
      --nproc-per-node "$n" --master-port 0 -- train pretrain "$@" >"$out/$name.log" 2>&1
  fi
  local rc=$?
  echo "== $name (PRIMUS_SPARSE_EMBEDDING_GRAD=$mode, $n ranks on $gpus GPU(s)): rc $rc, $(($(date +%s) - t0)) s" |
    tee -a "$summary"
  grep -hE "input embedding gradient|data parallel:" "$out/$name.log" | head -2 | tee -a "$summary"
  [ $rc -eq 0 ] || { status=1; tail -30 "$out/$name.log"; }
  cp "$(find /tmp/primus-ddp-sparse -path "*/$name/metrics.jsonl" | head -1)" "$out/$name.jsonl" 2>/dev/null
  cp "$(find /tmp/primus-ddp-sparse -path "*/$name/summary.json" | head -1)" "$out/$name.summary.json" 2>/dev/null
  return $rc
}

# (b)
small=(--config tests/e2e/configs/fortunes_micro_llama.yaml --device cuda --mock_data true --train_iters 20
       --eval_interval 0 --micro_batch_size 4 --global_batch_size 8 --lr_warmup_iters 5 --log_interval 5
       --overlap_grad_reduce true --clip_grad 0)
if run eq_sparse 2 2 "${small[@]}" && run eq_dense 0 2 "${small[@]}"; then
  python3 - "$out/eq_sparse.jsonl" "$out/eq_dense.jsonl" <<'EOF' | tee -a "$summary"
import json, sys
load = lambda p: [json.loads(l) for l in open(p) if '"loss"' in l]
a, b = load(sys.argv[1]), load(sys.argv[2])
same = len(a) == len(b) == 20 and all(x["loss"] == y["loss"] for x, y in zip(a, b))
g = max(abs(x["grad_norm"] - y["grad_norm"]) / y["grad_norm"] for x, y in zip(a, b))
print(f"  row-sparse vs dense DDP: {len(a)} steps, losses {'bitwise equal' if same else 'DIFFER'}, "
      f"grad-norm max relative difference {g:.3g}")
sys.exit(0 if same else 1)
EOF
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

# (c)
if [ "$gpus" -ge 2 ]; then
  one_b=(--config configs/examples/megatron/bench_llama3.2-1B-shape.yaml --device cuda --train_iters 20)
  run b1_1gpu 1 1 "${one_b[@]}" --global_batch_size 8
  run b1_2gpu_sparse 1 2 "${one_b[@]}" --global_batch_size 16 --overlap_grad_reduce true
  run b1_2gpu_dense 0 2 "${one_b[@]}" --global_batch_size 16 --overlap_grad_reduce true
  python3 - "$out" <<'EOF' | tee -a "$summary"
import json, sys
d = sys.argv[1]
tps = lambda n: json.load(open(f"{d}/{n}.summary.json"))["tokens_per_s"]
try:
    one = tps("b1_1gpu")
    for n in ("b1_2gpu_sparse", "b1_2gpu_dense"):
        print(f"  {n}: {tps(n):.0f} tok/s = {tps(n) / one:.3f}x one GPU ({one:.0f}); bar >= 1.9x")
except Exception as e:
    print(f"  1B shape: no result ({e})")
EOF
fi
echo "ddp-sparse-check: $([ $status -eq 0 ] && echo passed || echo FAILED)" | tee -a "$summary"
exit $status
