#!/usr/bin/env python3
"""PyTorch FSDP2 reference for tools/device/ddp-check.sh: Llama-3.1-8B (T 8192, micro-batch 1), every block
wrapped with fully_shard and full activation checkpointing (CKPT=none: none), bf16 parameters / f32 reduction,
fused AdamW.
Run with torchrun --nproc-per-node N. Prints one JSON line (rank 0): tokens/s/GPU, TFLOP/s, MFU and peak memory,
with the FLOPs convention of primus (6 N' + 6 L T d, N' = parameters except the input embedding)."""
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import checkpoint

V, D, L, H, KV, FFN = 128256, 4096, int(os.environ.get("LAYERS", "32")), 32, 8, 14336
T, B, STEPS, WARM = int(os.environ.get("SEQ", "8192")), 1, int(os.environ.get("STEPS", "10")), 3
CKPT = os.environ.get("CKPT", "full")  # "full": every block checkpointed; "none": no recompute


class Norm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, 1e-5)


def rotate(x, cos, sin):
    a, b = x[..., ::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.hd = D // H
        self.attn_norm, self.mlp_norm = Norm(D), Norm(D)
        self.qkv = nn.Linear(D, (H + 2 * KV) * self.hd, bias=False)
        self.o = nn.Linear(H * self.hd, D, bias=False)
        self.gate_up = nn.Linear(D, 2 * FFN, bias=False)
        self.down = nn.Linear(FFN, D, bias=False)

    def block(self, x, cos, sin):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).split([H * self.hd, KV * self.hd, KV * self.hd], -1)
        q = rotate(q.view(b, t, H, self.hd).transpose(1, 2), cos, sin)
        k = rotate(k.view(b, t, KV, self.hd).transpose(1, 2), cos, sin)
        v = v.view(b, t, KV, self.hd).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, H * self.hd))
        g, u = self.gate_up(self.mlp_norm(x)).chunk(2, -1)
        return x + self.down(F.silu(g) * u)

    def forward(self, x, cos, sin):
        if CKPT == "none":
            return self.block(x, cos, sin)
        return checkpoint(self.block, x, cos, sin, use_reentrant=False)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.norm = Norm(D)
        self.head = nn.Linear(D, V, bias=False)
        hd = D // H
        inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2).float() / hd))
        f = torch.outer(torch.arange(T).float(), inv)
        self.register_buffer("cos", f.cos()[None, None], persistent=False)
        self.register_buffer("sin", f.sin()[None, None], persistent=False)

    def forward(self, idx, tgt):
        x = self.embed(idx)
        for layer in self.layers:
            x = layer(x, self.cos.to(x.dtype), self.sin.to(x.dtype))
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, V), tgt.view(-1))


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(0)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    with torch.device("meta"):
        model = Model()
    for layer in model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    model.to_empty(device="cuda")
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02) if p.dim() > 1 else p.fill_(1.0)
        hd = D // H
        inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2, device="cuda").float() / hd))
        f = torch.outer(torch.arange(T, device="cuda").float(), inv)
        model.cos.copy_(f.cos()[None, None])
        model.sin.copy_(f.sin()[None, None])
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.1, fused=True)
    g = torch.Generator(device="cuda").manual_seed(rank)
    idx = torch.randint(0, V, (B, T), device="cuda", generator=g)
    tgt = torch.randint(0, V, (B, T), device="cuda", generator=g)
    times = []
    for step in range(STEPS):
        torch.cuda.synchronize()
        t0 = time.time()
        loss = model(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.time() - t0)
        if step == WARM - 1:
            torch.cuda.reset_peak_memory_stats()
    steady = sorted(times[WARM:])
    sec = steady[len(steady) // 2]
    tok_gpu = B * T / sec
    fpt = 6 * (n_params - V * D) + 6 * L * T * D
    tflops = tok_gpu * fpt / 1e12
    peak = torch.cuda.max_memory_allocated() / 1e9
    peaks = [torch.zeros(1, device="cuda") for _ in range(world)]
    dist.all_gather(peaks, torch.tensor([peak], device="cuda"))
    if rank == 0:
        r = dict(impl="torch FSDP2", torch=torch.__version__, world=world, checkpointing=CKPT, layers=L, seq=T, params=n_params,
                 step_s=sec, tokens_per_s_per_gpu=tok_gpu, tflops_per_gpu=tflops, mfu=tflops / 989,
                 peak_mem_gb=[round(float(p), 2) for p in peaks], loss=float(loss.item()))
        print(json.dumps(r), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
