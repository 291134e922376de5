"""How fast ``corpus inspect`` summarises and checks a file with millions of documents, against the
per-document Python loop a script would otherwise run (``IndexedReader.document(d)`` per document,
lengths and the EOD test in Python), measured side by side on the same file in one run.

    PYTHONPATH=. python bench/inspect_scale.py --documents 10000000 --baseline-documents 200000

The loop baseline runs on the first ``--baseline-documents`` only (the whole file would take minutes);
both are reported as documents per second, and their ratio.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from corpus.indexed import IndexedReader, IndexedWriter
from corpus.inspect.checks import check_prefix
from corpus.inspect.summary import inspect_prefix

EOD, VOCAB = 0, 50257


def write_file(prefix: Path, documents: int, seed: int = 0) -> int:
    """Documents of 0-63 tokens, each non-empty one ending with EOD; returns the token count."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 64, size=documents)
    tokens = rng.integers(1, VOCAB, size=int(lengths.sum())).astype(np.uint16)
    tokens[np.cumsum(lengths)[lengths > 0] - 1] = EOD
    with IndexedWriter(prefix, np.uint16) as writer:
        writer.add_documents(tokens, lengths)
        writer.finalize({"vocab_size": VOCAB, "eod_id": EOD, "append_eod": True})
    return len(tokens)


def python_loop(prefix: Path, documents: int) -> float:
    """Seconds for lengths + EOD test of the first ``documents``, one Python iteration per document."""
    start = time.perf_counter()
    with IndexedReader(prefix) as reader:
        lengths, missing = [], 0
        for index in range(documents):
            sequences = reader.document(index)
            lengths.append(sum(len(s) for s in sequences))
            missing += bool(sequences) and int(sequences[-1][-1]) != EOD
        np.percentile(lengths, [50, 99])
    return time.perf_counter() - start


def timed(function, *args) -> tuple[float, object]:
    start = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=10_000_000)
    parser.add_argument("--baseline-documents", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        prefix = Path(folder) / "bench"
        tokens = write_file(prefix, args.documents)
        report_s, report = timed(inspect_prefix, str(prefix))
        check_s, problems = timed(check_prefix, str(prefix))
        assert report.num_documents == args.documents and problems == [], problems
        loop_s = python_loop(prefix, args.baseline_documents)
    loop_rate = args.baseline_documents / loop_s
    rows = [
        ("inspect (summary)", args.documents, report_s),
        ("inspect --check (all checks)", args.documents, check_s),
        ("Python loop per document", args.baseline_documents, loop_s),
    ]
    print(f"{args.documents:,} documents, {tokens:,} tokens (uint16); numpy {np.__version__}, "
          f"Python {platform.python_version()}, {platform.machine()}")
    print(f"{'what':<30} {'documents':>12} {'seconds':>9} {'docs/s':>14} {'vs loop':>8}")
    for name, count, seconds in rows:
        rate = count / seconds
        print(f"{name:<30} {count:>12,} {seconds:>9.2f} {rate:>14,.0f} {rate / loop_rate:>7.0f}x")


if __name__ == "__main__":
    main()
