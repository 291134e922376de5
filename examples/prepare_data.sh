#!/usr/bin/env bash
# The quickstart's data steps, which need no torch (`pip install -e .` alone is enough):
#   tokenize examples/*.jsonl into blends/data/ -> check blends/web_code.yaml and plan what the trainer reads.
# Run from anywhere with `corpus` on PATH; examples/quickstart.sh runs it first, then trains.
set -euo pipefail
cd "$(dirname "$0")/.."

TOKENIZE=(--json-keys text --tokenizer-type HuggingFaceTokenizer --tokenizer-model examples/tokenizer.json --append-eod)

# Prose as one file, code as two shards (the blend reads the shards through a glob, no merge needed).
corpus tokenize --input examples/web.jsonl --output-prefix blends/data/web "${TOKENIZE[@]}"
for shard in 0 1; do
    corpus tokenize --input examples/code.jsonl --output-prefix blends/data/code/code \
        --shard-index "$shard" --num-shards 2 "${TOKENIZE[@]}"
done

# What the trainer will ask of the blend (300 steps x 8 samples), per source and split.
corpus blend blends/web_code.yaml --train-iters 300 --global-batch-size 8 --eval-interval 100 --eval-iters 4
