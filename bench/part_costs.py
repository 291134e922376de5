"""Where the CPU of one part of a ``corpus tokenize`` run goes, stage by stage, per byte of input: the pipeline's own
functions, one after the other on one thread, on the first share of a JSONL file.

    python -m bench.part_costs --tokenizer-model cl100k/tokenizer.json --bytes 3e8

Stages, as a part worker runs them (``corpus/tokenize/part.py``) and as the run joins its part:

- ``read``: the part's lines, cut into batches (``read_slices``); ``json``: decoding them (``extract``);
- ``encode``: the fast encoder's batch call on one thread (the part workers' setting on a many-core node);
- ``eod``: casting and inserting the EODs (``pack``); ``write``: the part's writer (``add_documents``: tokens,
  lengths, document index and the part's crc32 of its tokens);
- ``join``: appending the part to the run's output and finalizing it (the kernel's copy of the ``.bin``, the tree
  sha256 of every block, the output made durable, which a run does in its background sync, and the ``.idx``);

and beside them, not part of a run: ``sha256 (was)``, the tree sha256 of the same tokens that a part computed before
its checksum became crc32 (``crc32`` times it alone). The table ends with ``encode / all``: the share of a part's
CPU that is encoding, which is what the pipeline can reach of the engine's own ceiling when every CPU runs a part and
the CPUs run as fast one by one as all together (memory bandwidth and shared cores make it less, never more).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path

from bench.installed_text import FOLDER
from corpus.indexed import IndexedWriter, token_dtype_for_vocab
from corpus.indexed.append import BlockDigest
from corpus.indexed.handover import Crc32
from corpus.readers import ReadOptions, expand_inputs, extract, read_slices
from corpus.tokenize.shards import Shard, plan_slices
from corpus.tokenize.worker import pack
from corpus.tokenizers import TokenizerConfig, select_encoder

RUN_STAGES = ("read", "json", "encode", "eod", "write", "join")


class Clock:
    """CPU seconds of this process per stage (one thread works at a time, so none is counted twice)."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys((*RUN_STAGES, "sha256 (was)", "crc32"), 0.0)

    def __call__(self, stage: str, work, *args):
        began = time.process_time()
        result = work(*args)
        self.seconds[stage] += time.process_time() - began
        return result


def measure(args: argparse.Namespace, folder: Path) -> dict:
    size = os.path.getsize(args.input)
    share = Shard(0, max(1, math.ceil(size / args.bytes)), "bench")
    batches = iter(read_slices(plan_slices(expand_inputs([args.input]), share), ReadOptions(["text"], 1000, 4 << 20)))
    encoder = select_encoder(TokenizerConfig(type=args.tokenizer_type, model=args.tokenizer_model), [], 1)[0]
    dtype = token_dtype_for_vocab(encoder.vocab_size)
    eod = encoder.require_eod()
    clock, sha256, crc32 = Clock(), BlockDigest(), Crc32()
    part = IndexedWriter(folder / "part", dtype, handed_over=True)
    read_bytes = 0
    while (batch := clock("read", next, batches, None)) is not None:
        read_bytes += batch.record_bytes
        texts = clock("json", extract, batch.payload, ["text"]).texts[0]
        flat, lengths = clock("encode", encoder.encode_batch_flat, texts)
        tokens, lengths = clock("eod", pack, flat, lengths, dtype, eod)
        clock("write", part.add_documents, tokens, lengths)
        clock("sha256 (was)", sha256.update, tokens)
        clock("crc32", crc32.update, tokens)
    written = part.written()
    output = IndexedWriter(folder / "output", dtype)

    def join() -> None:
        output.append_written(folder / "part", written)
        output.finalize()

    clock("join", join)
    run = sum(clock.seconds[stage] for stage in RUN_STAGES)
    return {"input": Path(args.input).name, "bytes": read_bytes, "tokens": written["num_tokens"],
            "ns_per_byte": {stage: round(seconds / read_bytes * 1e9, 3) for stage, seconds in clock.seconds.items()},
            "share_of_run": {stage: round(clock.seconds[stage] / run, 3) for stage in RUN_STAGES},
            "encode_over_all": round(clock.seconds["encode"] / run, 3),
            "sha256_over_crc32": round(clock.seconds["sha256 (was)"] / clock.seconds["crc32"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", default=str(FOLDER / "sources.jsonl"), help="JSONL with a 'text' key")
    parser.add_argument("--tokenizer-type", default="HuggingFaceTokenizer")
    parser.add_argument("--tokenizer-model", required=True)
    parser.add_argument("--bytes", type=float, default=3e8, help="about this much of the file's start")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    if not Path(args.input).is_file():
        raise SystemExit(f"{args.input}: no such file (python -m bench.installed_text --min-bytes 6e8 makes it)")
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="part-costs-") as folder:
            result = measure(args, Path(folder))
        print(json.dumps(result), flush=True)
        print("stage".ljust(14) + "ns/B   share of a part's run")
        for stage, value in result["ns_per_byte"].items():
            share = result["share_of_run"].get(stage)
            print(f"{stage:14s}{value:5.2f}   {'' if share is None else f'{share:.1%}'}")
        print(f"encode / all: {result['encode_over_all']:.2f}; sha256 / crc32 on the same tokens: "
              f"{result['sha256_over_crc32']:.1f}×", flush=True)


if __name__ == "__main__":
    main()
