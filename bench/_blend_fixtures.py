"""Shared by the blend benchmarks: synthetic token files (index maps depend only on document
lengths; lognormal lengths like web text) and a one-process gloo group for megatron-core."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from corpus.indexed import IndexedWriter, exists


def write_source(prefix: Path, num_docs: int, mean_length: int, seed: int) -> Path:
    """``num_docs`` documents of lognormal length (mean ~``mean_length``), random uint16 ids, each
    ended by EOD 0 as its sidecar says (reused when the pair exists)."""
    if exists(prefix):
        return prefix
    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, rng.lognormal(np.log(mean_length) - 0.5, 1.0, num_docs)).astype(np.int64)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with IndexedWriter(prefix, np.uint16) as writer:
        for start in range(0, num_docs, 100_000):
            chunk = lengths[start : start + 100_000]
            tokens = rng.integers(1, 32000, int(chunk.sum()), dtype=np.uint16)
            tokens[np.cumsum(chunk) - 1] = 0  # every document ends with EOD (id 0)
            writer.add_documents(tokens, chunk)
        writer.finalize({"tokenizer": {"type": "HuggingFaceTokenizer", "fingerprint": "bench", "options": {}},
                         "vocab_size": 32000, "eod_id": 0, "append_eod": True})
    return prefix


def init_gloo(folder: Path) -> None:
    """megatron-core's BlendedDataset asks torch.distributed for the rank even in one process."""
    import torch.distributed as dist

    if not dist.is_initialized():
        store = folder / f"gloo-{os.getpid()}-{time.time_ns()}"
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)


class MegatronTokenizer:
    """What GPTDatasetConfig needs of a tokenizer."""

    eod, pad, vocab_size = 0, -1, 32000
    unique_identifiers = {"class": "bench"}
