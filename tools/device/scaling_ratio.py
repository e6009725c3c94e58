#!/usr/bin/env python3
"""Tokens/s of N-GPU runs against a 1-GPU run, read from the `done:` lines of primus logs in one folder.
Usage: scaling_ratio.py DIR BASE_NAME NAME... (logs are DIR/<name>.log)."""
import re
import sys


def tok(d, name):
    try:
        m = re.findall(r"median (\d+) ms/step, ([\d.]+)k tok/s", open(f"{d}/{name}.log").read())
    except OSError:
        return None
    return float(m[-1][1]) * 1e3 if m else None


d, base_name, names = sys.argv[1], sys.argv[2], sys.argv[3:]
base = tok(d, base_name)
for n in names:
    t = tok(d, n)
    print(f"  {n}: {t:.0f} tok/s vs 1 GPU {base:.0f} -> {t / base:.3f}x" if t and base else f"  {n}: no result")
