"""GPU smoke run of ``trainer run``: the ``1.3b`` preset (DESIGN §7's shape) at seq 4096 on
``--mock-data``, one GPU, bf16, fused AdamW, attention backend probed at start.

    python bench/train_smoke.py                       # ours only
    python bench/train_smoke.py --baseline ../shared/bench/gpu_baseline.py   # + the plain-PyTorch baselines, same job

Trains through the CLI exactly as users launch it, reads the per-step metrics (--metrics-jsonl), drops
the warm-up steps and prints tokens/s, TFLOP/s per GPU, MFU and peak memory; with ``--baseline`` it also
runs that script in the same job and prints our tokens/s over its eager and compiled bf16 rates. A short
table comes last; ``$OUT/train_smoke.json`` (or /tmp) gets the numbers.
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
from bench.step_records import add_shape_arguments, steady_means  # noqa: E402


def run_ours(args: argparse.Namespace, workdir: Path) -> dict:
    """Train with the CLI; steady-state means over the steps after ``--warmup``."""
    metrics = workdir / "metrics.jsonl"
    command = [sys.executable, "-m", "cli.trainer", "run", "--mock-data", "--preset", args.preset,
               "--seq-length", str(args.seq_length), "--micro-batch-size", str(args.micro_batch_size),
               "--global-batch-size", str(args.micro_batch_size), "--train-iters", str(args.steps),
               "--log-interval", "1", "--eval-iters", "0", "--bf16", "--lr", "1e-4",
               "--metrics-jsonl", str(metrics)]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)
    steps = [json.loads(line) for line in metrics.read_text().splitlines()]
    return {**steady_means(steps, args.warmup), "first_loss": steps[0]["loss"], "final_loss": steps[-1]["loss"]}


def run_baseline(script: str, workdir: Path) -> dict:
    """The plain-PyTorch baselines (DESIGN §7) in this job; their train_* records."""
    subprocess.run([sys.executable, script], env={**os.environ, "OUT": str(workdir)}, check=True)
    results = json.loads((workdir / "baseline.json").read_text())
    return {key: value for key, value in results.items() if key.startswith("train_") and isinstance(value, dict)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_arguments(parser, steps=30)
    parser.add_argument("--baseline", help="path of shared/bench/gpu_baseline.py to run in the same job")
    args = parser.parse_args()
    out = Path(os.environ.get("OUT", tempfile.gettempdir()))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        ours = run_ours(args, Path(scratch))
        baselines = run_baseline(args.baseline, Path(scratch)) if args.baseline else {}
    rows = [("ours (trainer run)", ours["tokens_per_s"], ours["mfu"], ours["peak_memory_gib"], 1.0)]
    for tag, record in baselines.items():
        rows.append((f"baseline {tag[6:]}", record["tok_s"], record["mfu_vs_989"], record["mem_GB"],
                     ours["tokens_per_s"] / record["tok_s"]))
    (out / "train_smoke.json").write_text(json.dumps({"args": vars(args), "ours": ours, "baselines": baselines}, indent=1))
    print(f"\nloss {ours['first_loss']:.3f} -> {ours['final_loss']:.3f}; {ours['tflops_per_gpu']:.1f} TFLOP/s/GPU "
          f"over {ours['steps_measured']} steps")
    print(f"{'run':28} {'tok/s':>10} {'MFU':>7} {'mem GiB':>8} {'ours/this':>10}")
    for name, tokens, mfu, memory, ratio in rows:
        mfu_text = f"{100 * mfu:.1f}%" if mfu is not None else "n/a"
        print(f"{name:28} {tokens:>10,.0f} {mfu_text:>7} {memory:>8.1f} {ratio:>10.2f}")


if __name__ == "__main__":
    main()
