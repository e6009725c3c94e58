#!/usr/bin/env python3
"""Recomputes a GPTDataset index cache with numpy, following Megatron-LM's algorithm as described in
docs/data.md §3 (numpy.random.RandomState(seed), document_index shuffled per epoch / separate final epoch,
sample_index windows of seq_length + 1 tokens, shuffle_index), and compares it with the .npy files Primus-C++
wrote. Written from the description, not from Megatron's code.

    gpt_indices_numpy.py CACHE_DIR      (checks every *-GPTDataset-*-description.txt in it)
"""
import glob
import json
import struct
import sys

import numpy as np


def lengths_of(prefix):
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    (s,) = struct.unpack_from("<Q", idx, 18)
    return np.frombuffer(idx, dtype="<i4", count=s, offset=34)


def doc_index(docs, epochs, rng, separate_final):
    if not separate_final or epochs == 1:
        d = np.tile(docs, epochs).astype(np.int32)
        rng.shuffle(d)
        return d
    return np.concatenate([doc_index(docs, epochs - 1, rng, False), doc_index(docs, 1, rng, False)])


def sample_index(sizes, docs, seq, n):
    out = np.zeros((n + 1, 2), dtype=np.int64)
    pos, off = 0, 0
    for r in range(1, n + 1):
        remaining = seq + 1
        while remaining != 0:
            length = sizes[docs[pos]] - off
            remaining -= length
            if remaining <= 0:
                off += remaining + length - 1
                remaining = 0
            else:
                if pos == len(docs) - 1:
                    off = sizes[docs[pos]] - 1
                    break
                pos += 1
                off = 0
        out[r] = (pos, off)
    return out


def check(desc_path):
    d = json.load(open(desc_path))
    base = desc_path[: -len("-description.txt")]
    sizes = lengths_of(d["dataset_path"])
    beg, end = d["indices"]
    seq, seed, want = d["sequence_length"], d["random_seed"], d["num_samples"]
    tokens = int(sizes[beg:end].sum())
    epochs = 1
    if want is not None:
        while epochs * tokens < want * seq + 1:
            epochs += 1
    separate = False
    if epochs > 1:
        sans_final = ((epochs - 1) * tokens - 1) // seq
        separate = (want - sans_final) < int(0.8 * ((tokens - 1) // seq))
    rng = np.random.RandomState(seed)
    docs = doc_index(np.arange(beg, end, dtype=np.int32), epochs, rng, separate)
    n = (epochs * tokens - 1) // seq
    smp = sample_index(sizes, docs, seq, n)
    first = sans_final if separate else n
    a = np.arange(first, dtype=np.uint32)
    rng.shuffle(a)
    b = np.arange(first, n, dtype=np.uint32)
    rng.shuffle(b)
    shuf = np.concatenate([a, b])
    ours = [np.load(base + f"-{k}.npy") for k in ("document_index", "sample_index", "shuffle_index")]
    for name, x, y in zip(("document_index", "sample_index", "shuffle_index"), ours, (docs, smp, shuf)):
        if x.shape != y.shape or not np.array_equal(x.astype(np.int64), y.astype(np.int64)):
            print(f"{base}: {name} differs from numpy's (shapes {x.shape} vs {y.shape})")
            return False
    print(f"{base.split('/')[-1]}: {epochs} epoch(s), {n} samples, separate final epoch {separate}: "
          "document/sample/shuffle indices identical to numpy's")
    return True


def main():
    files = sorted(glob.glob(sys.argv[1] + "/*-GPTDataset-*-description.txt"))
    if not files:
        print(f"no GPTDataset caches in {sys.argv[1]}")
        return 1
    return 0 if all([check(f) for f in files]) else 1


if __name__ == "__main__":
    sys.exit(main())
