"""How soon a tokenize run's worker processes are ready, three ways side by side: forked by a server that has
imported what they run and built the run's tokenizer once (the default: :mod:`corpus.tokenize.processes`,
:mod:`corpus.tokenize.server_tokenizer`), forked by a server that has only imported (each worker building its own:
the way before), and spawned as fresh interpreters (the way before that).

    python -m bench.worker_start --tokenizer-model .dev/cl100k/tokenizer.json --workers 4 --repeat 6
    python -m bench.worker_start --tokenizer-model cl100k/tokenizer.json --workers 15 --repeat 4   # a 16-CPU node

Each measurement is a fresh process (interpreter, imports, then the pool: the server's own start counts) that
times from making the pool (:class:`~corpus.tokenize.pool.PartPool`, given the run's tokenizer) to the last worker
saying it is ready; the ways alternate. The tokenizer's encoder check is cached before the first, as a user's first run
leaves it. Prints each way's times, their medians and their ratios to the default.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
import time

#: The ways compared, the default first.
METHODS = {"server-builds": "forked from a server holding the built tokenizer",
           "server-imports": "forked from a server that only imported, each worker building its own",
           "spawn": "spawned"}


def _tokenizer(model: str):
    from corpus.tokenizers import TokenizerConfig

    return TokenizerConfig(type="HuggingFaceTokenizer", model=model)


def child(method: str, workers: int, model: str) -> None:
    """One measurement, in this process: print the seconds until the last of ``workers`` is ready."""
    from corpus.tokenize import pool, processes
    from corpus.tokenizers import settled_encoder

    if method == "server-imports":
        pool.worker_context = lambda settled: processes.worker_context(None)
    if method == "spawn":
        pool.worker_context = lambda settled: multiprocessing.get_context("spawn")
    config = settled_encoder(_tokenizer(model))  # what a run passes its pool: its check cached by main()
    if config is None:
        raise SystemExit(f"{model}: its encoder check is not cached")
    settled = (config, 1)
    start = time.perf_counter()
    workers_pool = pool.PartPool(workers, settled)
    ready: set[int] = set()
    try:
        while len(ready) < workers:
            for event in workers_pool.events(30):
                if event.kind != "ready":
                    raise SystemExit(f"worker {event.worker}: {event.kind} {event.value}")
                ready.add(event.worker)
        print(json.dumps({"seconds": time.perf_counter() - start}))
    finally:
        workers_pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer-model", required=True, help="a byte-level BPE tokenizer.json")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=6)
    parser.add_argument("--child", choices=list(METHODS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.workers, args.tokenizer_model)
        return
    from corpus.tokenizers import select_encoder

    # NOTE: the encoder check cached first, as a user's first run leaves it: a server builds only a tokenizer whose
    # encoder is settled, and otherwise every worker would run the check itself.
    select_encoder(_tokenizer(args.tokenizer_model))
    times: dict[str, list[float]] = {method: [] for method in METHODS}
    for _ in range(args.repeat):
        for method in times:
            command = [sys.executable, "-m", "bench.worker_start", "--child", method, "--workers", str(args.workers),
                       "--tokenizer-model", args.tokenizer_model]
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            times[method].append(json.loads(output.splitlines()[-1])["seconds"])
    for method, seconds in times.items():
        print(f"{method:>14}: last of {args.workers} workers ready after "
              f"{', '.join(f'{s:.2f}' for s in seconds)} s (median {statistics.median(seconds):.2f})")
    default = statistics.median(times["server-builds"])
    for method in ("server-imports", "spawn"):
        print(f"the default (the server builds the tokenizer): ready {statistics.median(times[method]) / default:.2f}x "
              f"sooner than {METHODS[method]} (medians of {args.repeat})")


if __name__ == "__main__":
    main()
