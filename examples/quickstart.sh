#!/usr/bin/env bash
# The README's main job on the shipped sample, on a CPU in a few minutes:
#   tokenize examples/*.jsonl -> check blends/web_code.yaml -> train the tiny preset -> export for transformers.
# Run from anywhere with `corpus` and `trainer` on PATH (pip install -e '.[train]'). Outputs: blends/data/,
# runs/quickstart/.
set -euo pipefail
cd "$(dirname "$0")/.."

# Tokenize the sample and plan the blend (the data steps: no torch needed).
bash examples/prepare_data.sh

# ~2.8M parameters (most of them the 8,192-id embedding and output layer), seq 256 from the blend.
trainer run --blend blends/web_code.yaml --preset tiny --train-iters 300 --global-batch-size 8 \
    --micro-batch-size 8 --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 30 --lr-decay-style cosine \
    --log-interval 20 --eval-interval 100 --eval-iters 4 --save runs/quickstart --save-interval 100 \
    --metrics-jsonl runs/quickstart/metrics.jsonl --tensorboard-dir runs/quickstart/tensorboard

trainer export --hf runs/quickstart/hf --load runs/quickstart
