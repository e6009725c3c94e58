#!/usr/bin/env python3
"""Side by side: `primus benchmark grouped-gemm` rows (jsonl) against the PyTorch anchor's grouped-GEMM section
(torch_moe_baseline.json from the same device call). Usage: grouped_gemm_vs_torch.py OURS.jsonl TORCH.json"""
import json, sys

ours = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
try:
    torch = json.load(open(sys.argv[2])).get('grouped_gemm', [])
except (OSError, ValueError) as ex:
    torch = []
    print(f'no torch numbers: {ex}')
key = lambda r: (r['experts'], r['tokens_per_expert'], r['K'], r['N'])
tmap = {(t['E'], t['m_per_expert'], t['K'], t['N']): t for t in torch}
print('| shape | E x m | K -> N | op | load | ours auto (path) | best path | torch grouped | torch dense | auto / torch | auto / our dense |')
print('|---|---|---|---|---|---|---|---|---|---|---|')
seen = []
for r in ours:
    k = (key(r), r['op'], r['load'])
    if k in seen: continue
    seen.append(k)
    same = [x for x in ours if (key(x), x['op'], x['load']) == k]
    auto = next((x for x in same if x['path'] == 'auto'), same[0])
    best = max(same, key=lambda x: x['tflops'])
    t = tmap.get(key(r), {})
    tg, td = t.get('grouped_tflops'), t.get('dense_same_flops_tflops')
    tg_s = f'{tg:.0f}' if tg and r['op'] == 'fwd' and r['load'] == 'equal' else '-'
    td_s = f'{td:.0f}' if td and r['op'] == 'fwd' else '-'
    ratio = f"{auto['tflops'] / tg:.2f}" if tg and r['op'] == 'fwd' and r['load'] == 'equal' else '-'
    print(f"| {r['shape']} | {r['experts']} x {r['tokens_per_expert']} | {r['K']} -> {r['N']} | {r['op']} | {r['load']} | "
          f"{auto['tflops']:.0f} ({auto['path_ran']}) | {best['path']} {best['tflops']:.0f} | {tg_s} | {td_s} | {ratio} | "
          f"{auto['tflops'] / auto['dense_tflops']:.2f} |")
