#!/usr/bin/env bash
# Hugging Face numerics check of Primus checkpoints on the device (docs/checkpoints.md): random-weight Llama,
# Qwen 2 and Qwen 3 models made by transformers -> `primus checkpoint logits` (CPU f32, GPU bf16) vs transformers,
# and `primus convert` round trips loaded back into transformers. Results: $OUT/hf_logits_report.{md,json}.
# Then bit-exact resume on the GPU (exit_interval and SIGTERM + async saves): $OUT/resume/resume_report.txt.
# Usage (from the repository root): bash tools/device/hf-logits-check.sh PRIMUS_BINARY [--only case,case]
set -uo pipefail
bin=${1:-${PRIMUS_BIN:-}}
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "usage: hf-logits-check.sh PRIMUS_BINARY (a CUDA build of primus; or set PRIMUS_BIN)" >&2
  exit 2
fi
shift || true
out=${OUT:-/tmp/hf-logits-check}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
date -u
"$bin" --version || true
PYTHONUNBUFFERED=1 timeout "${HF_CHECK_SECONDS:-330}" python3 tools/device/hf-logits-check.py --primus "$bin" \
  --out "$out" "$@" 2>&1 | tee "$out/hf_logits_check.log"
rc=${PIPESTATUS[0]}
echo "hf-logits-check: rc=$rc (report: $out/hf_logits_report.md)"

# Bit-exact resume on the GPU (docs/checkpoints.md; HF_CHECK_RESUME=0 skips it): the micro Qwen-3-style model on
# mock data, 100 steps straight (twice: a determinism control) vs 50 + exit_interval + resume + 50, and vs a
# SIGTERM mid-run with async saves every 10 steps + auto-resume. Per-step loss / grad-norm and the final
# checkpoint's safetensors files (bf16 weights, f32 master weights, Adam moments) must be bitwise equal.
resume_check() {
  local dir="$out/resume" cfg=configs/examples/megatron/micro_qwen3-cpu.yaml
  rm -rf "$dir" && mkdir -p "$dir"
  local common=(--device "${HF_CHECK_DEVICE:-cuda}" --train_iters 100 --seq_length 128 --micro_batch_size 8
                --global_batch_size 16 --lr_warmup_iters 10 --log_interval 25 ${HF_CHECK_RESUME_ARGS:-})
  train() {
    local name=$1
    shift
    PRIMUS_WORKSPACE="$dir/ws" PRIMUS_EXP_NAME="$name" PRIMUS_TEAM=dev PRIMUS_USER=ci \
      timeout 100 "$bin" train pretrain --config "$cfg" "${common[@]}" --save "$dir/$name-ckpt" "$@" \
      >>"$dir/$name.log" 2>&1
  }
  train straight || { echo "resume: straight run failed"; tail -20 "$dir/straight.log"; return 1; }
  train straight2 || return 1
  train halves --exit_interval 50 || { tail -20 "$dir/halves.log"; return 1; }
  train halves --resume auto || { tail -20 "$dir/halves.log"; return 1; }
  PRIMUS_WORKSPACE="$dir/ws" PRIMUS_EXP_NAME=sigterm PRIMUS_TEAM=dev PRIMUS_USER=ci \
    "$bin" train pretrain --config "$cfg" "${common[@]}" --save "$dir/sigterm-ckpt" --save_interval 10 \
    --async_save true >>"$dir/sigterm.log" 2>&1 &
  local pid=$! metrics="$dir/ws/dev/ci/sigterm/metrics.jsonl"
  for _ in $(seq 600); do
    [ -f "$metrics" ] && [ "$(grep -c loss "$metrics")" -ge 45 ] && break
    sleep 0.05
  done
  kill -TERM "$pid"
  wait "$pid"
  local term_rc=$?
  echo "resume: SIGTERM run exited $term_rc after $(grep -c loss "$metrics") steps"
  train sigterm --save_interval 10 --async_save true --resume auto || { tail -20 "$dir/sigterm.log"; return 1; }
  grep -h "training blocked\|MB/s" "$dir"/*.log | head -6
  python3 - "$dir" "$term_rc" "${HF_CHECK_DEVICE:-cuda}" <<'PY'
import filecmp, glob, json, os, sys
d, term_rc, device = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def steps(name):
    out = {}
    for line in open(f"{d}/ws/dev/ci/{name}/metrics.jsonl"):
        j = json.loads(line)
        if "loss" in j:
            out[j["step"]] = (j["loss"], j["grad_norm"], j["lr"])
    return out
ref = steps("straight")
ok = len(ref) == 100 and term_rc == 0
report = [f"straight run: {len(ref)} steps; SIGTERM run exit code {term_rc} (expected 0)"]
for name in ("straight2", "halves", "sigterm"):
    s = steps(name)
    bad = [k for k in sorted(ref) if s.get(k) != ref[k]]
    files = sorted(os.path.basename(f) for f in glob.glob(f"{d}/straight-ckpt/iter_0000100/*.safetensors"))
    diff = [f for f in files if not filecmp.cmp(f"{d}/straight-ckpt/iter_0000100/{f}",
                                               f"{d}/{name}-ckpt/iter_0000100/{f}", shallow=False)]
    ok = ok and not bad and not diff and len(s) == 100
    report.append(f"{name}: {len(s)} steps, {len(bad)} differ from straight (first {bad[:3]}); "
                  f"final {files}: {'bitwise equal' if not diff else 'DIFFER: ' + str(diff)}")
report.append(f"bit-exact resume on {device}: " + ("PASS" if ok else "FAIL"))
open(f"{d}/resume_report.txt", "w").write("\n".join(report) + "\n")
print("\n".join(report))
sys.exit(0 if ok else 1)
PY
}
if [ "${HF_CHECK_RESUME:-1}" != 0 ]; then
  resume_check
  rrc=$?
  echo "hf-logits-check: resume check rc=$rrc (report: $out/resume/resume_report.txt)"
  [ "$rrc" -ne 0 ] && rc=1
  rm -rf "$out/resume/ws" "$out"/resume/*-ckpt
fi
exit "$rc"
