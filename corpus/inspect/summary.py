"""The summary of one ``.bin/.idx`` pair: header, counts, sizes, document-length statistics and histogram, and
the sidecar.

It reads only the ``.idx``: document lengths come from the sequence pointers with vectorised numpy over the
memory map, in bounded chunks, so a file of tens of millions of documents is summarised in seconds, holding one
int64 per document (exact quantiles need them all).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corpus.indexed import VERSION, IndexedReader, sidecar
from corpus.inspect.errors import InspectError
from corpus.inspect.stats import Histogram, LengthStats, document_lengths, length_histogram, length_stats


@dataclass(frozen=True)
class InspectReport:
    """The summary of one ``.bin/.idx`` pair."""

    prefix: str
    idx_file: str
    bin_file: str
    version: int
    dtype: str
    num_sequences: int
    num_documents: int
    num_tokens: int
    idx_bytes: int
    bin_bytes: int
    empty_documents: int
    #: Tokens per document; None for a file without documents.
    lengths: LengthStats | None
    histogram: Histogram
    #: The ``.meta.json`` sidecar, None for files written by Megatron itself.
    meta: dict | None


def read_meta(prefix: str) -> dict | None:
    """The sidecar of ``prefix`` (None when absent); an unreadable one is an :class:`InspectError`."""
    try:
        return sidecar.read(prefix)
    except ValueError as error:
        raise InspectError(str(error)) from None


def inspect_prefix(prefix: str) -> InspectReport:
    """Summarise one pair: header, counts, sizes, document-length statistics and histogram, sidecar.

    Opens with full validation, so a corrupt pair raises :class:`IndexFormatError` (``check_prefix``
    lists every problem instead).
    """
    with IndexedReader(prefix) as reader:
        lengths = document_lengths(reader)
        return InspectReport(
            prefix=reader.prefix,
            idx_file=str(reader.idx_file),
            bin_file=str(reader.bin_file),
            version=VERSION,
            dtype=str(reader.dtype),
            num_sequences=reader.num_sequences,
            num_documents=reader.num_documents,
            num_tokens=reader.num_tokens,
            idx_bytes=reader.idx_file.stat().st_size,
            bin_bytes=reader.bin_file.stat().st_size,
            empty_documents=int(np.count_nonzero(lengths == 0)),
            lengths=length_stats(lengths),
            histogram=length_histogram(lengths),
            meta=read_meta(reader.prefix),
        )
