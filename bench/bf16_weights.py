"""bf16 weights without a master copy: stochastic rounding against round-to-nearest, beside fp32 masters.

    python -m bench.bf16_weights          # CPU, ~10 minutes on 2 cores

Trains the ``tiny`` preset on the shipped sample (tokenized as the README's quickstart does it) three
times with the same seed, data and schedule, each through the CLI:

- ``fp32 master``: ``--bf16`` (fp32 weights and moments, the default);
- ``bf16 SR``: ``--main-params-dtype bf16 --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16`` (ours: every
  bf16 store stochastically rounded);
- ``bf16 nearest``: the same with the rounding's random bits fixed at half an ulp, i.e. rounding to
  nearest (ties away from zero) — what Transformer Engine's and torch's recipes do with bf16 parameters.

It prints the validation loss at each evaluation and each run's gap to the fp32-master run, measured in
this one job. ``$OUT/bf16_weights.json`` (or the temp folder) gets the curves.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run by path: the repository's packages first
from bench.timing import write_results  # noqa: E402
from bench.train_h200 import BF16_WEIGHTS  # noqa: E402

#: The rounding to nearest of the ``bf16 nearest`` run: every 16-bit noise field of the hash's output is 0x8000 (the CPU
#: update's random bits, ``trainer.kernels.adamw.random_bits``; the assert keeps the patch from missing its target).
NEAREST = ("import sys, torch, trainer.kernels.adamw as adamw; assert callable(adamw.random_bits); "
           "adamw.random_bits = lambda numel, offset, device: torch.full((numel,), 0x80008000, dtype=torch.int64, "
           "device=device); from cli.trainer import main; sys.argv[0] = 'trainer'; main()")

RUNS = {"fp32 master": [], "bf16 SR": BF16_WEIGHTS, "bf16 nearest": BF16_WEIGHTS}


def tokenize_sample(root: Path) -> Path:
    """The quickstart's blend over the shipped sample, tokenized under ``root``; returns the blend file."""
    (root / "blends").mkdir()
    (root / "examples").mkdir()
    shutil.copy(REPO / "blends" / "web_code.yaml", root / "blends")
    shutil.copy(REPO / "examples" / "tokenizer.json", root / "examples")
    common = ["--json-keys", "text", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model",
              str(root / "examples" / "tokenizer.json"), "--append-eod"]
    corpus = [sys.executable, "-m", "cli.corpus", "tokenize"]
    subprocess.run([*corpus, "--input", str(REPO / "examples" / "web.jsonl"), "--output-prefix",
                    str(root / "blends" / "data" / "web"), *common], cwd=REPO, check=True)
    for shard in ("0", "1"):
        subprocess.run([*corpus, "--input", str(REPO / "examples" / "code.jsonl"), "--output-prefix",
                        str(root / "blends" / "data" / "code" / "code"), "--shard-index", shard, "--num-shards", "2",
                        *common], cwd=REPO, check=True)
    return root / "blends" / "web_code.yaml"


def train(name: str, blend: Path, folder: Path, args: argparse.Namespace) -> dict[int, float]:
    """One run of ``name``; its validation loss by step."""
    metrics = folder / f"{name.replace(' ', '_')}.jsonl"
    flags = ["run", "--blend", str(blend), "--preset", "tiny", "--bf16", "--train-iters", str(args.steps),
             "--micro-batch-size", "8", "--global-batch-size", "8", "--lr", str(args.lr), "--min-lr", "0",
             "--lr-warmup-iters", str(args.steps // 10), "--lr-decay-style", "linear", "--eval-interval",
             str(args.steps // 5), "--eval-iters", "8", "--log-interval", "50", "--seed", str(args.seed),
             "--metrics-jsonl", str(metrics),
             *RUNS[name]]
    launcher = ["-c", NEAREST] if name == "bf16 nearest" else ["-m", "cli.trainer"]
    print(f"$ {name}: trainer", " ".join(flags), flush=True)
    subprocess.run([sys.executable, *launcher, *flags], cwd=REPO, check=True,
                   env={**os.environ, "PYTHONPATH": str(REPO)})
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    return {r["step"]: r["eval_loss"] for r in records if r.get("split") == "valid"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=1234, help="weights' init and samples' order, all three runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        blend = tokenize_sample(folder)
        curves = {name: train(name, blend, folder, args) for name in RUNS}
    write_results("bf16_weights", curves)
    reference = curves["fp32 master"]
    print(f"\n{'run':14}" + "".join(f"{'step ' + str(step):>12}" for step in reference) + "   gap at the end")
    for name, curve in curves.items():
        last = max(curve)
        gap = curve[last] / reference[last] - 1
        print(f"{name:14}" + "".join(f"{loss:>12.4f}" for loss in curve.values()) + f"   {100 * gap:+.2f}%")


if __name__ == "__main__":
    main()
