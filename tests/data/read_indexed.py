#!/usr/bin/env python3
"""An independent reader of Megatron's indexed dataset, written from the format description alone (the table
in docs/data.md: struct and the standard library, no Megatron and no Primus code), used to check that the
files `primus data preprocess` writes are what Megatron expects.

    read_indexed.py PREFIX [--expect-jsonl FILE --tokenizer-ids IDS.jsonl] [--dump]

Checks: magic, version 1, a known dtype code, the file sizes implied by the counts, pointers equal to the
running byte offset of the lengths, document indices starting at 0, non-decreasing, ending at the sequence
count, and a .bin exactly as long as the tokens it holds. With --expect-ids FILE (one JSON array per line, one
line per sequence) every sequence must equal its line. Prints a one-line summary; exits 1 on any defect.
"""
import json
import struct
import sys

MAGIC = b"MMIDIDX\x00\x00"
DTYPES = {1: ("B", 1), 2: ("b", 1), 3: ("h", 2), 4: ("i", 4), 5: ("q", 8), 6: ("d", 8), 7: ("f", 4),
          8: ("H", 2)}


def fail(msg):
    print(f"read_indexed: {msg}")
    sys.exit(1)


def read(prefix):
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    with open(prefix + ".bin", "rb") as f:
        binary = f.read()
    if len(idx) < 34:
        fail(f"{prefix}.idx: {len(idx)} bytes, shorter than the 34-byte header")
    if idx[:9] != MAGIC:
        fail(f"{prefix}.idx: magic {idx[:9]!r}")
    (version,) = struct.unpack_from("<Q", idx, 9)
    if version != 1:
        fail(f"version {version}")
    code = idx[17]
    if code not in DTYPES:
        fail(f"dtype code {code}")
    fmt, size = DTYPES[code]
    seq_count, doc_count = struct.unpack_from("<QQ", idx, 18)
    expected = 34 + 12 * seq_count + 8 * doc_count
    if len(idx) not in (expected, expected + seq_count):
        fail(f".idx has {len(idx)} bytes, the counts need {expected}")
    lengths = struct.unpack_from(f"<{seq_count}i", idx, 34)
    pointers = struct.unpack_from(f"<{seq_count}q", idx, 34 + 4 * seq_count)
    docs = struct.unpack_from(f"<{doc_count}q", idx, 34 + 12 * seq_count)
    running = 0
    for i, (n, p) in enumerate(zip(lengths, pointers)):
        if p != running:
            fail(f"pointer {i} is {p}, the running offset is {running}")
        running += n * size
    if running != len(binary):
        fail(f".bin has {len(binary)} bytes, the lengths need {running}")
    if not docs or docs[0] != 0 or docs[-1] != seq_count or any(b < a for a, b in zip(docs, docs[1:])):
        fail(f"document indices {docs[:5]}...{docs[-3:]} do not run from 0 to {seq_count}")
    seqs = [list(struct.unpack_from(f"<{n}{fmt}", binary, p)) for n, p in zip(lengths, pointers)]
    return code, seqs, docs


def main():
    args = sys.argv[1:]
    if not args:
        fail("usage: read_indexed.py PREFIX [--expect-ids IDS.jsonl] [--dump]")
    prefix = args[0]
    code, seqs, docs = read(prefix)
    if "--expect-ids" in args:
        path = args[args.index("--expect-ids") + 1]
        with open(path, encoding="utf-8") as f:
            want = [json.loads(line) for line in f if line.strip()]
        if len(want) != len(seqs):
            fail(f"{len(seqs)} sequences, expected {len(want)}")
        for i, (a, b) in enumerate(zip(seqs, want)):
            if a != b:
                fail(f"sequence {i} is {a[:20]}..., expected {b[:20]}...")
    if "--dump" in args:
        for s in seqs:
            print(json.dumps(s))
    print(f"read_indexed: {prefix}: dtype code {code}, {len(seqs)} sequences, {len(docs) - 1} documents, "
          f"{sum(len(s) for s in seqs)} tokens: ok")


if __name__ == "__main__":
    main()
