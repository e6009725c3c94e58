#!/usr/bin/env bash
# Run-to-run reproducibility on one GPU, in one call:
#   (a) primus_gpu_tests --quick attn_determinism GPU_TESTS (default GPU_TESTS: attention): repeated attention
#       backwards, default vs deterministic mode, and what the mode costs;
#   (b) each anchor workload (20 steps) twice with the default settings and twice with deterministic_mode:
#       per-step loss and gradient norm compared between the two runs of each pair (bitwise, from
#       metrics.jsonl), and the median step time of each run.
# Usage (repo root on the GPU machine): [NPROC=2 EXTRA="..."] [WORKLOADS="..."] tools/device/determinism-check.sh BIN_DIR
set -uo pipefail
bin=${1:?usage: determinism-check.sh BIN_DIR}
final=${OUT:-/tmp/determinism}
work=/tmp/determinism-work
rm -rf "$work" /tmp/det-ws; mkdir -p "$work" "$final"
export PRIMUS_WORKSPACE=/tmp/det-ws PRIMUS_USER=dev PRIMUS_HOME=$PWD
summary=$work/summary.txt
trap 'cp "$summary" "$final"/; tar czf "$final/determinism.tgz" -C "$work" .' EXIT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$summary"
date -u +%Y-%m-%dT%H:%M:%SZ | tee -a "$summary"

if [ -x "$bin/primus_gpu_tests" ]; then
  # shellcheck disable=SC2086
  "$bin/primus_gpu_tests" --quick attn_determinism ${GPU_TESTS-attention} > "$work/gpu_tests.txt" 2>&1
  echo "== gpu_tests rc=$?" | tee -a "$summary"
  grep -E "attn_determ|FAIL|passed|failed" "$work/gpu_tests.txt" | tail -30 | tee -a "$summary"
fi

# NPROC=2 runs every workload on two GPUs through `primus launch` (EXTRA: more arguments for every run, e.g.
# "--num_layers 4 --global_batch_size 16 --overlap_grad_reduce true").
launcher=()
[ "${NPROC:-1}" -gt 1 ] && launcher=(launch --nproc-per-node "$NPROC" --master-port 0 --)
export NCCL_NVLS_ENABLE=0
run() {  # name workload extra-args...
  local name=$1 w=$2
  shift 2
  # shellcheck disable=SC2086
  PRIMUS_EXP_NAME=$name timeout 150 "$bin/primus" "${launcher[@]}" train pretrain \
    --config "configs/examples/megatron/$w.yaml" --device cuda ${EXTRA:-} "$@" > "$work/$name.log" 2>&1
  echo "== $name ($*) rc=$?: $(grep -E "done:" "$work/$name.log" | tail -1)" | tee -a "$summary"
  cp "/tmp/det-ws/bench/dev/$name/metrics.jsonl" "$work/$name.jsonl" 2>/dev/null
}
for w in ${WORKLOADS:-bench_llama3.2-1B-shape bench_llama3-8B-4L}; do
  for mode in default deterministic; do
    args=()
    [ $mode = deterministic ] && args=(--deterministic_mode true)
    for r in 1 2; do run "${w}_${mode}_$r" "$w" "${args[@]}"; done
  done
done
python3 - "$work" <<'PY' | tee -a "$summary"
import glob, json, os, statistics, sys
d = sys.argv[1]
def recs(name):
    p = f"{d}/{name}.jsonl"
    return [r for r in map(json.loads, open(p)) if "loss" in r] if os.path.exists(p) else []
names = sorted({os.path.basename(p)[:-len("_1.jsonl")] for p in glob.glob(f"{d}/*_1.jsonl")})
for n in names:
    a, b = recs(n + "_1"), recs(n + "_2")
    if not a or not b:
        print(f"  {n}: missing metrics"); continue
    same_loss = sum(1 for x, y in zip(a, b) if x["loss"] == y["loss"])
    same_norm = sum(1 for x, y in zip(a, b) if x["grad_norm"] == y["grad_norm"])
    first = next((x["step"] for x, y in zip(a, b) if x["loss"] != y["loss"] or x["grad_norm"] != y["grad_norm"]), None)
    ms = [statistics.median([r["iter_ms"] for r in rs if r["step"] >= 3]) for rs in (a, b)]
    print(f"  {n}: identical loss {same_loss}/{len(a)}, grad norm {same_norm}/{len(a)} steps; first difference at "
          f"step {first}; final loss {a[-1]['loss']!r} vs {b[-1]['loss']!r}; median step {ms[0]:.1f} / {ms[1]:.1f} ms")
PY
