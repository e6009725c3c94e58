#!/usr/bin/env bash
# Stop 25's closing device call (issues #17, #18), most important first, each part time-boxed:
#  gpu    every GPU test family, --quick (incl. mla, sigmoid_gate, optimizer remainder), vs the CPU reference;
#  moe    the MoE bench workloads (Qwen3-30B-A3B dims 4L, Mixtral-8x7B dims 2L; T 4096 B 1), 40 steps each,
#         median of steps 11-40 and peak memory, then the PyTorch MoE anchor's training section in the same call;
#  hf     tools/device/hf-moe-logits-check.sh (transformers vs our logits for every MoE family, round trips,
#         the gated shared expert's GPU-vs-CPU training);
#  mla    the micro DeepSeek-V3-style model (MLA + YaRN + MoE + MTP) GPU vs CPU for 30 steps.
# Carry .device (stop25.tgz: stripped primus + primus_gpu_tests; fortunes/) and .perf (../shared/perf).
# Usage: tools/device/stop25-final.sh    PARTS="gpu moe hf mla" selects.
set -uo pipefail
out=/tmp/final-out  # everything here; $OUT gets one archive (the call returns at most 8 files)
rm -rf "$out" && mkdir -p "$out"
bin=/tmp/final-bin
mkdir -p "$bin" && tar xzf .device/stop25.tgz -C "$bin" || exit 1
parts=${PARTS:-gpu moe hf mla}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv,noheader
date -u +"%Y-%m-%dT%H:%M:%SZ"
t0=$SECONDS
if [[ " $parts " == *" gpu "* ]]; then
  timeout ${GPU_SECONDS:-200} "$bin/primus_gpu_tests" --quick >"$out/gpu_quick.txt" 2>&1
  echo "== gpu tests rc=$? ($((SECONDS - t0)) s): $(grep -E 'checked cases' "$out/gpu_quick.txt")"
  grep -E "FAIL|crash|exception" "$out/gpu_quick.txt" | cut -c1-220 | head -20
fi
if [[ " $parts " == *" moe "* ]]; then
  ws=/tmp/final-ws
  for w in bench_qwen3-30B-A3B-4L bench_mixtral-8x7B-2L; do
    rm -rf "$ws"
    PRIMUS_WORKSPACE=$ws PRIMUS_EXP_NAME=$w PRIMUS_USER=dev timeout 120 "$bin/primus" train pretrain \
      --config configs/examples/megatron/$w.yaml --train_iters 40 --log_interval 10 >"$out/$w.log" 2>&1
    rc=$?
    python3 - "$(find $ws -name metrics.jsonl | head -1)" "$w" "$rc" <<'PY'
import json, sys, statistics
path, w, rc = sys.argv[1:]
rec = [json.loads(l) for l in open(path) if l.endswith("\n")] if path else []
rec = [r for r in rec if "iter_ms" in r]
tail = [r["iter_ms"] for r in rec[10:]]
mem = max((r.get("mem_gb", 0) for r in rec), default=0)
med = statistics.median(tail) if tail else 0
print(f"== ours {w} rc={rc} steps={len(rec)} median(11..40)={med:.1f} ms ({4096 / med * 1e3 if med else 0:,.0f} tok/s) "
      f"min={min(tail) if tail else 0:.1f} max={max(tail) if tail else 0:.1f} peak={mem:.2f} GB")
PY
    grep -E "error|Error" "$out/$w.log" | head -3
  done
  timeout 260 env PYTHONUNBUFFERED=1 OUT="$out" python3 -c "
src = open('.perf/torch_moe_baseline.py').read()
head, rest = src.split('# ---- 1. grouped GEMM', 1)
moe = rest.split('# ---- 3. MoE training', 1)[1].split(chr(10), 1)[1]
exec(compile(head + moe, 'torch_moe_baseline.py[section 3]', 'exec'))
" >"$out/torch_moe.txt" 2>&1
  echo "== torch anchor rc=$? ($((SECONDS - t0)) s)"
  grep -E '^[{]"model' "$out/torch_moe.txt" | python3 -c "
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    print(f\"torch {r['model']} compile={r['compile']} {r['step_ms']:.1f} ms {r['tokens_per_s']:,.0f} tok/s peak {r['peak_mem_GB']:.2f} GB\")"
fi
if [[ " $parts " == *" hf "* ]]; then
  HF_CHECK_SECONDS=${HF_SECONDS:-150} OUT=$out/hf bash tools/device/hf-moe-logits-check.sh .device/stop25.tgz \
    >"$out/hf.txt" 2>&1
  echo "== hf-moe-logits rc=$? ($((SECONDS - t0)) s)"
  grep -E "REFUSED|FAIL|ok|rc=|max|track" "$out/hf.txt" | cut -c1-200 | tail -30
fi
if [[ " $parts " == *" mla "* ]]; then
  OUT=$out/mla PARTS=track bash tools/device/mla-check.sh "$bin" >"$out/mla.txt" 2>&1
  echo "== mla rc=$? ($((SECONDS - t0)) s)"
  grep -E "tracking|rc=" "$out/mla.txt" | cut -c1-200
fi
tar czf "${OUT:-/tmp}/final-logs.tgz" -C "$out" . 2>/dev/null
date -u +"%Y-%m-%dT%H:%M:%SZ"
