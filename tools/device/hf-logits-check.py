#!/usr/bin/env python3
"""Hugging Face numerics check of Primus-C++ checkpoints (docs/checkpoints.md).

For small random-weight LlamaForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM models (tied and untied, plain
RoPE and llama3 scaling), made and saved by transformers:
  1. `primus checkpoint logits` on the HF directory, CPU f32  vs transformers f32 : rel err <= 1e-4
  2. `primus checkpoint logits` on the bf16 HF directory, GPU bf16 vs transformers f32 on the same (bf16-rounded)
     weights: rel err <= 1e-2 (transformers bf16 on the GPU is reported beside it)
  3. `primus convert hf-to-primus` then `primus convert primus-to-hf`, loaded back by transformers: every tensor
     bitwise equal and the logits equal (rel err <= 1e-6), for the f32 and the bf16 directory
  4. the same model with config.json rewritten to the other RoPE spelling (rope_theta <-> rope_parameters) gives
     the same Primus logits.
rel err = ||ours - ref|| / ||ref|| over all logits. Writes hf_logits_report.{md,json} under --out; exits 1 on a
failure.
"""
import argparse
import inspect
import json
import os
import shutil
import subprocess
import sys
import time

import torch
import transformers
from safetensors.torch import load_file

TOL_F32 = 1e-4
TOL_BF16 = 1e-2
TOL_ROUNDTRIP = 1e-6


def rel_err(a, b):
    a = a.double()
    b = b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def make_config(cls, theta, scaling, **kw):
    """Builds a config in whichever RoPE spelling this transformers version takes."""
    params = inspect.signature(cls.__init__).parameters
    if "rope_parameters" in params:
        rp = dict(scaling) if scaling else {"rope_type": "default"}
        rp["rope_theta"] = theta
        return cls(rope_parameters=rp, **kw)
    return cls(rope_theta=theta, rope_scaling=scaling, **kw)


LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}


def cases():
    T = transformers
    common = dict(vocab_size=1000, max_position_embeddings=512, attn_implementation="eager")
    return [
        ("llama_untied", T.LlamaConfig, T.LlamaForCausalLM,
         dict(theta=500000.0, scaling=None, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
              num_attention_heads=8, num_key_value_heads=4, rms_norm_eps=1e-5, tie_word_embeddings=False)),
        ("llama_tied_llama3rope", T.LlamaConfig, T.LlamaForCausalLM,
         dict(theta=500000.0, scaling=LLAMA3, hidden_size=256, intermediate_size=640, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, tie_word_embeddings=True)),
        ("qwen2_untied", T.Qwen2Config, T.Qwen2ForCausalLM,
         dict(theta=1000000.0, scaling=None, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
              num_attention_heads=8, num_key_value_heads=2, rms_norm_eps=1e-6, tie_word_embeddings=False)),
        ("qwen2_tied", T.Qwen2Config, T.Qwen2ForCausalLM,
         dict(theta=1000000.0, scaling=None, hidden_size=384, intermediate_size=768, num_hidden_layers=2,
              num_attention_heads=6, num_key_value_heads=2, rms_norm_eps=1e-6, tie_word_embeddings=True)),
        ("qwen3_tied", T.Qwen3Config, T.Qwen3ForCausalLM,
         dict(theta=1000000.0, scaling=None, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
              num_attention_heads=8, num_key_value_heads=4, head_dim=64, rms_norm_eps=1e-6,
              tie_word_embeddings=True)),
        ("qwen3_untied", T.Qwen3Config, T.Qwen3ForCausalLM,
         dict(theta=1000000.0, scaling=None, hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
              num_attention_heads=8, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-6,
              tie_word_embeddings=False)),
    ], common


def randomize(model, seed):
    """Random weights everywhere (norm weights around 1, biases small), so no mapping mistake can hide."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))


def load_hf(model_cls, path, dtype, device):
    # transformers 5 takes `dtype`; 4.x takes `torch_dtype` (and would pass an unknown `dtype` to the config).
    key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    m = model_cls.from_pretrained(path, attn_implementation="eager", **{key: dtype})
    return m.to(device=device, dtype=dtype).eval()


def hf_logits(model, tokens, device):
    with torch.no_grad():
        return model(tokens.to(device)).logits.float().cpu()


def run(cmd, log):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    log.append({"cmd": " ".join(cmd), "rc": p.returncode, "seconds": round(time.time() - t0, 2),
                "tail": (p.stdout + p.stderr)[-1500:]})
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def primus_logits(primus, path, tokens, device, out_file, log):
    tok = ";".join(",".join(str(int(t)) for t in row) for row in tokens)
    run([primus, "checkpoint", "logits", "--load", path, "--tokens", tok, "--device", device, "--output",
         out_file], log)
    return load_file(out_file)["logits"].float()


def flip_rope_spelling(src, dst):
    """Copies an HF directory with config.json in the other RoPE spelling."""
    shutil.copytree(src, dst)
    path = os.path.join(dst, "config.json")
    with open(path) as f:
        c = json.load(f)
    if "rope_parameters" in c and c["rope_parameters"]:
        rp = dict(c.pop("rope_parameters"))
        c["rope_theta"] = rp.pop("rope_theta")
        c["rope_scaling"] = rp if rp.get("rope_type", "default") != "default" else None
        spelling = "rope_theta"
    else:
        rp = dict(c.pop("rope_scaling", None) or {"rope_type": "default"})
        rp["rope_theta"] = c.pop("rope_theta")
        c["rope_parameters"] = rp
        spelling = "rope_parameters"
    with open(path, "w") as f:
        json.dump(c, f, indent=2)
    return spelling


def tensors_equal(dir_a, dir_b, f32_ok=()):
    """Bitwise equal tensors, names, shapes and dtypes. Names ending in one of f32_ok may come back as f32 with
    the same values (we write DeepSeek-V3's e_score_correction_bias in f32, as DeepSeek's checkpoint stores
    it, whatever the source's dtype)."""
    def all_tensors(d):
        out = {}
        for n in os.listdir(d):
            if n.endswith(".safetensors"):
                out.update(load_file(os.path.join(d, n)))
        return out
    a, b = all_tensors(dir_a), all_tensors(dir_b)
    if set(a) != set(b):
        return False, f"names differ: {sorted(set(a) ^ set(b))[:6]}"
    widened = []
    for k in a:
        if (b[k].dtype == torch.float32 and a[k].dtype != torch.float32 and k.endswith(tuple(f32_ok))
                and a[k].shape == b[k].shape and torch.equal(a[k].float(), b[k])):
            widened.append(k)
            continue
        if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape or not torch.equal(a[k], b[k]):
            return False, f"{k} differs"
    note = f" ({len(widened)} written as f32 with equal values)" if widened else ""
    return True, f"{len(a)} tensors bitwise equal{note}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--primus", required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/hf-logits-check"))
    ap.add_argument("--only", default="", help="comma-separated case names")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    work = os.path.join(args.out, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    gpu = torch.cuda.is_available()
    print(f"torch {torch.__version__} | transformers {transformers.__version__} | "
          f"GPU {torch.cuda.get_device_name(0) if gpu else 'none'}", flush=True)
    rows, log, failures = [], [], []
    case_list, common = cases()
    for seed, (name, cfg_cls, model_cls, kw) in enumerate(case_list):
        if args.only and name not in args.only.split(","):
            continue
        kw = dict(kw)
        theta, scaling = kw.pop("theta"), kw.pop("scaling")
        row = {"case": name}
        try:
            torch.manual_seed(seed)
            cfg = make_config(cfg_cls, theta, scaling, **kw, **common)
            model = model_cls(cfg).float().eval()
            randomize(model, 1000 + seed)
            d32, d16 = os.path.join(work, name + "_f32"), os.path.join(work, name + "_bf16")
            model.save_pretrained(d32, safe_serialization=True)
            model.to(torch.bfloat16).save_pretrained(d16, safe_serialization=True)
            with open(os.path.join(d32, "config.json")) as f:
                row["rope_spelling"] = "rope_parameters" if "rope_parameters" in json.load(f) else "rope_theta"
            g = torch.Generator().manual_seed(7 + seed)
            tokens = torch.randint(0, cfg.vocab_size, (2, 24), generator=g)

            ref32 = hf_logits(load_hf(model_cls, d32, torch.float32, "cpu"), tokens, "cpu")
            ref_b = hf_logits(load_hf(model_cls, d16, torch.float32, "cpu"), tokens, "cpu")  # bf16 weights, f32 math

            ours_cpu = primus_logits(args.primus, d32, tokens, "cpu", os.path.join(work, name + "_cpu.st"), log)
            row["cpu_f32_rel_err"] = rel_err(ours_cpu, ref32)
            if row["cpu_f32_rel_err"] > TOL_F32:
                failures.append(f"{name}: CPU f32 rel err {row['cpu_f32_rel_err']:.3e} > {TOL_F32}")

            if gpu:
                ours_gpu = primus_logits(args.primus, d16, tokens, "cuda", os.path.join(work, name + "_gpu.st"), log)
                row["gpu_bf16_rel_err"] = rel_err(ours_gpu, ref_b)
                hf_b16 = hf_logits(load_hf(model_cls, d16, torch.bfloat16, "cuda"), tokens, "cuda")
                row["hf_gpu_bf16_rel_err"] = rel_err(hf_b16, ref_b)
                if row["gpu_bf16_rel_err"] > TOL_BF16:
                    failures.append(f"{name}: GPU bf16 rel err {row['gpu_bf16_rel_err']:.3e} > {TOL_BF16}")
            else:
                failures.append(f"{name}: no GPU visible to torch; the bf16 GPU check did not run")

            # Round trips through a Primus checkpoint, f32 and bf16.
            for tag, src, dtype, ref in (("f32", d32, torch.float32, ref32), ("bf16", d16, torch.float32, ref_b)):
                p_dir, h_dir = os.path.join(work, f"{name}_{tag}_primus"), os.path.join(work, f"{name}_{tag}_back")
                run([args.primus, "convert", "hf-to-primus", "--input", src, "--output", p_dir], log)
                run([args.primus, "convert", "primus-to-hf", "--input", p_dir, "--output", h_dir,
                     "--max-shard-size", "300KB"], log)
                ok, what = tensors_equal(src, h_dir)
                row[f"roundtrip_{tag}_tensors"] = what
                if not ok:
                    failures.append(f"{name}: {tag} round trip: {what}")
                back = hf_logits(load_hf(model_cls, h_dir, dtype, "cpu"), tokens, "cpu")
                row[f"roundtrip_{tag}_rel_err"] = rel_err(back, ref)
                if row[f"roundtrip_{tag}_rel_err"] > TOL_ROUNDTRIP:
                    failures.append(f"{name}: {tag} round trip logits rel err {row[f'roundtrip_{tag}_rel_err']:.3e}")
                row[f"roundtrip_{tag}_sharded"] = os.path.exists(os.path.join(h_dir, "model.safetensors.index.json"))

            # The other RoPE spelling of config.json gives the same Primus logits.
            flipped = os.path.join(work, name + "_flipped")
            row["flipped_to"] = flip_rope_spelling(d32, flipped)
            ours_flip = primus_logits(args.primus, flipped, tokens, "cpu", os.path.join(work, name + "_flip.st"), log)
            row["flipped_equal"] = bool(torch.equal(ours_flip, ours_cpu))
            if not row["flipped_equal"]:
                failures.append(f"{name}: logits differ with config.json in {row['flipped_to']} spelling")
        except Exception as e:  # one broken case must not hide the others
            row["error"] = str(e)[-2000:]
            failures.append(f"{name}: {type(e).__name__}: {str(e)[-600:]}")
        rows.append(row)
        print(json.dumps(row), flush=True)

    lines = ["# HF logits check", "",
             f"torch {torch.__version__}, transformers {transformers.__version__}, "
             f"GPU {torch.cuda.get_device_name(0) if gpu else 'none'}", "",
             "| case | config spelling | CPU f32 rel err | GPU bf16 rel err | HF bf16 GPU rel err | "
             "round trip f32 | round trip bf16 | other spelling |",
             "|---|---|---|---|---|---|---|---|"]
    fmt = lambda v: f"{v:.2e}" if isinstance(v, float) else ("-" if v is None else str(v))
    for r in rows:
        lines.append(f"| {r['case']} | {r.get('rope_spelling', '-')} | {fmt(r.get('cpu_f32_rel_err'))} | "
                     f"{fmt(r.get('gpu_bf16_rel_err'))} | {fmt(r.get('hf_gpu_bf16_rel_err'))} | "
                     f"{fmt(r.get('roundtrip_f32_rel_err'))} ({r.get('roundtrip_f32_tensors', '-')}) | "
                     f"{fmt(r.get('roundtrip_bf16_rel_err'))} ({r.get('roundtrip_bf16_tensors', '-')}) | "
                     f"{r.get('flipped_to', '-')}: {'equal' if r.get('flipped_equal') else 'DIFFERENT'} |")
    lines += ["", f"tolerances: f32 {TOL_F32}, bf16 {TOL_BF16}, round trip {TOL_ROUNDTRIP}", ""]
    lines += ["## failures", ""] + ([f"- {f}" for f in failures] or ["none"])
    report = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "hf_logits_report.md"), "w") as f:
        f.write(report)
    with open(os.path.join(args.out, "hf_logits_report.json"), "w") as f:
        json.dump({"rows": rows, "failures": failures, "commands": log}, f, indent=1)
    print(report)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
