#!/usr/bin/env python3
"""Hugging Face numerics check of the MoE families (docs/checkpoints.md).

Small random-weight Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2 and DeepSeek-V3 models made and saved by
transformers (save_pretrained), then, for each:
  1. `primus checkpoint logits` on the HF directory, CPU f32 vs transformers f32: rel err <= 1e-4
  2. `primus checkpoint logits` on the bf16 directory, GPU bf16 vs transformers f32 on the same bf16 weights:
     rel err <= max(1e-2, 2 x transformers' own bf16 GPU error) (a bf16 rounding can flip an expert choice near a
     tie, for them as for us), with the share of tokens whose argmax differs and our GPU vs our CPU
  3. `primus convert hf-to-primus` then `primus-to-hf` (per-expert, sharded), loaded back by transformers: every
     tensor bitwise equal to the original and the logits equal (rel err <= 1e-6); then `--expert-layout fused`
     (transformers 5's layout), loaded by transformers with the same logits.
The DeepSeek families were refused by our binary ("not supported yet: MLA attention in the model") until the model
has multi-latent attention: such a refusal is reported as REFUSED, not as a failure; any other error fails.
Routing is discontinuous, so the router weights are drawn wider than the rest (clear top-k margins): a bf16
rounding must not flip an expert choice. Helpers come from hf-logits-check.py (the dense check).
Writes hf_moe_logits_report.{md,json} under --out; exits 1 on a failure.
"""
import argparse
import importlib.util
import json
import os
import shutil
import sys

import torch
import transformers

_spec = importlib.util.spec_from_file_location(
    "hf_logits_check", os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf-logits-check.py"))
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)

TOL_F32, TOL_BF16, TOL_ROUNDTRIP = base.TOL_F32, base.TOL_BF16, base.TOL_ROUNDTRIP
REFUSAL = "not supported yet: MLA attention in the model"

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128, "beta_fast": 32.0,
        "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}


def cases():
    T = transformers
    common = dict(vocab_size=1000, max_position_embeddings=512, attn_implementation="eager", hidden_act="silu")
    ds_common = dict(hidden_size=128, intermediate_size=160, moe_intermediate_size=48, num_hidden_layers=3,
                     num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32, qk_nope_head_dim=16,
                     qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=8, n_shared_experts=1,
                     first_k_dense_replace=1, rms_norm_eps=1e-6, tie_word_embeddings=False)
    return [
        # (name, config class, model class, kwargs, router std)
        ("mixtral", T.MixtralConfig, T.MixtralForCausalLM,
         dict(theta=1e6, scaling=None, hidden_size=128, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
              rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=None), 0.5),
        ("qwen2_moe", T.Qwen2MoeConfig, T.Qwen2MoeForCausalLM,
         dict(theta=1e6, scaling=None, hidden_size=128, intermediate_size=160, moe_intermediate_size=64,
              shared_expert_intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, num_experts=6, num_experts_per_tok=2, decoder_sparse_step=1,
              mlp_only_layers=[1], norm_topk_prob=False, use_sliding_window=False, rms_norm_eps=1e-6,
              tie_word_embeddings=False), 0.5),
        ("qwen2_moe_normtopk", T.Qwen2MoeConfig, T.Qwen2MoeForCausalLM,
         dict(theta=1e6, scaling=None, hidden_size=128, intermediate_size=160, moe_intermediate_size=64,
              shared_expert_intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=4, num_experts=8, num_experts_per_tok=3, norm_topk_prob=True,
              use_sliding_window=False, rms_norm_eps=1e-6, tie_word_embeddings=True), 0.5),
        ("qwen3_moe", T.Qwen3MoeConfig, T.Qwen3MoeForCausalLM,
         dict(theta=1e6, scaling=None, hidden_size=128, intermediate_size=160, moe_intermediate_size=64,
              num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=48, num_experts=8,
              num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[0],
              rms_norm_eps=1e-6, tie_word_embeddings=True), 0.5),
        ("deepseek_v2", T.DeepseekV2Config, T.DeepseekV2ForCausalLM,
         dict(theta=10000.0, scaling=None, q_lora_rank=None, num_experts_per_tok=2, topk_method="greedy",
              n_group=1, topk_group=1, routed_scaling_factor=1.0, norm_topk_prob=False, **ds_common), 0.5),
        ("deepseek_v3", T.DeepseekV3Config, T.DeepseekV3ForCausalLM,
         dict(theta=10000.0, scaling=YARN, q_lora_rank=48, num_experts_per_tok=4, n_group=4, topk_group=2,
              topk_method="noaux_tc", routed_scaling_factor=2.5, norm_topk_prob=True, **ds_common), 0.15),
    ], common


def randomize_moe(model, seed, router_std):
    """base.randomize, then wider router weights and a random DeepSeek-V3 correction bias (a buffer)."""
    base.randomize(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight") or name.endswith("block_sparse_moe.gate.weight"):
                p.copy_(router_std * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))


def argmax_differs(a, b):
    return float((a.argmax(-1) != b.argmax(-1)).float().mean())


def is_refusal(err):
    return REFUSAL in str(err)


def check_case(args, work, seed, name, cfg_cls, model_cls, kw, router_std, common, log, failures):
    row = {"case": name}
    kw = dict(kw)
    theta, scaling = kw.pop("theta"), kw.pop("scaling")
    torch.manual_seed(seed)
    cfg = base.make_config(cfg_cls, theta, scaling, **kw, **common)
    model = model_cls(cfg).float().eval()
    randomize_moe(model, 2000 + seed, router_std)
    d32, d16 = os.path.join(work, name + "_f32"), os.path.join(work, name + "_bf16")
    model.save_pretrained(d32, safe_serialization=True)
    model.to(torch.bfloat16).save_pretrained(d16, safe_serialization=True)
    with open(os.path.join(d32, "config.json")) as f:
        saved = json.load(f)
    row["rope_spelling"] = "rope_parameters" if "rope_parameters" in saved else "rope_theta"
    names = []
    for fn in os.listdir(d32):
        if fn.endswith(".safetensors"):
            names += list(base.load_file(os.path.join(d32, fn)).keys())
    row["expert_layout"] = "fused" if any(n.endswith("experts.gate_up_proj") for n in names) else "per-expert"
    g = torch.Generator().manual_seed(11 + seed)
    tokens = torch.randint(0, cfg.vocab_size, (2, 24), generator=g)
    ref32 = base.hf_logits(base.load_hf(model_cls, d32, torch.float32, "cpu"), tokens, "cpu")
    ref_b = base.hf_logits(base.load_hf(model_cls, d16, torch.float32, "cpu"), tokens, "cpu")

    try:
        ours_cpu = base.primus_logits(args.primus, d32, tokens, "cpu", os.path.join(work, name + "_cpu.st"), log)
    except RuntimeError as e:
        if is_refusal(e):
            row["status"] = "REFUSED (MLA not in the model yet)"
            return row
        raise
    row["cpu_f32_rel_err"] = base.rel_err(ours_cpu, ref32)
    row["cpu_argmax_differs"] = argmax_differs(ours_cpu, ref32)
    if row["cpu_f32_rel_err"] > TOL_F32:
        failures.append(f"{name}: CPU f32 rel err {row['cpu_f32_rel_err']:.3e} > {TOL_F32}")
    if torch.cuda.is_available():
        ours_gpu = base.primus_logits(args.primus, d16, tokens, "cuda", os.path.join(work, name + "_gpu.st"), log)
        row["gpu_bf16_rel_err"] = base.rel_err(ours_gpu, ref_b)
        row["gpu_argmax_differs"] = argmax_differs(ours_gpu, ref_b)
        ours_cpu_b = base.primus_logits(args.primus, d16, tokens, "cpu", os.path.join(work, name + "_cpub.st"), log)
        row["gpu_vs_our_cpu_rel_err"] = base.rel_err(ours_gpu, ours_cpu_b)  # the same bf16 weights
        hf_b16 = base.hf_logits(base.load_hf(model_cls, d16, torch.bfloat16, "cuda"), tokens, "cuda")
        row["hf_gpu_bf16_rel_err"] = base.rel_err(hf_b16, ref_b)
        # A bf16 rounding can flip an expert choice near a tie (transformers' own bf16 run flips the same way),
        # so the bar is 1e-2 or twice transformers' own bf16 error, whichever is larger.
        tol = max(TOL_BF16, 2 * row["hf_gpu_bf16_rel_err"])
        row["gpu_tol"] = tol
        if row["gpu_bf16_rel_err"] > tol:
            failures.append(f"{name}: GPU bf16 rel err {row['gpu_bf16_rel_err']:.3e} > {tol:.3e}")
    else:
        failures.append(f"{name}: no GPU visible to torch; the bf16 GPU check did not run")

    for tag, src, ref in (("f32", d32, ref32), ("bf16", d16, ref_b)):
        p_dir = os.path.join(work, f"{name}_{tag}_primus")
        base.run([args.primus, "convert", "hf-to-primus", "--input", src, "--output", p_dir], log)
        for layout in ("per-expert", "fused"):
            h_dir = os.path.join(work, f"{name}_{tag}_{layout}")
            base.run([args.primus, "convert", "primus-to-hf", "--input", p_dir, "--output", h_dir,
                      "--max-shard-size", "300KB", "--expert-layout", layout], log)
            key = f"roundtrip_{tag}_{layout}"
            if layout == row["expert_layout"]:  # the source's own layout comes back bitwise
                ok, what = base.tensors_equal(src, h_dir, f32_ok=("e_score_correction_bias",))
                row[key + "_tensors"] = what
                if not ok:
                    failures.append(f"{name}: {tag} {layout} round trip: {what}")
            back = base.hf_logits(base.load_hf(model_cls, h_dir, torch.float32, "cpu"), tokens, "cpu")
            row[key + "_rel_err"] = base.rel_err(back, ref)
            if row[key + "_rel_err"] > TOL_ROUNDTRIP:
                failures.append(f"{name}: {tag} {layout} round trip logits rel err {row[key + '_rel_err']:.3e}")
    row["status"] = "checked"
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--primus", required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/hf-moe-logits-check"))
    ap.add_argument("--only", default="", help="comma-separated case names")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    work = os.path.join(args.out, "work-moe")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    gpu = torch.cuda.is_available()
    print(f"torch {torch.__version__} | transformers {transformers.__version__} | "
          f"GPU {torch.cuda.get_device_name(0) if gpu else 'none'}", flush=True)
    rows, log, failures = [], [], []
    case_list, common = cases()
    for seed, (name, cfg_cls, model_cls, kw, router_std) in enumerate(case_list):
        if args.only and name not in args.only.split(","):
            continue
        try:
            row = check_case(args, work, seed, name, cfg_cls, model_cls, kw, router_std, common, log, failures)
        except Exception as e:  # one broken case must not hide the others
            row = {"case": name, "status": "ERROR", "error": str(e)[-2000:]}
            failures.append(f"{name}: {type(e).__name__}: {str(e)[-600:]}")
        rows.append(row)
        print(json.dumps(row), flush=True)

    fmt = lambda v: f"{v:.2e}" if isinstance(v, float) else ("-" if v is None else str(v))
    lines = ["# HF MoE logits check", "",
             f"torch {torch.__version__}, transformers {transformers.__version__}, "
             f"GPU {torch.cuda.get_device_name(0) if gpu else 'none'}", "",
             "| case | status | HF layout | CPU f32 rel err (argmax differs) | GPU bf16 rel err (argmax differs) | "
             "GPU vs our CPU | HF bf16 GPU rel err | round trip f32 per-expert / fused | "
             "round trip bf16 per-expert / fused |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r.get('status')} | {r.get('expert_layout', '-')} | "
            f"{fmt(r.get('cpu_f32_rel_err'))} ({fmt(r.get('cpu_argmax_differs'))}) | "
            f"{fmt(r.get('gpu_bf16_rel_err'))} ({fmt(r.get('gpu_argmax_differs'))}) | "
            f"{fmt(r.get('gpu_vs_our_cpu_rel_err'))} | {fmt(r.get('hf_gpu_bf16_rel_err'))} | "
            f"{fmt(r.get('roundtrip_f32_per-expert_rel_err'))} / {fmt(r.get('roundtrip_f32_fused_rel_err'))} | "
            f"{fmt(r.get('roundtrip_bf16_per-expert_rel_err'))} / {fmt(r.get('roundtrip_bf16_fused_rel_err'))} |")
    lines += ["", f"tolerances: f32 {TOL_F32}, bf16 {TOL_BF16}, round trip {TOL_ROUNDTRIP}; REFUSED = our binary "
              f"said '{REFUSAL}' (expected until the model has MLA)", ""]
    lines += ["## failures", ""] + ([f"- {f}" for f in failures] or ["none"])
    report = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "hf_moe_logits_report.md"), "w") as f:
        f.write(report)
    with open(os.path.join(args.out, "hf_moe_logits_report.json"), "w") as f:
        json.dump({"rows": rows, "failures": failures, "commands": log}, f, indent=1)
    print(report)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
