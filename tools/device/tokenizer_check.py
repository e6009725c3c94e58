#!/usr/bin/env python3
"""Device-side reference for the tokenizer comparison: Hugging Face's Python `tokenizers` (the Rust library)
encodes the same strings as the CI test and writes ref.jsonl in compare.py's format. No network: the
tokenizer.json files come from .device/tokenizers/ (tools/device/tokenizer-check.sh prepares them).

    tokenizer_check.py TOKENIZER_JSON < strings.jsonl > ref.jsonl
"""
import json
import sys

from tokenizers import Tokenizer


def main():
    tok = Tokenizer.from_file(sys.argv[1])
    out = []
    for line in sys.stdin:
        if not line.strip():
            continue
        text = json.loads(line)
        ids = tok.encode(text, add_special_tokens=True).ids
        plain = tok.encode(text, add_special_tokens=False).ids
        decoded = tok.decode(plain, skip_special_tokens=False)
        out.append(json.dumps({"ids": ids, "ids_plain": plain, "decoded": decoded}))
    sys.stdout.write("\n".join(out) + ("\n" if out else ""))


if __name__ == "__main__":
    main()
