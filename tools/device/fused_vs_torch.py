#!/usr/bin/env python3
"""PyTorch anchors for the memory-bound kernels (docs/kernels/fused.md), at the same model sizes as the GPU tests.

Usage (on the GPU machine): python3 tools/device/fused_vs_torch.py [--budget SECONDS] [--no-compile]
Prints one line per case: torch eager and torch.compile medians (CUDA events), and GB/s over the same byte counts
that primus_gpu_tests uses, so the two tables compare directly. torch.compile cases are skipped once the budget
(wall seconds since start) is spent: compiling is slow and the device call is time-limited.
"""
import argparse
import sys
import time

import torch
import torch.nn.functional as F

T0 = time.time()


def bench(fn, iters=10, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def row(name, nbytes, eager_ms, compiled_ms=None):
    def fmt(ms):
        return "%9.3f ms %8.1f GB/s" % (ms, nbytes / (ms * 1e-3) / 1e9) if ms else "%24s" % "-"

    print("%-44s eager %s | compile %s" % (name, fmt(eager_ms), fmt(compiled_ms)), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=200.0)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    dev = "cuda"
    torch.manual_seed(0)
    print("torch", torch.__version__, "on", torch.cuda.get_device_name(0), flush=True)

    def compiled(fn):
        if args.no_compile or time.time() - T0 > args.budget:
            return None
        try:
            return torch.compile(fn)
        except Exception as e:  # noqa: BLE001
            print("compile failed:", e, file=sys.stderr)
            return None

    def run_pair(name, nbytes, fn, cfn_factory):
        e = bench(fn)
        c = None
        cfn = cfn_factory()  # a callable, or None
        if cfn is not None:
            try:
                c = bench(cfn)
            except Exception as ex:  # noqa: BLE001
                print("compiled run failed:", ex, file=sys.stderr)
        row(name, nbytes, e, c)

    def fwd_bwd(fn, inputs, wrt, grad):
        """Forward + backward through fn (eager, or compiled: AOTAutograd compiles both directions)."""
        def run():
            return torch.autograd.grad(fn(*inputs), wrt, grad)
        return run

    def case(name, fwd_bytes, bwd_bytes, fn, inputs, wrt, grad):
        cfn = compiled(fn)
        run_pair(name + " fwd", fwd_bytes, lambda: fn(*inputs), lambda: (lambda: cfn(*inputs)) if cfn else None)
        out = fn(*inputs)
        row(name + " bwd", bwd_bytes, bench(lambda: torch.autograd.grad(out, wrt, grad, retain_graph=True)))
        e = bench(fwd_bwd(fn, inputs, wrt, grad))
        c = None
        if cfn is not None:
            try:
                c = bench(fwd_bwd(cfn, inputs, wrt, grad))
            except Exception as ex:  # noqa: BLE001
                print("compiled fwd+bwd failed:", ex, file=sys.stderr)
        row(name + " fwd+bwd", fwd_bytes + bwd_bytes, e, c)

    R = 16384
    # RMSNorm forward, and backward (dx, dw) given dy.
    for D in (2048, 4096):
        x = torch.randn(R, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(D, device=dev, dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(R, D, device=dev, dtype=torch.bfloat16)
        case("rmsnorm R=%d D=%d" % (R, D), R * D * 4 + R * 4, R * D * 6 + R * 4 + D * 8,
             lambda x, w, D=D: F.rms_norm(x, (D,), w, 1e-5), (x, w), (x, w), dy)
        del x, w, dy

    # SwiGLU on packed [gate | up].
    for Fw in (8192, 14336):
        gu = torch.randn(R, 2 * Fw, device=dev, dtype=torch.bfloat16, requires_grad=True)
        dout = torch.randn(R, Fw, device=dev, dtype=torch.bfloat16)

        def sw(gu):
            g, u = gu.chunk(2, dim=-1)
            return F.silu(g) * u

        case("swiglu R=%d F=%d" % (R, Fw), R * Fw * 6, R * Fw * 10, sw, (gu,), (gu,), dout)
        del gu, dout

    # RoPE (rotate-half) on q and k of 4 x 4096 tokens, 32 + 8 heads of 128, out of place as HF does it.
    B, S, H, HK, Dh = 4, 4096, 32, 8, 128
    q = torch.randn(B, S, H, Dh, device=dev, dtype=torch.bfloat16)
    k = torch.randn(B, S, HK, Dh, device=dev, dtype=torch.bfloat16)
    pos = torch.arange(S, device=dev, dtype=torch.float32)
    inv = 1.0 / (500000.0 ** (torch.arange(0, Dh, 2, device=dev, dtype=torch.float32) / Dh))
    ang = torch.outer(pos, inv)
    cos = torch.cat([ang.cos(), ang.cos()], -1)[None, :, None, :].to(torch.bfloat16)
    sin = torch.cat([ang.sin(), ang.sin()], -1)[None, :, None, :].to(torch.bfloat16)

    def rot(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def rope(q, k):
        return q * cos + rot(q) * sin, k * cos + rot(k) * sin

    crope = compiled(rope)
    run_pair("rope q+k B=4 T=4096 40x128", B * S * (H + HK) * Dh * 4, lambda: rope(q, k),
             lambda: (lambda: crope(q, k)) if crope else None)
    del q, k

    # Embedding 16384 tokens of 128256 x 4096.
    V, D = 128256, 4096
    table = torch.randn(V, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    tok = (torch.rand(R, device=dev) ** 6 * V).long().clamp_(max=V - 1)
    uniq = int(torch.unique(tok).numel())
    run_pair("embedding_fwd N=%d V=%d D=%d" % (R, V, D), R * D * 4 + R * 4, lambda: F.embedding(tok, table),
             lambda: None)
    emb = F.embedding(tok, table)
    demb = torch.randn_like(emb)
    e = bench(lambda: torch.autograd.grad(emb, table, demb, retain_graph=True))
    row("embedding_bwd (bf16 dtable, %d unique)" % uniq, R * D * 2 + uniq * D * 8 + R * 4, e)
    del table, emb, demb

    # Cross-entropy over 16384 x 128256 bf16 logits: loss + dlogits.
    logits = torch.randn(R, V, device=dev, dtype=torch.bfloat16) * 2
    tgt = torch.randint(0, V, (R,), device=dev)
    tgt[torch.rand(R, device=dev) < 0.05] = -100
    lg = logits.requires_grad_(True)

    def ce(l):
        return F.cross_entropy(l, tgt, ignore_index=-100, reduction="sum")

    cce = compiled(ce)
    e = bench(fwd_bwd(ce, (lg,), (lg,), None))
    c = bench(fwd_bwd(cce, (lg,), (lg,), None)) if cce else None
    row("ce fwd+bwd R=%d V=%d" % (R, V), R * V * 4 + R * 8, e, c)
    with torch.no_grad():
        run_pair("ce loss only R=%d V=%d" % (R, V), R * V * 2 + R * 8, lambda: F.cross_entropy(
            logits, tgt, ignore_index=-100, reduction="none"), lambda: None)
    del logits, lg

    # Fused AdamW on one flat 1.5e9 f32 parameter (+ the cast to a bf16 copy that primus fuses in).
    N = 1_500_000_000
    p = torch.nn.Parameter(torch.randn(N, device=dev))
    p.grad = torch.randn(N, device=dev) * 0.1
    opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.1, fused=True)
    row("adamw fused N=1.5e9 (no copy)", N * 28, bench(opt.step, iters=5, warmup=2))
    pb = torch.empty(N, device=dev, dtype=torch.bfloat16)

    def step_copy():
        opt.step()
        pb.copy_(p.detach())

    row("adamw fused N=1.5e9 + bf16 copy_", N * 30, bench(step_copy, iters=5, warmup=2))
    g = p.grad
    row("sum of squares N=1.5e9 (g.pow(2).sum())", N * 4, bench(lambda: g.pow(2).sum()))
    row("sum of squares N=1.5e9 (vector_norm)", N * 4, bench(lambda: torch.linalg.vector_norm(g)))
    del p, opt, pb, g

    n = 1 << 28
    for dt, es in ((torch.bfloat16, 2), (torch.float32, 4)):
        a = torch.randn(n, device=dev, dtype=dt)
        b = torch.randn(n, device=dev, dtype=dt)
        o = torch.empty_like(a)
        row("add %s n=2^28" % str(dt).split(".")[-1], n * es * 3, bench(lambda: torch.add(a, b, out=o)))
    x = torch.randn(1 << 30, device=dev)
    y = torch.empty_like(x)
    row("copy f32 2^30 (read+write)", (1 << 30) * 8, bench(lambda: y.copy_(x)))
    print("fused_vs_torch: done in %.0f s" % (time.time() - T0), flush=True)


if __name__ == "__main__":
    main()
