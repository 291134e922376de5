"""Pairs for the inspect tests: random documents of 0-3 sequences written with a sidecar, writable views of their
index to plant defects, and where a document's tokens lie in the ``.bin``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from corpus.indexed import IndexedWriter, index_arrays, read_header
from corpus.inspect.checks import CheckOptions, Problem, check_prefix

VOCAB, EOD = 1000, 999


def random_documents(rng: np.random.Generator, count: int = 300) -> list[list[np.ndarray]]:
    """Documents of 0-3 sequences (sentence-split style); each non-empty document ends with EOD."""
    documents = []
    for _ in range(count):
        sequences = [rng.integers(0, EOD, size=rng.integers(1, 80)).astype(np.uint16) for _ in range(rng.integers(0,
                                                                                                                  4))]
        if sequences:
            sequences[-1][-1] = EOD
        documents.append(sequences)
    return documents


def write_pair(prefix: Path, documents: list[list[np.ndarray]], meta: dict | None = None) -> None:
    with IndexedWriter(prefix, np.uint16) as writer:
        for sequences in documents:
            writer.add_document(np.concatenate(sequences) if sequences else [], [len(s) for s in sequences])
        writer.finalize(meta)


def idx_arrays(prefix: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Writable views of lengths, pointers and document indices, to plant defects."""
    header = read_header(f"{prefix}.idx")
    return index_arrays(np.memmap(f"{prefix}.idx", dtype=np.uint8, mode="r+"), header)


def token_position(documents: list[list[np.ndarray]], document: int, inside: int) -> int:
    """Position in the .bin of token ``inside`` of ``document``."""
    before = sum(len(s) for d in documents[:document] for s in d)
    return before + inside


def nonempty(documents: list[list[np.ndarray]]) -> list[int]:
    return [i for i, d in enumerate(documents) if d]


def checks(prefix: Path, **options) -> list[Problem]:
    return check_prefix(str(prefix), CheckOptions(**options))
