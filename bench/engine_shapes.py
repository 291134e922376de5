"""The tokenizer engine's own ceiling by shape: P processes × T threads, each process encoding a contiguous 1/P of the
texts of a JSONL file with gigatoken's batch encode, texts decoded and in memory before the clock.

    python -m bench.engine_shapes --tokenizer-model cl100k/tokenizer.json --shapes 16x1 8x2 4x4 1x16
    taskset -c 0-7 python -m bench.engine_shapes --tokenizer-model cl100k/tokenizer.json --shapes 8x1 1x8

What ``corpus tokenize`` on N CPUs is compared with is the best of these on the same CPUs: the pipeline runs one
process per CPU, the engine's own ceiling (``bench/tokenize_scaling.py``'s ``engine``) is one process with every
thread, and which shape the engine prefers depends on the machine and the text. ``--batch-texts`` sets the texts of
each call (0: calls of ``ENGINE_BATCH_BYTES`` of text, as the ceiling does): every call ends when its longest text
does, so small calls leave threads idle. Each shape prints its rate over all processes (first start to last end)
and its fastest and slowest process.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from pathlib import Path

from bench.installed_text import FOLDER
from bench.tokenize_scaling import ENGINE_BATCH_BYTES, engine_batches, engine_tokenizer


def _share_texts(path: str, index: int, count: int) -> tuple[list[str], int]:
    """The texts of share ``index`` of ``count`` of the file, cut as ``--shard-index``/``--num-shards`` cut it (equal
    byte ranges, a line belonging to the range holding its start), and the share's bytes of JSONL."""
    from corpus.readers import ReadOptions, expand_inputs, extract, read_slices
    from corpus.tokenize.shards import Shard, plan_slices

    texts, size = [], 0
    for batch in read_slices(plan_slices(expand_inputs([path]), Shard(index, count, "bench")),
                             ReadOptions(["text"], 1000, 64 << 20)):
        texts += extract(batch.payload, ["text"]).texts[0]
        size += batch.record_bytes
    return texts, size


def _encode_share(args: argparse.Namespace, index: int, count: int, threads: int, barrier, results) -> None:
    """One process of a shape: decode its share, wait for the others, encode it, report (start, end, bytes)."""
    os.environ["RAYON_NUM_THREADS"] = str(threads)  # read when gigatoken first encodes in parallel
    from corpus.tokenizers.gigatoken_rows import without_awkward

    texts, size = _share_texts(args.input, index, count)
    calls = ([texts[start:start + args.batch_texts] for start in range(0, len(texts), args.batch_texts)]
             if args.batch_texts else engine_batches(texts, ENGINE_BATCH_BYTES))
    tokenizer = engine_tokenizer(args)
    barrier.wait()
    began = time.perf_counter()
    with without_awkward():
        for call in calls:
            tokenizer.encode_batch(call, parallel=threads > 1)
    results.put((began, time.perf_counter(), size))


def measure(args: argparse.Namespace, processes: int, threads: int) -> dict:
    """Every process of one shape started at once (spawned: none inherits another's thread pool)."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(processes), context.Queue()
    workers = [context.Process(target=_encode_share, args=(args, index, processes, threads, barrier, results))
               for index in range(processes)]
    for worker in workers:
        worker.start()
    spans = [results.get() for _ in workers]
    for worker in workers:
        worker.join()
    seconds = max(end for _, end, _ in spans) - min(began for began, _, _ in spans)
    each = sorted(end - began for began, end, _ in spans)
    return {"processes": processes, "threads": threads,
            "mb_per_s": round(sum(size for _, _, size in spans) / seconds / 1e6, 1), "seconds": round(seconds, 3),
            "fastest_process_s": round(each[0], 3), "slowest_process_s": round(each[-1], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", default=str(FOLDER / "scaled.jsonl"), help="JSONL with a 'text' key")
    parser.add_argument("--tokenizer-model", required=True, help="a tokenizer.json or a SentencePiece .model")
    parser.add_argument("--shapes", nargs="+", default=["16x1", "8x2", "4x4", "1x16"], help="PxT: processes × threads")
    parser.add_argument("--batch-texts", type=int, default=0, help="texts per call (0: calls of 256 MB of text)")
    args = parser.parse_args()
    if not Path(args.input).is_file():
        raise SystemExit(f"{args.input}: no such file (python -m bench.installed_text --min-bytes 2e9 makes it)")
    for shape in args.shapes:
        processes, threads = (int(part) for part in shape.split("x"))
        print(json.dumps({"input": Path(args.input).name, "batch_texts": args.batch_texts,
                          **measure(args, processes, threads)}), flush=True)


if __name__ == "__main__":
    main()
