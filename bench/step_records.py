"""Launching a trainer run and its steady-state numbers from its ``--metrics-jsonl`` step records (every bench that
launches the trainer reports the same way), and the shape arguments those benches share."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_trainer(flags: list[str], metrics: Path, log: Path, timeout: float) -> tuple[int, list[dict]]:
    """``trainer run FLAGS --log-interval 1 --metrics-jsonl METRICS`` from the repository (its output into ``log``):
    its exit status and the records it wrote."""
    command = [sys.executable, "-m", "cli.trainer", "run", *flags, "--log-interval", "1", "--metrics-jsonl",
               str(metrics)]
    print("$", " ".join(command), flush=True)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    with open(log, "w") as out:
        done = subprocess.run(command, cwd=REPO, env={**os.environ, "PYTHONPATH": path}, stdout=out,
                              stderr=subprocess.STDOUT, timeout=timeout)
    records = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    return done.returncode, records


def steady_means(steps: list[dict], warmup: int) -> dict:
    """Means of the per-step rates over the steps after ``warmup`` (compilation, allocator growth; all steps
    when there are no more), the peak memory of those steps and, apart, of every step (an eager first step,
    e.g. FP8 delayed scaling's calibration, can need more than the compiled ones); None for a rate a record
    lacks."""
    steady = steps[warmup:] or steps

    def mean(key: str) -> float | None:
        return statistics.fmean(record[key] for record in steady) if key in steady[0] else None

    return {"tokens_per_s": mean("tokens_per_s"), "tokens_per_s_per_gpu": mean("tokens_per_s_per_gpu"),
            "mfu": mean("mfu"), "tflops_per_gpu": mean("tflops_per_gpu"),
            "peak_memory_gib": max(record.get("peak_memory_gib", 0.0) for record in steady),
            "peak_memory_gib_all_steps": max(record.get("peak_memory_gib", 0.0) for record in steps),
            "steps_measured": len(steady)}


def add_shape_arguments(parser: argparse.ArgumentParser, steps: int) -> None:
    """``--preset``, ``--seq-length``, ``--micro-batch-size`` (the baselines' speed shape by default), ``--steps`` and
    ``--warmup``: what every one-shape speed bench lets its user change."""
    parser.add_argument("--preset", default="1.3b")
    parser.add_argument("--seq-length", type=int, default=4096)
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--warmup", type=int, default=5, help="first steps left out of the means")
