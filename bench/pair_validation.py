"""What validating every pair a blend opens costs (:func:`corpus.blending.sources.validate_pair`), paid once per pair
identity when a source table is first built; a warm start only stats the files.

    PYTHONPATH=. python bench/pair_validation.py [--documents 10000000] [--shards 1000] [--mean-length 8]

Writes ``--shards`` pairs holding ``--documents`` documents in all (random ids, lognormal lengths, EOD-ended,
``bench/_blend_fixtures.py``; the checks read numbers, so random ids cost what real ones do), then times, over every
shard, in this order: reading the lengths as the source table always did (the reference), the index and sidecar
checks alone, the full validation (token ids against the vocabulary too), and the warm start's key (every ``.idx``,
``.bin`` and sidecar stat-ed). The index checks scale with documents, the token scan with tokens: the table ends with
both rates and what they give for 10 M documents of 1,000 tokens. Files are read from the page cache (just
written); a cold disk adds its read time to the token scan.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run by path: the repository's packages first

from bench._blend_fixtures import write_source  # noqa: E402
from corpus.blending.sources import _read_shard, find_shards, table_key, validate_pair  # noqa: E402
from corpus.inspect.checks import CheckOptions, check_prefix  # noqa: E402

#: The realistic corpus the figures are extrapolated to.
TARGET_DOCUMENTS, TARGET_SHARDS, TARGET_LENGTH = 10_000_000, 1_000, 1_000


def _timed(call, prefixes: list[str]) -> float:
    start = time.perf_counter()
    for prefix in prefixes:
        call(prefix)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=10_000_000)
    parser.add_argument("--shards", type=int, default=1_000)
    parser.add_argument("--mean-length", type=int, default=8, help="Mean tokens per document.")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-pair-validation"))
    args = parser.parse_args()
    per_shard = args.documents // args.shards
    prefixes = [str(write_source(args.workdir / f"shard-{i:05d}_text_document", per_shard, args.mean_length, i))
                for i in range(args.shards)]
    tokens = sum(Path(f"{prefix}.bin").stat().st_size // 2 for prefix in prefixes)
    found, metas = find_shards(str(args.workdir / "shard-*_text_document"))
    rows = [
        ("read the lengths (the table, as before)", _timed(_read_shard, prefixes)),
        ("index + sidecar checks", _timed(lambda p: check_prefix(p, CheckOptions(max_problems=1, read_tokens=False)),
                                         prefixes)),
        ("full validation (+ token ids, EOD)", _timed(validate_pair, prefixes)),
        ("warm start: the table's key", _timed(lambda _: table_key(found, metas), [None])),
    ]
    documents = per_shard * args.shards
    index_rate = rows[1][1] / documents
    token_rate = (rows[2][1] - rows[1][1]) / tokens
    target = TARGET_DOCUMENTS * index_rate + TARGET_DOCUMENTS * TARGET_LENGTH * token_rate
    print(f"\n{documents:,} documents, {tokens:,} tokens in {args.shards:,} shards")
    print(f"{'step':<42} {'seconds':>9}")
    for name, seconds in rows:
        print(f"{name:<42} {seconds:>9.3f}")
    print(f"index checks: {index_rate * 1e9:,.0f} ns/document; token scan: {2 / token_rate / 1e9:,.2f} GB/s of "
          f"uint16 ids")
    print(f"{TARGET_DOCUMENTS:,} documents of {TARGET_LENGTH:,} tokens in {TARGET_SHARDS:,} shards: about "
          f"{target:,.0f} s once per pair identity, 0 on a warm start")


if __name__ == "__main__":
    main()
