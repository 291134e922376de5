"""Streaming record readers: JSONL (plain, gzip, zstd) and Parquet, sliced for shards and resumable.

``expand_inputs`` turns ``--input`` specs into files; ``read_slices`` streams :class:`RawBatch` es of
raw records (JSONL lines stay undecoded, Parquet values come out of the needed columns) with their
location, resume point and input progress; ``extract`` (run in the workers) decodes and validates
them into the texts of each json key, naming every bad record.
"""

from __future__ import annotations

from typing import Callable, Iterator

from corpus.readers.batches import (
    ColumnPayload,
    LinePayload,
    RawBatch,
    ReadOptions,
    ResumePoint,
    Slice,
    describe_location,
)
from corpus.readers.inputs import InputFile, expand_inputs, format_of
from corpus.readers.lines import lines_before, read_lines
from corpus.readers.parquet import read_rows, row_group_positions
from corpus.readers.records import Extracted, extract

#: The reader of each input format.
READERS: dict[str, Callable[..., Iterator[RawBatch]]] = {
    "jsonl": read_lines,
    "jsonl.gz": read_lines,
    "jsonl.zst": read_lines,
    "parquet": read_rows,
}


def read_slices(slices: list[Slice], options: ReadOptions, resume: ResumePoint | None = None) -> Iterator[RawBatch]:
    """Stream the records of ``slices`` in order, from ``resume`` (the start when None).

    Each slice ends with one batch (possibly empty) whose resume point is the next slice, so a
    checkpoint never has to re-open a finished file.
    """
    resume = resume or ResumePoint(0)
    base = sum(piece.size for piece in slices[: resume.slice_index])
    for index in range(resume.slice_index, len(slices)):
        piece = slices[index]
        point = resume if index == resume.slice_index else ResumePoint(index)
        yield from READERS[piece.file.format](piece, index, point, options, base)
        base += piece.size


__all__ = [
    "ColumnPayload", "Extracted", "InputFile", "LinePayload", "RawBatch", "ReadOptions", "ResumePoint",
    "Slice", "describe_location", "expand_inputs", "extract", "format_of", "lines_before", "read_slices",
    "row_group_positions", "READERS",
]
