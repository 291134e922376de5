"""A tokenize run's start-up, this tree against another (a worktree of an earlier commit), side by side.

    git worktree add --detach /tmp/before HEAD~1
    python -m bench.tokenize_startup --baseline-tree /tmp/before --input bench/.cache/code_60.jsonl \\
        --tokenizer-model .dev/cl100k/tokenizer.json --workers 2 4 --repeat 8

Start-up is what the run's stats JSON calls ``startup_seconds``: from the command's start to every process of the
run having its tokenizer and its first part (inputs planned, workers started, the run's own tokenizer built, the
first records checked). Each measurement is a fresh ``corpus tokenize`` process writing a new output folder, with
the same options in both trees; the trees alternate run by run, so that a machine's drift falls on both. Prints the
median start-up of each tree per worker count and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def startup(tree: Path, args: argparse.Namespace, workers: int) -> float:
    """The ``startup_seconds`` of one ``corpus tokenize`` run of ``tree``'s code."""
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as out:
        command = [sys.executable, "-m", "cli.corpus", "tokenize", "--input", args.input, "--output-prefix",
                   f"{out}/o", "--tokenizer-type", args.tokenizer_type, "--tokenizer-model", args.tokenizer_model,
                   "--append-eod", "--quiet", "--stats-json", f"{out}/stats.json", "--workers", str(workers)]
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree),
                                                                                 os.environ.get("PYTHONPATH")]))}
        done = subprocess.run(command, cwd=tree, env=environment, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{tree}: corpus tokenize failed:\n{done.stderr[-3000:]}")
        return json.loads(Path(f"{out}/stats.json").read_text())["startup_seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-tree", type=Path, required=True, help="a checkout of the code to compare with")
    parser.add_argument("--input", required=True, help="a JSONL file large enough to be cut into --workers parts")
    parser.add_argument("--tokenizer-type", default="HuggingFaceTokenizer")
    parser.add_argument("--tokenizer-model", required=True)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--repeat", type=int, default=8, help="runs of each tree per worker count")
    args = parser.parse_args()
    args.input, args.tokenizer_model = str(Path(args.input).resolve()), str(Path(args.tokenizer_model).resolve())
    trees = {"this tree": REPO, "baseline": args.baseline_tree.resolve()}
    startup(REPO, args, args.workers[0])  # the tokenizer's verdict cached and the page cache warm for both trees
    for workers in args.workers:
        times: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(args.repeat):
            for name, tree in trees.items():
                times[name].append(startup(tree, args, workers))
        medians = {name: statistics.median(values) for name, values in times.items()}
        shown = ", ".join(f"{name} {medians[name]:.3f} s ({min(values):.3f}–{max(values):.3f})"
                          for name, values in times.items())
        ratio = medians["baseline"] / medians["this tree"]
        print(f"--workers {workers}: start-up {shown}; baseline / this tree {ratio:.2f}x (medians of {args.repeat})",
              flush=True)


if __name__ == "__main__":
    main()
