#!/usr/bin/env bash
# Data-parallel training on the two-GPU machine (kind nvidia-h200-x2), one call:
#   (a) equivalence: the micro Llama of the e2e tests on mock data, 20 steps, 1 GPU vs 2 GPUs (NCCL) for DDP, ZeRO-1 and FSDP; loss curves
#       within 1e-2 relative (NCCL's reduction order is its own, compute is bf16: not bitwise)
#   (b) DDP on the llama3.2-1B shape (T 2048, micro-batch 8 per GPU): 2 GPUs vs 1 GPU tokens/s (target >= 1.9x)
#   (c) FSDP + full recompute on Llama-3.1-8B (32 layers, T 8192, micro-batch 1 per GPU): tokens/s/GPU, MFU,
#       peak memory per GPU
#   (d) PyTorch FSDP2 on the same model and GPUs (tools/device/fsdp2_llama8b.py), when torch is present
# Usage: tools/device/ddp-check.sh [BUILD_DIR]   (BUILD_DIR/primus from a -DPRIMUS_CUDA=ON build)
# The build directory is too big to carry (64 MiB limit): copy the binary alone, e.g.
#   mkdir -p build-ddp && cp build-par-cuda/primus build-ddp/     then carry build-ddp and run
#   tools/device/ddp-check.sh build-ddp                            (kind nvidia-h200-x2)
# Logs and a summary go to $OUT. Runs take ~8 minutes in all; each is bounded (240 s; torch 300 s).
set -uo pipefail
build=${1:-build-par-cuda}
bin="$build/primus"
if [ ! -x "$bin" ]; then
  echo "ddp-check: $bin not found; build with CUDA here and carry $build" >&2
  exit 2
fi
# Logs gather in a scratch folder and come back as one archive plus summary.txt (few files come back from $OUT).
final=${OUT:-/tmp/ddp-final}
out=/tmp/ddp-out
rm -rf "$out"
mkdir -p "$out" "$final"
trap 'tar czf "$final/ddp-logs.tgz" -C "$out" . ; cp "$out/summary.txt" "$final/" 2>/dev/null' EXIT
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=${NCCL_DEBUG:-WARN} PRIMUS_WORKSPACE=/tmp/primus-ddp PRIMUS_USER=dev
export PRIMUS_HOME=$PWD
rm -rf /tmp/primus-ddp
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | tee "$out/gpus.txt"
status=0
summary="$out/summary.txt"
: >"$summary"

# run NAME NPROC primus-train-arguments...   (NPROC 1: no launcher)
run() {
  local name=$1 n=$2
  shift 2
  local t0=$(date +%s)
  if [ "$n" -eq 1 ]; then
    PRIMUS_EXP_NAME=$name timeout 240 "$bin" train pretrain "$@" >"$out/$name.log" 2>&1
  else
    PRIMUS_EXP_NAME=$name timeout 240 "$bin" launch --nproc-per-node "$n" --master-port 0 -- train pretrain "$@" \
      >"$out/$name.log" 2>&1
  fi
  local rc=$?
  echo "== $name: rc $rc, $(($(date +%s) - t0)) s" | tee -a "$summary"
  grep -E "data parallel:|\] done:|^done:|done: " "$out/$name.log" | tail -2 | tee -a "$summary"
  [ $rc -eq 0 ] || { status=1; tail -30 "$out/$name.log"; }
  cp "$(find /tmp/primus-ddp -path "*/$name/metrics.jsonl" | head -1)" "$out/$name.jsonl" 2>/dev/null
  cp "$(find /tmp/primus-ddp -path "*/$name/summary.json" | head -1)" "$out/$name.summary.json" 2>/dev/null
  return $rc
}

compare() {  # A B TOL
  python3 - "$out/$1.jsonl" "$out/$2.jsonl" "$3" <<'EOF' | tee -a "$summary"
import json, sys
load = lambda p: [json.loads(l) for l in open(p) if '"loss"' in l]
a, b, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
worst = max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(a, b))
ok = len(a) == len(b) and worst <= tol
print(f"  {sys.argv[1].split('/')[-1]} vs {sys.argv[2].split('/')[-1]}: {len(a)} steps, max relative loss "
      f"difference {worst:.3g} (allowed {tol}) {'ok' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
EOF
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
}

# (a) equivalence, 1 vs 2 GPUs
small=(--config tests/e2e/configs/fortunes_micro_llama.yaml --device cuda --mock_data true --train_iters 20
       --eval_interval 0 --micro_batch_size 4 --global_batch_size 8 --lr_warmup_iters 5 --log_interval 5)
run eq_1gpu 1 "${small[@]}"
run eq_ddp 2 "${small[@]}" --overlap_grad_reduce true && compare eq_ddp eq_1gpu 1e-2
run eq_zero1 2 "${small[@]}" --use_distributed_optimizer true --overlap_grad_reduce true \
  --overlap_param_gather true && compare eq_zero1 eq_1gpu 1e-2
run eq_fsdp 2 "${small[@]}" --use_torch_fsdp2 true && compare eq_fsdp eq_1gpu 1e-2

# (b) DDP scaling on the 1B shape: the same work per GPU (micro-batch 8), global batch 8 on 1 GPU, 16 on 2
one_b=(--config configs/examples/megatron/bench_llama3.2-1B-shape.yaml --device cuda --train_iters 20)
run ddp1b_1gpu 1 "${one_b[@]}" --global_batch_size 8
run ddp1b_2gpu 2 "${one_b[@]}" --global_batch_size 16 --overlap_grad_reduce true
python3 - "$out" <<'EOF' | tee -a "$summary"
import json, sys
d = sys.argv[1]
try:
    a = json.load(open(f"{d}/ddp1b_1gpu.summary.json"))["tokens_per_s"]
    b = json.load(open(f"{d}/ddp1b_2gpu.summary.json"))["tokens_per_s"]
    print(f"  DDP 1B shape T2048: 1 GPU {a:.0f} tok/s, 2 GPUs {b:.0f} tok/s -> {b / a:.3f}x (target >= 1.9x)")
except Exception as e:
    print(f"  DDP 1B shape: no result ({e})")
EOF

# (c) FSDP + full recompute, Llama-3.1-8B, T 8192
run fsdp8b_2gpu 2 --config configs/examples/megatron/llama3.1_8B-pretrain.yaml --device cuda --train_iters 10 \
  --micro_batch_size 1 --global_batch_size 2 --use_torch_fsdp2 true
grep -E "^\[rank 0\] iter|iter .* MFU" "$out/fsdp8b_2gpu.log" | tail -3 | tee -a "$summary"
grep -E "peak mem" "$out/fsdp8b_2gpu.log" | tail -2 | tee -a "$summary"

# (d) PyTorch FSDP2 on the same model and GPUs
if python3 -c "import torch" 2>/dev/null; then
  echo "== torch FSDP2 (2 GPUs)" | tee -a "$summary"
  timeout 300 torchrun --standalone --nproc-per-node 2 tools/device/fsdp2_llama8b.py >"$out/torch_fsdp2.log" 2>&1
  echo "  rc $?" | tee -a "$summary"
  grep '^{' "$out/torch_fsdp2.log" | tee -a "$summary"
fi
echo "ddp-check: $([ $status -eq 0 ] && echo passed || echo FAILED)" | tee -a "$summary"
exit $status
