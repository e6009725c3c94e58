"""The PyTorch anchor's Llama-3-8B-4L training step under torch.profiler, for comparison with a profiled primus run.

Loads the anchor (.perf/torch_baseline.py, or the path in argv[1]) without running its benchmarks: only its imports,
functions, classes and simple constants are executed. Then trains the anchor's llama3-8B-4L shape (the shape of
configs/examples/megatron/bench_llama3-8B-4L.yaml) for a few steps, profiles two of them, writes the Chrome trace to
$OUT/torch_trace.json and prints the GPU timeline (computation / exposed communication / exposed memcpy / busy / idle)
and the op-family summary with the same definitions as `primus report timeline` (src/profile/timeline.cpp).
`primus report timeline $OUT/torch_trace.json` analyses the same file with the C++ code, for a cross-check.
"""
import ast
import json
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile, schedule

src_path = sys.argv[1] if len(sys.argv) > 1 else ".perf/torch_baseline.py"
out_dir = os.environ.get("OUT", "/tmp")
tree = ast.parse(open(src_path).read(), src_path)
keep = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef))
        or (isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant))]
anchor = {}
exec(compile(ast.Module(body=keep, type_ignores=[]), src_path, "exec"), anchor)

V, d, L, h, kv, ffn, T, B = 128256, 4096, 4, 32, 8, 14336, 8192, 1  # the anchor's llama3-8B-4L row
torch.manual_seed(0)
dev = "cuda"
m = anchor["Llama"](V, d, L, h, kv, ffn, T).to(dev)
opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
idx = torch.randint(0, V, (B, T), device=dev)
tgt = torch.randint(0, V, (B, T), device=dev)


def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = m(idx, tgt)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


for _ in range(3):
    step()
torch.cuda.synchronize()
trace_path = os.path.join(out_dir, "torch_trace.json")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=schedule(wait=0, warmup=1, active=2),
             on_trace_ready=lambda p: p.export_chrome_trace(trace_path)) as prof:
    for _ in range(3):
        step()
        torch.cuda.synchronize()
        prof.step()
print("torch", torch.__version__, "| trace", trace_path, flush=True)


# The same analysis as src/profile/timeline.cpp.
def union(iv):
    out = []
    for b, e in sorted(iv):
        if e <= b:
            continue
        if out and b <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([b, e])
    return out


def length(iv):
    return sum(e - b for b, e in iv)


def subtract(a, b):
    out, j = [], 0
    for x0, x1 in a:
        cur = x0
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < x1:
            if b[k][0] > cur:
                out.append([cur, b[k][0]])
            cur = max(cur, b[k][1])
            if cur >= x1:
                break
            k += 1
        if cur < x1:
            out.append([cur, x1])
    return out


def family(name, cat):
    if cat == "gpu_memcpy":
        return "memcpy"
    if cat == "gpu_memset":
        return "memset"
    n = name.lower()
    has = lambda *ws: any(w in n for w in ws)
    if has("nccl"):
        return "nccl"
    if has("flash", "fmha", "sdpa", "attention", "attn"):
        return "attention"
    if has("gemm", "xmma", "cutlass", "nvjet", "cublas", "matmul", "wgmma", "sm90_", "gemv"):
        return "gemm"
    if has("adam", "multi_tensor", "optimizer", "grad_norm", "clip"):
        return "optimizer"
    if has("rms", "norm"):
        return "norm"
    if has("rope", "rotary"):
        return "rope"
    if has("swiglu", "silu", "glu"):
        return "swiglu"
    if has("softmax", "cross_entropy", "crossentropy", "loss", "nll"):
        return "loss/softmax"
    if has("embedding", "index_select", "gather", "scatter"):
        return "embedding/gather"
    if has("reduce", "sum"):
        return "reduce"
    if has("elementwise", "vectorized", "copy", "fill", "cast", "add", "mul", "scale"):
        return "elementwise"
    return "other"


evs = json.load(open(trace_path))
evs = evs["traceEvents"] if isinstance(evs, dict) else evs
gpu = [e for e in evs if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
comp, comm, mem = [], [], []
for e in gpu:
    iv = [float(e["ts"]), float(e["ts"]) + float(e["dur"])]
    if e["cat"] == "gpu_memcpy":
        mem.append(iv)
    elif "nccl" in e["name"].lower():
        comm.append(iv)
    else:
        comp.append(iv)
uc, um, ume, ua = union(comp), union(comm), union(mem), union(comp + comm + mem)
total = (max(b for _, b in ua) - min(a for a, _ in ua)) / 1e3 if ua else 0
rows = [("computation", length(uc) / 1e3), ("exposed communication", length(subtract(um, uc)) / 1e3),
        ("exposed memcpy", length(subtract(ume, union(uc + um))) / 1e3)]
busy = length(ua) / 1e3
rows += [("idle", total - busy), ("total", total), ("busy", busy), ("communication (all)", length(um) / 1e3),
         ("memcpy (all)", length(ume) / 1e3)]
print(f"torch.profiler GPU timeline ({len(gpu)} GPU events, 2 steps)")
print(f"  {'type':<24} {'time ms':>12} {'percent':>9}")
for name, ms in rows:
    print(f"  {name:<24} {ms:>12.3f} {100 * ms / total if total else 0:>8.2f}%")
fam = {}
for e in gpu:
    f = family(e["name"], e["cat"])
    c, t = fam.get(f, (0, 0.0))
    fam[f] = (c + 1, t + float(e["dur"]) / 1e3)
tot = sum(t for _, t in fam.values())
print(f"Op summary by family\n  {'op family':<20} {'count':>8} {'total ms':>12} {'%':>8} {'cum %':>8}")
cum = 0
for f, (c, t) in sorted(fam.items(), key=lambda kv: -kv[1][1]):
    cum += 100 * t / tot
    print(f"  {f:<20} {c:>8} {t:>12.3f} {100 * t / tot:>7.2f}% {cum:>7.2f}%")
json.dump({"timeline": rows, "families": fam}, open(os.path.join(out_dir, "torch_timeline.json"), "w"), indent=1)
