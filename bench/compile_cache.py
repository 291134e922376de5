"""``--compile-cache``: the first step's time with an empty Inductor cache, then with the file that run wrote.

    python -m bench.compile_cache                                        # CPU: tiny preset, ~2 minutes
    python3 bench/compile_cache.py --preset 1.3b --seq-length 4096 --micro-batch-size 4 --fp8   # one H200

Both runs are ``trainer run --mock-data --compile blocks --compile-cache FILE`` in a fresh process with
a fresh, empty ``TORCHINDUCTOR_CACHE_DIR`` (what a new machine or job has); the first writes FILE, the
second starts from it. The first step holds the compilation (blocks forward and backward, the fused
loss), so its time is the cost the cache saves; the whole process's time is printed too, and the ratio of
both, measured side by side in this one job. ``$OUT/compile_cache.json`` (or the temp folder) gets them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run by path: the repository's packages first
from bench.timing import write_results  # noqa: E402


def first_step(tag: str, flags: list[str], folder: Path) -> dict:
    """One run in a fresh process and Inductor cache: seconds of its first step and of the whole process."""
    metrics = folder / f"{tag}.jsonl"
    command = [sys.executable, "-m", "cli.trainer", "run", *flags, "--metrics-jsonl", str(metrics)]
    print("$", " ".join(command), flush=True)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TORCHINDUCTOR_CACHE_DIR": str(folder / f"inductor_{tag}")}
    started = time.perf_counter()
    subprocess.run(command, cwd=REPO, env=env, check=True)
    seconds = time.perf_counter() - started
    step = json.loads(metrics.read_text().splitlines()[0])
    tokens = int(flags[flags.index("--micro-batch-size") + 1]) * int(flags[flags.index("--seq-length") + 1])
    return {"first_step_s": tokens / step["tokens_per_s"], "process_s": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--seq-length", type=int, default=256)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--fp8", action="store_true", help="FP8 blocks (scaled_mm, tensorwise; needs an FP8 GPU)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        flags = ["--mock-data", "--vocab-size", "32768", "--preset", args.preset, "--seq-length", str(args.seq_length),
                 "--micro-batch-size", str(args.micro_batch_size), "--global-batch-size", str(args.micro_batch_size),
                 "--train-iters", "2", "--eval-iters", "0", "--log-interval", "1", "--compile", "blocks",
                 "--compile-cache", str(folder / "blocks.compiled")]
        if args.fp8:
            flags += ["--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise", "--fp8-backend", "scaled_mm"]
        results = {tag: first_step(tag, flags, folder) for tag in ("empty_cache", "cache_file")}  # NOTE: no spaces
        # in the cache folders' names: Inductor's CPU compiler command breaks on them
    write_results("compile_cache", results)
    print(f"\n{'run':12} {'first step s':>13} {'process s':>10}")
    for tag, record in results.items():
        print(f"{tag:12} {record['first_step_s']:>13.1f} {record['process_s']:>10.1f}")
    cold, warm = results["empty_cache"], results["cache_file"]
    print(f"the cache file: first step {cold['first_step_s'] / warm['first_step_s']:.1f}x faster, "
          f"whole process {cold['process_s'] / warm['process_s']:.1f}x")


if __name__ == "__main__":
    main()
