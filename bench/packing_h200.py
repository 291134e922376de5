"""Training on best-fit packed samples vs concatenated ones with document masking, in one job (one GPU or CPU).

    python -m bench.train_h200 --prepare          # once, here: tokenized prose into bench/.cache/h200/
    python3 bench/packing_h200.py                 # on the H200: speed (1.3b) and validation loss (125m)
    python3 bench/packing_h200.py --cpu-check     # anywhere: the same phases at the tiny preset on the CPU

Both sides read the same tokenized prose through ``trainer run --blend``: ``concat`` (Megatron's samples,
``reset_attention_mask`` and ``reset_position_ids`` on: document-masked attention) and ``best_fit`` (whole
documents, padded, boundaries carried by every sample). Phases:

- ``speed``: the ``1.3b`` shape (seq 4096, micro-batch 4, bf16, the CUDA defaults: compiled blocks, attention
  backend probed with the document mask), steady-state tokens/s after ``--warmup`` steps; "trained tokens/s"
  scales it by the share of positions that carry a loss (padding carries none);
- ``loss``: ``125m`` (seq 1024, micro-batch 24) for ``--loss-steps`` steps on each blend (the same positions
  seen: the same token budget), validation loss on its own blend every ``--eval-interval`` steps; then each
  trained model is evaluated on the *same* validation samples of both blends (a one-step run at a negligible
  learning rate from its weights, ``--finetune``), so the two models are compared on identical data.

``$OUT/packing_h200.json`` holds every number; a table comes last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.step_records import run_trainer, steady_means  # noqa: E402
from corpus.core.atomic_write import write_atomically  # noqa: E402

DATA = REPO / "bench" / ".cache" / "h200"
BLENDS = {"concat": "samples: {reset_attention_mask: true, reset_position_ids: true}\n",
          "best_fit": "packing: best_fit\n"}


def write_blends(folder: Path, data: Path) -> dict[str, Path]:
    """The two blends over the tokenized prose (``python -m bench.train_h200 --prepare``), maps cached in ``folder``."""
    if not (data / "prose_text_document.idx").exists():
        raise SystemExit(f"{data}/prose_text_document.idx missing: run `python -m bench.train_h200 --prepare` first")
    paths = {}
    for name, options in BLENDS.items():
        paths[name] = folder / f"{name}.yaml"
        paths[name].write_text(f"seq_length: 4096\nsplit: '97,3,0'\ncache_dir: {folder / 'maps'}\n{options}"
                               f"tokenizer: {{kind: sentencepiece, path: {data / 'tokenizer.model'}}}\n"
                               f"sources:\n  - {{name: prose, prefix: {data / 'prose_text_document'}}}\n")
    return paths


def trained_share(blend: Path, seq_length: int, samples: int) -> dict:
    """Of the first ``samples`` train samples at ``seq_length``: the share of positions with a loss and of padding."""
    import numpy as np

    from corpus.blending.datasets import SampleCounts, build_split_datasets
    from corpus.blending.schema import load_blend

    train = build_split_datasets(load_blend(blend, seq_length=seq_length), SampleCounts(samples)).train
    masks = np.concatenate([train.batch(np.arange(start, min(start + 64, samples)))["loss_mask"].reshape(-1)
                            for start in range(0, samples, 64)])
    rows = np.stack([train.tokens_of(i)[:-1] for i in range(min(samples, 2048))])
    return {"loss_share": float(masks.mean()), "padding_share": float(np.mean(rows == -1))}


def run(tag: str, blend: Path, flags: list[str], folder: Path, args: argparse.Namespace) -> dict:
    """One ``trainer run`` (its log under $OUT): steady-state step means and its evaluations."""
    out = Path(os.environ.get("OUT", folder))
    status, records = run_trainer(["--blend", str(blend), *flags], out / f"{tag}.jsonl", out / f"{tag}.log",
                                  args.timeout)
    steps = [r for r in records if "tokens_per_s" in r]
    evals = [(r["step"], r["eval_loss"]) for r in records if r.get("split") == "valid"]
    if status or not steps:
        return {"failed": f"exit {status}, {len(steps)} steps (see {tag}.log)", "evals": evals}
    return {**steady_means(steps, min(args.warmup, len(steps) - 1)), "evals": evals, "last_loss": steps[-1]["loss"]}


def speed(args: argparse.Namespace, blends: dict[str, Path], folder: Path) -> dict:
    """Both blends at the speed shape; tokens/s and the trained (loss-carrying) tokens/s."""
    shape = ["--preset", args.speed_preset, "--seq-length", str(args.speed_seq), "--micro-batch-size",
             str(args.speed_micro_batch), "--global-batch-size", str(args.speed_micro_batch)]
    common = [*shape, "--train-iters", str(args.steps), "--eval-iters", "0", "--lr", "1e-4", *args.precision]
    results = {}
    for name, blend in blends.items():
        record = run(f"speed_{name}", blend, common, folder, args)
        share = trained_share(blend, args.speed_seq, args.steps * args.speed_micro_batch)
        if "tokens_per_s" in record:
            record["trained_tokens_per_s"] = record["tokens_per_s"] * share["loss_share"]
        results[f"speed_{name}"] = {**record, **share}
    return results


def loss(args: argparse.Namespace, blends: dict[str, Path], folder: Path) -> dict:
    """Both blends at the 125m shape over the same steps; then every model on every blend's validation samples."""
    shape = ["--preset", args.loss_preset, "--seq-length", str(args.loss_seq), "--micro-batch-size",
             str(args.loss_micro_batch), "--global-batch-size", str(args.loss_micro_batch), *args.precision,
             "--compile", args.loss_compile]
    train_flags = [*shape, "--train-iters", str(args.loss_steps), "--lr", "6e-4", "--min-lr", "6e-5",
                   "--lr-decay-style", "cosine", "--lr-warmup-iters", str(max(1, args.loss_steps // 10)),
                   "--eval-interval", str(args.eval_interval), "--eval-iters", str(args.eval_iters)]
    results = {}
    for name, blend in blends.items():
        results[f"loss_{name}"] = run(f"loss_{name}", blend, [*train_flags, "--save", str(folder / f"ckpt_{name}")],
                                      folder, args)
        results[f"loss_{name}"].update(trained_share(blend, args.loss_seq, args.loss_steps * args.loss_micro_batch))
    for model in blends:  # one step at lr 1e-12 leaves fp32 weights as they are; eval at step 1 from sample 0
        for data, blend in blends.items():
            record = run(f"eval_{model}_on_{data}", blend,
                         [*shape, "--load", str(folder / f"ckpt_{model}"), "--finetune", "--train-iters", "1",
                          "--lr", "1e-12", "--eval-interval", "1", "--eval-iters", str(args.eval_iters)],
                         folder, args)
            results[f"eval_{model}_on_{data}"] = record["evals"][-1][1] if record.get("evals") else record
    return results


PHASES = {"speed": speed, "loss": loss}
CPU_CHECK = {"speed_preset": "tiny", "speed_seq": 256, "speed_micro_batch": 2, "loss_preset": "tiny",
             "loss_seq": 128, "loss_micro_batch": 4, "steps": 4, "loss_steps": 6, "eval_interval": 3,
             "eval_iters": 2, "warmup": 1, "precision": [], "loss_compile": "off"}


def table(results: dict) -> None:
    """Speed rows, loss rows and the cross-evaluation matrix."""
    print(f"\n{'run':22} {'tok/s':>10} {'trained tok/s':>14} {'loss share':>11} {'padding':>8}  last eval loss")
    for name, record in results.items():
        if not isinstance(record, dict):
            continue
        if "failed" in record:
            print(f"{name:22} failed: {record['failed']}")
            continue
        trained = record.get("trained_tokens_per_s") or (record["tokens_per_s"] * record["loss_share"])
        last = f"{record['evals'][-1][1]:.4f} (step {record['evals'][-1][0]})" if record.get("evals") else ""
        print(f"{name:22} {record['tokens_per_s']:>10,.0f} {trained:>14,.0f} {record['loss_share']:>11.4f} "
              f"{record['padding_share']:>8.4f}  {last}")
    for side in ("speed", "loss"):
        ours, base = results.get(f"{side}_best_fit", {}), results.get(f"{side}_concat", {})
        if "tokens_per_s" in ours and "tokens_per_s" in base:
            print(f"{side}: best_fit / concat tokens/s {ours['tokens_per_s'] / base['tokens_per_s']:.3f}")
    cross = {k: v for k, v in results.items() if k.startswith("eval_")}
    if cross:
        print("validation loss of each trained model (rows) on each blend's validation samples (columns):")
        for model in BLENDS:
            cells = [results.get(f"eval_{model}_on_{data}") for data in BLENDS]
            print(f"  {model:10} " + "  ".join(f"{data}: {c:.4f}" if isinstance(c, float) else f"{data}: failed"
                                               for data, c in zip(BLENDS, cells)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phases", default="speed,loss", help=f"comma list of {', '.join(PHASES)}")
    parser.add_argument("--data", type=Path, default=DATA, help="folder of `python -m bench.train_h200 --prepare`")
    parser.add_argument("--steps", type=int, default=15, help="speed steps per blend")
    parser.add_argument("--warmup", type=int, default=5, help="first steps left out of the speed means")
    parser.add_argument("--loss-steps", type=int, default=300)
    parser.add_argument("--eval-interval", type=int, default=50)
    parser.add_argument("--eval-iters", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=420, help="seconds per trainer run")
    parser.add_argument("--cpu-check", action="store_true", help=f"tiny shapes on the CPU: {CPU_CHECK}")
    args = parser.parse_args()
    defaults = {"speed_preset": "1.3b", "speed_seq": 4096, "speed_micro_batch": 4, "loss_preset": "125m",
                "loss_seq": 1024, "loss_micro_batch": 24, "precision": ["--bf16"], "loss_compile": "off"}
    for key, value in {**defaults, **(CPU_CHECK if args.cpu_check else {})}.items():
        setattr(args, key, value)
    out = Path(os.environ.get("OUT", tempfile.gettempdir()))
    results: dict = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        blends = write_blends(folder, args.data)
        for phase in args.phases.split(","):
            try:
                results.update(PHASES[phase](args, blends, folder))
            except subprocess.TimeoutExpired as error:
                results[phase] = {"failed": f"timed out after {error.timeout:.0f} s"}
            write_atomically(out / "packing_h200.json", json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                                    "results": results}, indent=1))
    table(results)


if __name__ == "__main__":
    main()
