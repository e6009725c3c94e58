# Compares two metrics.jsonl runs step by step (the GPU run against the CPU reference run of the same init and
# data): prints the relative loss difference per step and fails when any step differs by more than --tol.
import json, sys, argparse
p = argparse.ArgumentParser()
p.add_argument('reference'); p.add_argument('candidate'); p.add_argument('--tol', type=float, default=0.02)
a = p.parse_args()
load = lambda f: [json.loads(l) for l in open(f) if '"loss"' in l]
ref, cand = load(a.reference), load(a.candidate)
if len(ref) != len(cand) or not ref:
    sys.exit(f'step counts differ: {len(ref)} vs {len(cand)}')
worst = 0.0
for r, c in zip(ref, cand):
    rel = abs(r['loss'] - c['loss']) / abs(r['loss'])
    worst = max(worst, rel)
    flag = '  <-- over tolerance' if rel > a.tol else ''
    if r['step'] % 10 == 0 or rel > a.tol:
        print(f"step {r['step']:4d}  ref {r['loss']:.4f}  gpu {c['loss']:.4f}  rel {rel:.4f}  "
              f"grad-norm {r['grad_norm']:.3f} / {c['grad_norm']:.3f}{flag}")
print(f'max relative loss difference over {len(ref)} steps: {worst:.4f} (tolerance {a.tol})')
sys.exit(0 if worst <= a.tol else 1)
