"""How a run is cut into parts that processes tokenize side by side: consecutive runs of its records.

A part is a list of slices (:class:`corpus.readers.Slice`), and the parts in order are the run's slices cut at some
points, so their outputs joined in order are byte for byte the output of reading everything in one process (the
rule that makes shards concatenate exactly). Where a cut may fall:

- plain JSONL: anywhere; the reader's rule (a line belongs to the slice holding its first byte) aligns it to lines;
- Parquet: at the first row of a row group, so that no row group is decoded twice;
- ``.gz`` / ``.zst``: nowhere inside a file (a compressed stream cannot be entered in the middle): whole files.

Part sizes shrink as the input runs out ("guided" scheduling): each part is the input left over twice the worker
count, but not under :data:`MIN_PART_BYTES`. The first parts are large (few files, little per-part cost), and the
last are small, so workers finish together and the join of the last parts, the part of it that cannot overlap
encoding, is short.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from corpus.readers import InputFile, Slice, row_group_positions

#: No part is smaller than this (the last of a run aside): a part costs a few files, a checkpoint and a join.
MIN_PART_BYTES = 8 << 20
#: Below this much input a run is one part in one process: the start-up of another process, importing Python and
#: building the tokenizer, would cost more than it saves.
MIN_PARALLEL_BYTES = 48 << 20
#: With fewer cores one process with a multi-threaded encoder is as fast as parts (bench/RESULTS.md).
MIN_PARALLEL_CORES = 3


@dataclass(frozen=True)
class Part:
    """Part ``index`` of a run: the records of ``slices``, in order."""

    index: int
    slices: tuple[Slice, ...]

    @property
    def size(self) -> int:
        return sum(piece.size for piece in self.slices)

    def record(self) -> list[dict]:
        """JSON-ready, for the run's checkpoint (a resumed run keeps its parts whatever the cores now)."""
        return [{**piece.file.identity(), "format": piece.file.format, "start": piece.start, "end": piece.end,
                 "relative_lines": piece.relative_lines} for piece in self.slices]

    @classmethod
    def from_record(cls, index: int, record: list[dict]) -> "Part":
        slices = []
        for entry in record:
            file = InputFile(entry["path"], entry["format"], entry["size"], entry["mtime_ns"], entry.get("version"))
            slices.append(Slice(file, entry["start"], entry["end"], entry["relative_lines"]))
        return cls(index, tuple(slices))


def part_bytes(left: int, workers: int, smallest: int = MIN_PART_BYTES) -> int:
    """The size of the next part when ``left`` bytes are still to be given out to ``workers`` processes."""
    return max(smallest, -(-left // (2 * workers)))


def _cuts(file: InputFile) -> list[int] | None:
    """Where a file may be cut: None for anywhere (plain JSONL), else the allowed positions (none for a
    compressed stream, the row groups' first rows for Parquet)."""
    if file.format == "jsonl":
        return None
    if file.format == "parquet":
        return row_group_positions(file)
    return []


class _Cutter:
    """Cut points per file, looked up once (a Parquet file's footer is read only when a cut falls in it)."""

    def __init__(self) -> None:
        self._known: dict[str, list[int] | None] = {}

    def cut(self, piece: Slice, wanted: int) -> int | None:
        """The allowed position inside ``piece`` nearest to ``wanted``, or None when it cannot be cut."""
        path = piece.file.path
        if path not in self._known:
            self._known[path] = _cuts(piece.file)
        allowed = self._known[path]
        if allowed is None:
            return wanted
        inside = [position for position in allowed if piece.start < position < piece.end]
        return min(inside, key=lambda position: abs(position - wanted)) if inside else None


def plan_parts(slices: list[Slice], workers: int, smallest: int = MIN_PART_BYTES,
               least_total: int = MIN_PARALLEL_BYTES) -> list[Part]:
    """Cut ``slices`` into parts for ``workers`` processes, none under ``smallest`` bytes but the last; one part
    when there is one worker or less input than ``least_total``. Deterministic: the same arguments give the same
    parts."""
    total = sum(piece.size for piece in slices)
    if workers < 2 or total < least_total or not slices:
        return [Part(0, tuple(slices))]
    parts: list[tuple[Slice, ...]] = []
    current: list[Slice] = []
    filled, left = 0, total
    target = part_bytes(left, workers, smallest)
    pending, cutter = deque(slices), _Cutter()
    while pending:
        piece = pending.popleft()
        room = target - filled
        if piece.size > room:
            cut = cutter.cut(piece, piece.start + room)
            if cut is not None:
                pending.appendleft(Slice(piece.file, cut, piece.end, relative_lines=piece.file.format == "jsonl"))
                piece = Slice(piece.file, piece.start, cut, piece.relative_lines)
            elif current and piece.size - room > room:  # a whole file that would overfill this part: the next one
                pending.appendleft(piece)
                filled = target
                piece = None
        if piece is not None:
            current.append(piece)
            filled += piece.size
            left -= piece.size
        if filled >= target or not pending:
            parts.append(tuple(current))
            current, filled = [], 0
            target = part_bytes(left, workers, smallest)
    return [Part(index, part) for index, part in enumerate(parts)]
