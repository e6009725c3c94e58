# LoRA against Hugging Face `peft` (issue #23): the base model (an HF directory we exported) loaded by
# transformers with our trained PEFT adapter loaded by peft, against
#   ours-cpu   `primus checkpoint logits --load BASE --adapter ADAPTER --device cpu`   (f32, our LoRA path)
#   ours-gpu   the same on the GPU (bf16 weights and activations)
#   merged     transformers on `primus convert merge-lora` (W + (alpha/r) B A, f32)
# all on the same tokens. Writes lora_peft_report.json next to the logits. Without peft installed the peft
# column is skipped and the others are compared with the merged model.
import json, os, subprocess, sys

import numpy as np
import torch
from safetensors.numpy import load_file

primus, base, adapter, out = sys.argv[1:5]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(5)
tokens = rng.integers(0, 250, size=(2, 33)).tolist()
tok_arg = ";".join(",".join(str(t) for t in row) for row in tokens)


def ours(device, extra):
    f = f"{out}/ours_{device}.safetensors"
    r = subprocess.run([primus, "checkpoint", "logits", "--load", base, "--tokens", tok_arg, "--device", device,
                        "--output", f] + extra, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"primus logits ({device}) failed: {r.stderr[-2000:]}")
    return load_file(f)["logits"].astype(np.float64)


def hf_logits(model):
    with torch.no_grad():
        ids = torch.tensor(tokens, device="cuda")
        return model(ids).logits.float().cpu().numpy().astype(np.float64)


from transformers import AutoModelForCausalLM

report = {"tokens": [len(tokens), len(tokens[0])]}
merged_dir = f"{out}/merged"
subprocess.run(["rm", "-rf", merged_dir])
r = subprocess.run([primus, "convert", "merge-lora", "--base", base, "--adapter", adapter, "--output", merged_dir,
                    "--dtype", "float32"], capture_output=True, text=True)
if r.returncode != 0:
    sys.exit(f"merge-lora failed: {r.stderr[-2000:]}")
merged = hf_logits(AutoModelForCausalLM.from_pretrained(merged_dir, torch_dtype=torch.float32).cuda())
plain = hf_logits(AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32).cuda())
try:
    from peft import PeftModel
    peft_model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32).cuda(), adapter)
    reference, ref_name = hf_logits(peft_model), "peft"
    report["peft_version"] = __import__("peft").__version__
except ImportError as e:
    reference, ref_name = merged, "merged"
    report["peft_version"] = f"not installed ({e})"
report["reference"] = ref_name
scale = float(np.abs(reference).max())
cands = {"ours-cpu": ours("cpu", ["--adapter", adapter]), "ours-gpu": ours("cuda", ["--adapter", adapter]),
         "merged": merged}
# Relative error ||c - ref|| / ||ref|| over all logits, as tools/device/hf-logits-check.py measures it: the GPU
# runs bf16 weights (the f32 base and adapter rounded) and bf16 activations against peft's f32.
tol = {"ours-cpu": 1e-5, "ours-gpu": 1e-2, "merged": 1e-5}
ok = True
moved = float(np.abs(reference - plain).max()) / scale
report["adapter_effect"] = moved  # how far the adapter moved the logits (0 would test nothing)
if moved < 1e-3:
    ok = False
for name, c in cands.items():
    rel = float(np.linalg.norm(c - reference) / np.linalg.norm(reference))
    worst = float(np.abs(c - reference).max()) / scale
    agree = float((c.argmax(-1) == reference.argmax(-1)).mean())
    report[name] = {"rel_err": rel, "max_abs_err_rel_to_max": worst, "argmax_agreement": agree, "tol": tol[name]}
    ok = ok and rel <= tol[name]
    print(f"{name:9s} vs {ref_name}: rel err {rel:.2e} (tol {tol[name]:.0e}); max |diff| / max|logit| "
          f"{worst:.2e}; argmax agree {agree:.3f}")
print(f"adapter effect: max |adapted - base| / max|logit| = {moved:.3e}; peft {report['peft_version']}")
report["ok"] = ok
json.dump(report, open(f"{out}/lora_peft_report.json", "w"), indent=1)
sys.exit(0 if ok else 1)
