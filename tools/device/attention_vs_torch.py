#!/usr/bin/env python3
"""Times torch's SDPA (cuDNN and flash backends) at the attention performance shapes and prints them beside our
numbers parsed from a primus_gpu_tests log (the "perf fwd/bwd <backend> B.. T.. H.. KV.. D.." rows).

Usage: attention_vs_torch.py [--ours LOG] [--json OUT.json]
Convention (reference.md section 3): causal fwd FLOPs = 2 B H S^2 D, bwd = 2.5 x fwd. bwd is timed alone
(torch.autograd.grad on a retained graph), medians of CUDA-event timings.
"""
import argparse
import json
import re
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(4, 32, 8, 4096, 128), (8, 32, 8, 2048, 64)]  # B, H, KV, S, D


def median_ms(fn, warmup=5, iters=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def bench(backend, b, h, kv, s, d):
    torch.manual_seed(0)
    dev = "cuda"
    q = torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, kv, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, kv, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    do = torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16)
    with sdpa_kernel(backend):
        fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        with torch.no_grad():
            fwd_ms = median_ms(fwd)
            fwd10_ms = median_ms(lambda: [fwd() for _ in range(10)], warmup=1, iters=5) / 10
        out = fwd()
        bwd = lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
        bwd_ms = median_ms(bwd)
        bwd10_ms = median_ms(lambda: [bwd() for _ in range(10)], warmup=1, iters=5) / 10
    flop = 2.0 * b * h * s * s * d
    return {"fwd_ms": fwd_ms, "bwd_ms": bwd_ms, "fwd_tflops": flop / fwd_ms / 1e9, "bwd_tflops": 2.5 * flop / bwd_ms / 1e9,
            "fwdx10_tflops": flop / fwd10_ms / 1e9, "bwdx10_tflops": 2.5 * flop / bwd10_ms / 1e9}


def parse_ours(path):
    ours = {}
    if not path:
        return ours
    pat = re.compile(r"perf (fwd|bwd|fwdx10|bwdx10) (cudnn|flash) B(\d+) T(\d+) H(\d+) KV(\d+) D(\d+)\s+\S+\s+\S+\s+([\d.]+)\s+([\d.]+) TFLOP/s")
    try:
        with open(path) as f:
            for line in f:
                m = pat.search(line)
                if m:
                    dirn, be, b, t, h, kv, d, ms, tf = m.groups()
                    ours[(be, int(b), int(h), int(kv), int(t), int(d), dirn)] = (float(ms), float(tf))
    except OSError as e:
        print(f"attention_vs_torch: cannot read {path}: {e}", file=sys.stderr)
    return ours


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", action="append", default=[], help="primus_gpu_tests log(s); one table each")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    results = {}
    for shape in SHAPES:
        for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                results[(name,) + shape] = bench(be, *shape)
            except Exception as e:  # a backend refusing a shape is a result, not a crash
                print(f"torch {name} {shape}: {type(e).__name__}: {str(e)[:200]}")
    rows = []
    for path in args.ours or [None]:
        ours = parse_ours(path)
        print()
        print(f"ours: {path}")
        print("| shape (B H KV S D) | dir | torch cudnn TF/s | torch flash TF/s | ours cudnn TF/s | ours flash TF/s | ours best / torch cudnn |")
        print("|---|---|---|---|---|---|---|")
        for shape in SHAPES:
            b, h, kv, s, d = shape
            for dirn in ("fwd", "bwd", "fwdx10", "bwdx10"):
                tc = results.get(("cudnn",) + shape, {}).get(f"{dirn}_tflops")
                tf = results.get(("flash",) + shape, {}).get(f"{dirn}_tflops")
                oc = ours.get(("cudnn", b, h, kv, s, d, dirn), (None, None))[1]
                of = ours.get(("flash", b, h, kv, s, d, dirn), (None, None))[1]
                best = max([x for x in (oc, of) if x is not None], default=None)
                ratio = best / tc if best and tc else None
                fmt = lambda x: f"{x:.1f}" if x is not None else "-"
                print(f"| {b} {h} {kv} {s} {d} | {dirn} | {fmt(tc)} | {fmt(tf)} | {fmt(oc)} | {fmt(of)} | "
                      f"{(f'{ratio:.3f}' if ratio else '-')} |")
                rows.append({"ours_log": path, "shape": shape, "dir": dirn, "torch_cudnn": tc, "torch_flash": tf,
                             "ours_cudnn": oc, "ours_flash": of, "ratio": ratio})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": {" ".join(map(str, k)): v for k, v in results.items()}, "table": rows}, f, indent=1)


if __name__ == "__main__":
    main()
