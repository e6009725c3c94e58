#!/usr/bin/env python3
"""One line per training run for the device scripts: the median step time of steps 11.. of a run's
metrics.jsonl, its tokens/s, min / max, peak memory and first / last loss.

Usage: step_median.py METRICS_JSONL LABEL RC TOKENS_PER_STEP   (METRICS_JSONL may be "" when the run wrote none)
"""
import json
import statistics
import sys

path, label, rc, tokens = sys.argv[1:5]
rec = [json.loads(l) for l in open(path) if l.endswith("\n")] if path else []
rec = [r for r in rec if "iter_ms" in r]
tail = [r["iter_ms"] for r in rec[10:]]
mem = max((r.get("mem_gb", 0) for r in rec), default=0)
med = statistics.median(tail) if tail else 0
print(f"== ours {label} rc={rc} steps={len(rec)} median(11..)={med:.2f} ms "
      f"({int(tokens) / med * 1e3 if med else 0:,.0f} tok/s) min={min(tail) if tail else 0:.2f} "
      f"max={max(tail) if tail else 0:.2f} peak={mem:.2f} GB "
      f"loss {rec[0]['loss'] if rec else 0:.4f} -> {rec[-1]['loss'] if rec else 0:.4f}")
