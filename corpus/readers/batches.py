"""What readers hand to the pipeline: slices of input files, batches of raw records, resume points.

A *slice* is the part ``[start, end)`` of one file that a shard reads, in the file's own position
units (see :mod:`corpus.readers.lines` and :mod:`corpus.readers.parquet` for what a record's position
is). A record belongs to the slice containing its position, so consecutive slices of one file
partition its records exactly: that is what makes concatenated shards equal the unsharded output.
"""

from __future__ import annotations

from dataclasses import dataclass

from corpus.readers.inputs import InputFile


@dataclass(frozen=True)
class Slice:
    """Records of ``file`` whose position lies in ``[start, end)``."""

    file: InputFile
    start: int
    end: int
    relative_lines: bool = False
    """Lines are numbered from the slice's start, not the file's: a part of a run cut inside a JSONL file, whose
    numbers the run shifts once the lines before it are counted (counting them in every part would read the file
    again up to each cut)."""

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class ReadOptions:
    """What every reader needs: the json keys (columnar readers extract them), and the batch limits."""

    keys: list[str]
    batch_size: int
    batch_bytes: int


@dataclass(frozen=True)
class ResumePoint:
    """Where reading continues: slice ``slice_index`` at decompressed byte ``offset`` (JSONL) or row
    ``offset`` (Parquet), with ``line`` physical lines (or rows) before it. ``offset=None`` means the
    beginning of the slice."""

    slice_index: int
    offset: int | None = None
    line: int = 0


@dataclass
class LinePayload:
    """Raw JSONL lines, decoded and validated in the worker (JSON decoding is a real share of the cost)."""

    lines: list[bytes]

    def __len__(self) -> int:
        return len(self.lines)


@dataclass
class ColumnPayload:
    """Values already extracted from a columnar file: one list per json key, or None with the reason
    the whole column is unusable (missing, not a string type)."""

    columns: list[list | None]
    problems: list[str | None]
    rows: int

    def __len__(self) -> int:
        return self.rows


@dataclass
class RawBatch:
    """Consecutive records of one slice, the unit of work of the pipeline.

    ``numbers[i]`` locates record i (1-based line, or 0-based row). ``read_error`` is set when the
    file could not be read past this batch (truncated or corrupt stream): the failure is located at
    ``error_number``. ``resume`` is where to continue once this batch is written and ``progress`` the
    input bytes of the shard done by then (for the progress bar and ETA), as the files store them (compressed
    for .gz/.zst and Parquet); ``record_bytes`` are the batch's records decompressed: their JSONL lines (what
    ``corpus autotune-workers`` measures), or for Parquet the UTF-8 bytes of the json keys' values.
    """

    slice_index: int
    path: str
    unit: str
    numbers: list[int]
    payload: LinePayload | ColumnPayload
    resume: ResumePoint
    progress: int
    read_error: str | None = None
    error_number: int = 0
    blank_lines: int = 0
    record_bytes: int = 0
    lines_read: int = 0
    """JSONL: the number of the last physical line read by the end of this batch (blank lines included), in the
    slice's numbering (see :attr:`Slice.relative_lines`)."""

    def location(self, number: int) -> dict:
        """A JSON-ready location for messages and the skipped-records file."""
        return {"file": self.path, self.unit: number}


def describe_location(location: dict) -> str:
    """``data/a.jsonl:17`` for lines, ``data/a.parquet row 3`` for rows."""
    if "line" in location:
        return f"{location['file']}:{location['line']}"
    return f"{location['file']} row {location['row']}"
