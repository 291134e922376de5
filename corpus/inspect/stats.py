"""Vectorised statistics over a ``.bin/.idx`` pair: document token bounds and lengths, length
statistics and histogram, token-id frequencies.

Every function walks the memory maps in bounded chunks (no Python loop per document or token), so
files with tens of millions of documents take seconds and memory stays bounded by the chunk size plus
one int64 per document where exact quantiles need them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol

import numpy as np

#: Documents handled per vectorised step: bounds temporaries to a few tens of MB whatever the file.
DOCUMENT_CHUNK = 1 << 20
#: Tokens handled per vectorised step over the ``.bin``.
TOKEN_CHUNK = 1 << 24


class TokenIndex(Protocol):
    """The arrays of an ``.idx`` (what :class:`IndexedReader` exposes, and the checker's view)."""

    dtype: np.dtype
    num_tokens: int
    sequence_lengths: np.ndarray
    sequence_pointers: np.ndarray
    document_indices: np.ndarray


@dataclass(frozen=True)
class LengthStats:
    """Tokens per document over a whole file (documents that encoded to nothing count as 0)."""

    min: int
    median: float
    mean: float
    p99: float
    max: int


@dataclass(frozen=True)
class Histogram:
    """Documents per length bin: bin i holds lengths in ``[edges[i], edges[i + 1])``; powers of two,
    because document lengths span orders of magnitude."""

    edges: list[int]
    counts: list[int]


def iter_document_bounds(index: TokenIndex) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Yield ``(first document, token starts, token ends)`` for every document, chunk by chunk.

    Document d spans tokens ``[start, end)`` of the ``.bin``: the start of its first sequence up to the
    start of the next document's. NOTE: valid only when the pointers are the running sum of the
    lengths (:class:`IndexedReader` validates that; the checker calls this only after its structure checks).
    """
    documents, pointers = index.document_indices, index.sequence_pointers
    count, itemsize = len(pointers), index.dtype.itemsize
    for first in range(0, len(documents) - 1, DOCUMENT_CHUNK):
        sequence = np.asarray(documents[first : first + DOCUMENT_CHUNK + 1], dtype=np.int64)
        if count:
            starts = pointers[np.minimum(sequence, count - 1)] // itemsize
            offsets = np.where(sequence < count, starts, index.num_tokens)
        else:
            offsets = np.zeros(len(sequence), dtype=np.int64)
        yield first, offsets[:-1], offsets[1:]


def document_lengths(index: TokenIndex) -> np.ndarray:
    """Tokens in each document (int64, one per document)."""
    lengths = np.empty(len(index.document_indices) - 1, dtype=np.int64)
    for first, starts, ends in iter_document_bounds(index):
        lengths[first : first + len(starts)] = ends - starts
    return lengths


def length_stats(lengths: np.ndarray) -> LengthStats | None:
    """min / median / mean / p99 / max of document lengths; None when there are none."""
    if not len(lengths):
        return None
    median, p99 = np.percentile(lengths, [50, 99])
    return LengthStats(int(lengths.min()), float(median), float(lengths.mean()), float(p99), int(lengths.max()))


def length_histogram(lengths: np.ndarray) -> Histogram:
    """Documents per power-of-two length bin (``[0, 1)``, ``[1, 2)``, ``[2, 4)``, …), from the first
    non-empty bin to the last."""
    if not len(lengths):
        return Histogram([], [])
    # frexp's exponent of L > 0 is floor(log2 L) + 1 (exact below 2**53); of 0 it is 0.
    counts = np.bincount(np.frexp(lengths.astype(np.float64))[1])
    edges = [0] + [1 << k for k in range(len(counts))]
    low = int(np.flatnonzero(counts)[0])
    return Histogram(edges[low:], [int(c) for c in counts[low:]])


def iter_token_chunks(tokens: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(first token position, tokens)`` over a flat (memory-mapped) token array, chunk by chunk."""
    for start in range(0, len(tokens), TOKEN_CHUNK):
        yield start, np.asarray(tokens[start : start + TOKEN_CHUNK])


def token_frequencies(tokens: np.ndarray, limit: int) -> tuple[np.ndarray, int]:
    """Occurrences of each token id below ``limit`` (index = id), and how many tokens fell outside
    ``[0, limit)`` (a corrupt file must not make the count array explode)."""
    counts = np.zeros(limit, dtype=np.int64)
    outside = 0
    for _, chunk in iter_token_chunks(tokens):
        ids = chunk.astype(np.int64)
        inside = (ids >= 0) & (ids < limit)
        outside += len(ids) - int(np.count_nonzero(inside))
        counts += np.bincount(ids[inside], minlength=limit)
    return counts, outside
