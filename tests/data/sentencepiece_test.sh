#!/usr/bin/env bash
# SentencePiece (Llama 2's tokenizer.model) through `primus data tokenize`: a small BPE model with byte
# fallback is trained here on the fortunes corpus with Debian's spm_train (no model file with a permissive
# licence is packaged), then our ids for 300+ varied lines must equal spm_encode's and decode back to the text.
# Both sides use libsentencepiece, so this checks our plugin, id mapping, BOS handling and decoding rather than
# the algorithm itself. Fails (does not skip) when the sentencepiece tools are missing.
#   sentencepiece_test.sh PRIMUS_BINARY
set -euo pipefail
primus="$1"
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
command -v spm_train >/dev/null || { echo "spm_train missing: apt-get install sentencepiece"; exit 1; }
fortunes=/usr/share/games/fortunes
cat "$fortunes"/fortunes "$fortunes"/literature 2>/dev/null | grep -v '^%$' > "$work/train.txt" || true
[ -s "$work/train.txt" ] || { echo "no fortunes text under $fortunes"; exit 1; }
spm_train --input="$work/train.txt" --model_prefix="$work/spm" --vocab_size=800 --model_type=bpe \
  --byte_fallback=true --character_coverage=0.9995 --normalization_rule_name=identity --remove_extra_whitespaces=false --minloglevel=2 >/dev/null 2>&1
# Test lines: fortunes the model saw, plus the tokenizer comparison strings (unicode, emoji, whitespace, code)
# that fit on one line (spm_encode reads one line per input).
head -n 400 "$work/train.txt" > "$work/lines.txt"
python3 "$here/../../tools/tokenizer_ref/gen_strings.py" --count 1200 | python3 -c "
import json, sys
for l in sys.stdin:
    s = json.loads(l)
    if s and not any(c in s for c in '\n\r\x00\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029'):
        print(s)" >> "$work/lines.txt"
spm_encode --model="$work/spm.model" --output_format=id < "$work/lines.txt" > "$work/spm_ids.txt"
python3 -c "import json,sys
for l in open(sys.argv[1], encoding='utf-8'): print(json.dumps(l.rstrip('\n')))" "$work/lines.txt" > "$work/lines.jsonl"
"$primus" data tokenize --tokenizer-type SentencePieceTokenizer --tokenizer-model "$work/spm.model" --jsonl \
  --no-special-tokens < "$work/lines.jsonl" > "$work/ours.jsonl"
"$primus" data tokenize --tokenizer-type SentencePieceTokenizer --tokenizer-model "$work/spm.model" --jsonl \
  --decode < "$work/ours.jsonl" > "$work/decoded.jsonl"
bos_ids="$("$primus" data tokenize --tokenizer-type Llama2Tokenizer --tokenizer-model "$work/spm.model" --text "hi")"
python3 - "$work" "$bos_ids" <<'PY'
import json, sys
work, bos_ids = sys.argv[1], json.loads(sys.argv[2])
lines = [json.loads(l) for l in open(f"{work}/lines.jsonl", encoding="utf-8")]
spm = [[int(x) for x in l.split()] for l in open(f"{work}/spm_ids.txt")]
ours = [json.loads(l) for l in open(f"{work}/ours.jsonl")]
dec = [json.loads(l) for l in open(f"{work}/decoded.jsonl", encoding="utf-8")]
assert len(lines) == len(spm) == len(ours) == len(dec), (len(lines), len(spm), len(ours), len(dec))
bad = [i for i in range(len(lines)) if ours[i] != spm[i] or dec[i] != lines[i]]
for i in bad[:10]:
    print(f"line {i} {lines[i]!r}\n  ours {ours[i]}\n  spm  {spm[i]}\n  decoded {dec[i]!r}")
assert bos_ids[0] == 1, f"Llama2Tokenizer must prepend BOS (id 1): {bos_ids}"
print(f"sentencepiece: {len(lines)} lines, {sum(map(len, ours))} tokens, {len(lines) - len(bad)} identical")
sys.exit(1 if bad else 0)
PY
