#!/usr/bin/env python3
"""Compares `primus data tokenize` with a reference encoder, string by string.

    compare.py --primus BIN --tokenizer tokenizer.json --strings strings.jsonl --reference ref.jsonl
               [--roundtrip exact|reference]

ref.jsonl holds one {"ids", "ids_plain", "decoded"} object per string (tools/tokenizer_ref/reference.mjs writes
it from Hugging Face's JavaScript tokenizers; tools/device/tokenizer_check.py from the Python ones). Checked for
every string:
  ids        encode(s) with the tokenizer's special tokens (HF add_special_tokens=True) equals the reference;
  ids_plain  encode(s, add_special_tokens=False) equals the reference;
  decode     our decode(ids_plain) equals the reference's decode;
  roundtrip  (--roundtrip exact) decode(encode(s)) == s, byte for byte. Tokenizers that normalise (NFC,
             SentencePiece's leading space) use --roundtrip reference: decode must equal the reference's.
Exit 0 only when every string passes every check; the first mismatches are printed with their index.
"""
import argparse
import json
import subprocess
import sys


def run_primus(binary, tokenizer, lines, *flags):
    proc = subprocess.run(
        [binary, "data", "tokenize", "--tokenizer-model", tokenizer, "--jsonl", *flags],
        input="".join(lines).encode(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        sys.exit(f"primus data tokenize {' '.join(flags)} failed (exit {proc.returncode}):\n"
                 f"{proc.stderr.decode(errors='replace')}")
    # Split on "\n" only: str.splitlines() would also split inside decoded text at U+2028, U+0085, \x1c ...
    out = proc.stdout.decode().split("\n")
    if out and out[-1] == "":
        out.pop()
    if len(out) != len(lines):
        sys.exit(f"primus data tokenize returned {len(out)} lines for {len(lines)} inputs")
    return [json.loads(x) for x in out]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--primus", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--strings", required=True)
    ap.add_argument("--reference", required=True)
    ap.add_argument("--roundtrip", choices=["exact", "reference"], default="exact")
    ap.add_argument("--name", default="")
    args = ap.parse_args()

    with open(args.strings, encoding="utf-8") as f:
        lines = [line if line.endswith("\n") else line + "\n" for line in f if line.strip()]
    texts = [json.loads(x) for x in lines]
    with open(args.reference, encoding="utf-8") as f:
        refs = [json.loads(x) for x in f if x.strip()]
    if len(refs) != len(texts):
        sys.exit(f"reference has {len(refs)} results for {len(texts)} strings")

    ids = run_primus(args.primus, args.tokenizer, lines)
    plain = run_primus(args.primus, args.tokenizer, lines, "--no-special-tokens")
    decoded = run_primus(args.primus, args.tokenizer, [json.dumps(p) + "\n" for p in plain], "--decode")

    name = args.name or args.tokenizer
    failures = {"ids": 0, "ids_plain": 0, "decode": 0, "roundtrip": 0}
    shown = 0
    for i, (text, ref) in enumerate(zip(texts, refs)):
        bad = []
        if ids[i] != ref["ids"]:
            bad.append(("ids", ids[i], ref["ids"]))
        if plain[i] != ref["ids_plain"]:
            bad.append(("ids_plain", plain[i], ref["ids_plain"]))
        if decoded[i] != ref["decoded"]:
            bad.append(("decode", decoded[i], ref["decoded"]))
        if args.roundtrip == "exact" and decoded[i] != text:
            bad.append(("roundtrip", decoded[i], text))
        for what, ours, theirs in bad:
            failures[what] += 1
            if shown < 15:
                shown += 1
                print(f"{name}: string {i} {json.dumps(text)[:120]}: {what} differs\n"
                      f"  ours      {json.dumps(ours)[:300]}\n  reference {json.dumps(theirs)[:300]}")
    total = sum(failures.values())
    tokens = sum(len(p) for p in plain)
    print(f"{name}: {len(texts)} strings, {tokens} tokens: "
          + ", ".join(f"{k} {len(texts) - v}/{len(texts)}" for k, v in failures.items()
                      if k != "roundtrip" or args.roundtrip == "exact")
          + (" -- all identical" if total == 0 else " -- MISMATCH"))
    return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
