#!/usr/bin/env bash
# `primus data preprocess` writes what Megatron writes, checked by an independent reader
# (tests/data/read_indexed.py: struct only, written from the format table): a jsonl corpus with unicode,
# empty and list-valued texts, tokenized with a BPE trained here, --append-eod, two json keys; every sequence
# must equal `primus data tokenize` of its text plus EOD; 1 and 2 workers must give byte-identical files;
# plain-text input gives one document per line.
#   preprocess_format_test.sh PRIMUS_BINARY
set -euo pipefail
primus="$1"
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$work/corpus.jsonl" <<'PY'
import json, random, sys
rng = random.Random(7)
words = "the quick brown fox jumps over lazy dog naïve café 中文 😀 don't 12345 \t tab\nnewline".split(" ")
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for i in range(300):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 40))) if i % 37 else ""
        title = f"Title {i} — {rng.choice(words)}"
        f.write(json.dumps({"id": i, "text": text, "title": title}) + "\n")
PY
"$primus" data train-tokenizer --input "$work/corpus.jsonl" --vocab-size 400 --output "$work/tok" >/dev/null
for w in 1 2; do
  "$primus" data preprocess --input "$work/corpus.jsonl" --json-keys text title --output-prefix "$work/w$w" \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$work/tok" --workers "$w" --append-eod --quiet \
    > "$work/summary$w.txt"
done
cat "$work/summary2.txt"
for key in text title; do
  cmp "$work/w1_${key}_document.bin" "$work/w2_${key}_document.bin"
  cmp "$work/w1_${key}_document.idx" "$work/w2_${key}_document.idx"
done
eod="$("$primus" data tokenize --tokenizer-model "$work/tok" --info | python3 -c 'import json,sys; print(json.load(sys.stdin)["eod_id"])')"
for key in text title; do
  python3 -c "import json,sys
for l in open(sys.argv[1], encoding='utf-8'): print(json.dumps(json.loads(l)[sys.argv[2]]))" \
    "$work/corpus.jsonl" "$key" > "$work/$key.strings"
  "$primus" data tokenize --tokenizer-model "$work/tok" --jsonl < "$work/$key.strings" |
    python3 -c "import json,sys
for l in sys.stdin:
    ids = json.loads(l)
    if ids: print(json.dumps(ids + [$eod]))" > "$work/$key.expected"
  python3 "$here/read_indexed.py" "$work/w2_${key}_document" --expect-ids "$work/$key.expected"
done
# Empty texts are documents without sequences (Megatron's builder): 300 documents, fewer sequences.
python3 - "$work/w1_text_document.idx" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
s, d = struct.unpack_from("<QQ", b, 18)
assert d == 301 and s == 300 - 9, (s, d)
print(f"empty documents kept: {s} sequences, {d - 1} documents")
PY
# Plain text: one document per line, ByteTokenizer (uint16), no EOD.
printf 'first line\nsecond line\n\nfourth\n' > "$work/lines.txt"
"$primus" data preprocess --input "$work/lines.txt" --input-format txt --output-prefix "$work/txt" \
  --tokenizer-type ByteTokenizer --quiet >/dev/null
python3 - "$work/txt_text_document" "$here/read_indexed.py" <<'PY'
import subprocess, sys, json
out = subprocess.run([sys.executable, sys.argv[2], sys.argv[1], "--dump"], check=True, capture_output=True,
                     text=True).stdout.splitlines()
seqs = [json.loads(x) for x in out[:-1]]
want = [list(b"first line"), list(b"second line"), list(b"fourth")]
assert seqs == want, seqs
print(out[-1])
PY
echo "preprocess_format_test: ok"
