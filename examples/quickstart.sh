#!/usr/bin/env bash
# The README's main job on the shipped sample, on a CPU in a few minutes:
#   tokenize examples/*.jsonl -> check blends/web_code.yaml -> train the tiny preset -> export for transformers.
# Run from anywhere with `corpus` and `trainer` on PATH (pip install -e .). Outputs: blends/data/, runs/quickstart/.
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

# ~2.8M parameters (most of them the 8,192-id embedding and output layer), seq 256 from the blend.
trainer run --blend blends/web_code.yaml --preset tiny --train-iters 300 --global-batch-size 8 \
    --micro-batch-size 8 --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 30 --lr-decay-style cosine \
    --log-interval 20 --eval-interval 100 --eval-iters 4 --save runs/quickstart --save-interval 100 \
    --metrics-jsonl runs/quickstart/metrics.jsonl --tensorboard-dir runs/quickstart/tensorboard

trainer export --hf runs/quickstart/hf --load runs/quickstart
