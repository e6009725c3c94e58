#!/usr/bin/env bash
# The main job: install dependencies, build, prepare the data (a BPE tokenizer trained on the Debian `fortunes`
# corpus and the corpus tokenized into a Megatron .bin/.idx dataset, as for real data; skipped when already
# there) and pretrain the quickstart model (a ~7M-parameter Llama) on the GPU when one is present, else the CPU.
# Extra arguments are config overrides, e.g. `scripts/quickstart.sh --train_iters 50`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
corpus=${PRIMUS_QUICKSTART_CORPUS:-/usr/share/games/fortunes}
data=output/quickstart_data
if [ ! -f "$data/fortunes_text_document.idx" ] || [ ! -f "$data/tokenizer/tokenizer.json" ]; then
  ./build/primus data train-tokenizer --input "$corpus" --vocab-size 2048 --output "$data/tokenizer"
  ./build/primus data preprocess --input "$corpus" --output-prefix "$data/fortunes" \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$data/tokenizer" --workers 2 --append-eod
fi
exec ./build/primus train pretrain --config configs/quickstart.yaml "$@"
