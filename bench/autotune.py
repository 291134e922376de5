"""Does ``corpus autotune-workers`` pick what full runs confirm?

    python -m bench.data prose                      # once: real prose from Debian packages
    python -m bench.autotune --corpus prose --encoder reference --full-runs 2

1. ``autotune()`` on the corpus (sample: the first --max-documents records): the steady-state MB/s of
   each configuration it measured, and its recommendation.
2. Every configuration it measured, and ``corpus tokenize``'s defaults, as real ``corpus tokenize``
   commands in fresh processes, timed by the wall clock on the whole corpus and on its first half:
   (whole - half) MB / (whole - half) s is the speed of a long run with the start-up (interpreter,
   tokenizer load, encoder check, worker spawn, the first batches) taken out, as both runs pay it
   alike, measured without any of the autotuner's code. Rounds go in turn, after one read of the
   corpus into the page cache; a configuration whose start-up jitter is not small beside
   (whole - half) is shown as ``jitter`` rather than as a number.
It prints the long-run speed of the recommendation over the fastest one's (1.00: it picked the
fastest) and over the defaults', and a short table last.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from statistics import median

from bench.data import build
from bench.tokenizer_families import FAMILIES, files
from corpus.core.cores import available_cores

CORES = available_cores()


def tune(corpus: Path, tokenizer: dict, args: argparse.Namespace):
    """Step 1: the autotuner as a library user calls it; returns ``corpus tokenize``'s default config
    for this input (what a user runs without tuning) and the result."""
    from corpus.autotune.search import AutotuneConfig, autotune
    from corpus.tokenize.config import TokenizeConfig
    from corpus.tokenizers import TokenizerConfig

    base = TokenizeConfig(inputs=[str(corpus)], output_prefix="unused", append_eod=True,
                          tokenizer=TokenizerConfig(**tokenizer, encoder=args.encoder))
    return base, autotune(AutotuneConfig(base, max_documents=args.max_documents, time_budget=args.time_budget,
                                         batch_sizes_to_check=args.batch_sizes))


def wall_seconds(corpus: Path, tokenizer: dict, encoder: str, flags: list[str]) -> float:
    """One ``corpus tokenize`` of ``corpus`` in a fresh process, by the wall clock."""
    with tempfile.TemporaryDirectory(prefix="bench-autotune-") as out:
        command = [sys.executable, "-m", "cli.corpus", "tokenize", "--input", str(corpus), "--output-prefix",
                   f"{out}/run", "--tokenizer-type", tokenizer["type"], "--tokenizer-model", tokenizer["model"],
                   "--encoder", encoder, "--append-eod", "--quiet", *flags]
        began = time.perf_counter()
        subprocess.run(command, check=True)
        return time.perf_counter() - began


def first_half(corpus: Path, folder: str) -> Path:
    """The first half of the lines of ``corpus``, as a file of its own."""
    lines = corpus.read_bytes().splitlines(keepends=True)
    path = Path(folder) / "half.jsonl"
    path.write_bytes(b"".join(lines[: len(lines) // 2]))
    return path


def long_run_speeds(corpus: Path, tokenizer: dict, configurations: dict[str, list[str]],
                    args: argparse.Namespace) -> dict[str, float | None]:
    """Step 2: median (whole - half) MB/s of each configuration over ``args.full_runs`` rounds; None
    when its start-up jitter (the spread of its half runs) is not small beside (whole - half)."""
    seconds: dict[str, list[float]] = {name: [] for name in configurations}
    jitter: dict[str, list[float]] = {name: [] for name in configurations}
    with tempfile.TemporaryDirectory(prefix="bench-autotune-half-") as folder:
        short = first_half(corpus, folder)
        extra_mb = (corpus.stat().st_size - short.stat().st_size) / 1e6
        for _ in range(args.full_runs):
            for name, flags in configurations.items():
                whole = wall_seconds(corpus, tokenizer, args.encoder, flags)
                start_up = wall_seconds(short, tokenizer, args.encoder, flags)
                seconds[name].append(whole - start_up)
                jitter[name].append(start_up)
                print(f"{name}: whole {whole:.2f} s, half {start_up:.2f} s", flush=True)
    steady = {name: median(values) > 4 * (max(jitter[name]) - min(jitter[name])) for name, values in seconds.items()}
    return {name: extra_mb / median(values) if steady[name] else None for name, values in seconds.items()}


def name_of(row) -> str:
    """``w=W b=B t=T`` of a measured row or a TokenizeConfig (threads resolved as corpus tokenize does)."""
    threads = row.threads if hasattr(row, "threads") else row.threads_per_worker
    return f"w={row.workers} b={row.batch_size} t={threads}"


def flags_of(row) -> list[str]:
    """The ``corpus tokenize`` flags of a measured row."""
    return ["--workers", str(row.workers), "--batch-size", str(row.batch_size),
            "--threads-per-worker", str(row.threads_per_worker)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="prose")
    parser.add_argument("--family", choices=list(FAMILIES), default="llama3-json", help="bench/tokenizer_families.py")
    parser.add_argument("--encoder", choices=["auto", "reference", "gigatoken"], default="auto")
    parser.add_argument("--max-documents", type=int, default=100_000, help="the autotuner's sample")
    parser.add_argument("--time-budget", type=float, help="the autotuner's --time-budget")
    parser.add_argument("--batch-sizes", type=int, nargs="+", help="the autotuner's --batch-sizes-to-check")
    parser.add_argument("--full-runs", type=int, default=2, help="rounds of real runs (median)")
    args = parser.parse_args()
    corpus, tokenizer = build(args.corpus), FAMILIES[args.family].fields(files())
    corpus.read_bytes()  # into the page cache once, for every run alike
    began = time.perf_counter()
    base, result = tune(corpus, tokenizer, args)
    tuning_s = time.perf_counter() - began
    print(result.report(), flush=True)
    configurations = {name_of(row): flags_of(row) for row in result.trials}
    configurations.setdefault(name_of(base), [])  # corpus tokenize's defaults, when not measured already
    speed = long_run_speeds(corpus, tokenizer, configurations, args)
    print(f"\n{args.family} ({args.encoder}) on {args.corpus} ({corpus.stat().st_size / 1e6:.1f} MB), {CORES} "
          f"cores, tokenizers {version('tokenizers')}; autotune on {result.sample.documents:,} documents took "
          f"{tuning_s:.1f} s (noise {result.noise:.1%}); long runs: median of {args.full_runs}")
    print_table(result, speed, name_of(base))


def print_table(result, speed: dict[str, float | None], defaults: str) -> None:
    """Predicted and long-run MB/s per configuration, fastest long run first, and the two ratios."""
    predicted = {name_of(row): row.mb_per_s for row in result.trials}
    known = {name: value for name, value in speed.items() if value is not None}
    best, fastest = name_of(result.best), max(known, key=known.get, default=None)
    print(f"{'configuration':<22} {'autotune MB/s':>13} {'long-run MB/s':>13}")
    for name in sorted(speed, key=lambda name: known.get(name, -1.0), reverse=True):
        marks = [label for label, which in (("recommended", best), ("fastest long run", fastest),
                                            ("corpus tokenize's defaults", defaults)) if name == which]
        shown = f"{predicted[name]:>13.2f}" if name in predicted else f"{'-':>13}"
        measured = f"{known[name]:>13.2f}" if name in known else f"{'jitter':>13}"
        print(f"{name:<22} {shown} {measured}" + "".join(f" <- {label}" for label in marks))
    if best in known and defaults in known:
        print(f"recommended / fastest long run: {known[best] / known[fastest]:.2f}; "
              f"recommended / defaults: {known[best] / known[defaults]:.2f}")
    else:
        print("inconclusive: run-to-run jitter is not small beside (whole - half); use a larger corpus or a "
              "quieter machine")

if __name__ == "__main__":
    main()
