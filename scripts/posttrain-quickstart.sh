#!/usr/bin/env bash
# Post-training in one command: LoRA fine-tuning of the quickstart model on WordNet instruction pairs, on the
# GPU when one is present, else the CPU, with nothing downloaded. It builds, then prepares what is missing
# under the workspace ($PRIMUS_WORKSPACE, default ./output): the quickstart's tokenizer and data (Debian's
# `fortunes`), a base model (a short pretraining run of the quickstart model, saved as a checkpoint), and the
# SFT set (Debian's `wordnet-base`); then trains LoRA adapters with `primus train posttrain`
# (configs/examples/megatron/lora_tiny_llama-wordnet.yaml). The PEFT adapter lands in the run directory,
# <workspace>/amd/root/lora_wordnet/peft_adapter. Extra arguments are config overrides of the LoRA run, e.g.
# `scripts/posttrain-quickstart.sh --train_iters 10`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ws=${PRIMUS_WORKSPACE:-./output}
mkdir -p "$ws"
ws=$(cd "$ws" && pwd)
corpus=${PRIMUS_QUICKSTART_CORPUS:-/usr/share/games/fortunes}
data=$ws/quickstart_data
base=$ws/posttrain_base
sft=$ws/sft_data/wordnet.jsonl

if [ ! -f "$data/fortunes_text_document.idx" ] || [ ! -f "$data/tokenizer/tokenizer.json" ]; then
  ./build/primus data train-tokenizer --input "$corpus" --vocab-size 2048 --output "$data/tokenizer"
  ./build/primus data preprocess --input "$corpus" --output-prefix "$data/fortunes" \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$data/tokenizer" --workers 2 --append-eod
fi
export PRIMUS_QUICKSTART_TOKENIZER=$data/tokenizer
if [ ! -f "$base/latest" ]; then
  echo "posttrain-quickstart: pretraining the base model ($base)"
  PRIMUS_WORKSPACE=$ws PRIMUS_EXP_NAME=posttrain_base \
    PRIMUS_QUICKSTART_DATA_PATH=$data/fortunes_text_document \
    ./build/primus train pretrain --config configs/quickstart.yaml --train_iters "${PRIMUS_BASE_ITERS:-100}" \
    --save "$base" --eval_interval 0
fi
if [ ! -f "$sft" ]; then
  ./build/primus data sft-wordnet --output "$sft" --max 20000
fi
PRIMUS_WORKSPACE=$ws PRIMUS_SFT_DATA=$sft PRIMUS_SFT_LOAD=$base \
  exec ./build/primus train posttrain --config configs/examples/megatron/lora_tiny_llama-wordnet.yaml "$@"
