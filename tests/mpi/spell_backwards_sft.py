# Writes the multi-rank LoRA tests' SFT set (tests/mpi/lora_train_test.sh, tools/device/combos-check.sh):
# 300 alpaca records "Spell backwards: <word>" -> the word reversed, from a fixed seed.
#   python3 tests/mpi/spell_backwards_sft.py OUT.jsonl
import json
import random
import sys

rng = random.Random(1)
with open(sys.argv[1], "w") as f:
    for i in range(300):
        w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 8)))
        f.write(json.dumps({"instruction": "Spell backwards: " + w, "output": w[::-1]}) + "\n")
