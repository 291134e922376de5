"""Streaming JSONL reader for plain, gzip and zstd files: raw lines in bounded memory.

Positions (which slice, hence which shard, a line belongs to):
- plain ``.jsonl``: the byte offset where the line starts, so a shard seeks straight to its range;
- ``.jsonl.gz`` / ``.jsonl.zst``: the compressed byte offset of the block (``RAW_BLOCK`` bytes, read
  in a fixed pattern from the start) that produced the line's first byte. A compressed stream cannot
  be entered in the middle, so a shard decompresses from the start and skips earlier lines (cheap
  next to tokenizing); the fixed block pattern makes the positions identical in every run.

Lines are handed over undecoded: JSON parsing happens in the workers. Blank lines are not records. A remote file
(``s3://…``) is read the same way through :func:`corpus.storage.open_binary` (large ranged reads, fetched ahead).
"""

from __future__ import annotations

import zlib
from typing import Callable, Iterator

from corpus import storage
from corpus.readers.batches import LinePayload, RawBatch, ReadOptions, ResumePoint, Slice

#: Bytes read from disk per call. NOTE: compressed-line positions depend on it; changing it changes
#: how a compressed file is split between shards (never the output of an unsharded run).
RAW_BLOCK = 1 << 20
_BOM = b"\xef\xbb\xbf"


class _ReadFailure(Exception):
    """A compressed stream is truncated or corrupt at compressed position ``pos``. Private: the slice reader turns
    it into a batch's read error, which the pipeline reports with the file under its ``--on-error`` policy."""

    def __init__(self, reason: str, pos: int) -> None:
        super().__init__(reason)
        self.reason, self.pos = reason, pos


def _zstd() -> object:
    import zstandard

    return zstandard.ZstdDecompressor().decompressobj()


#: How to make a fresh decompressor for each compressed format (one per gzip member / zstd frame).
DECOMPRESSORS: dict[str, Callable[[], object]] = {
    "jsonl.gz": lambda: zlib.decompressobj(zlib.MAX_WBITS | 16),
    "jsonl.zst": _zstd,
}


def _compressed_blocks(handle, fmt: str, skip: int) -> Iterator[tuple[int, bytes]]:
    """Decompressed blocks with the compressed position they came from; the first ``skip``
    decompressed bytes are dropped (resume). Raises :class:`_ReadFailure` on a bad or cut stream."""
    decompressor, fed, pos = DECOMPRESSORS[fmt](), False, 0
    while raw := handle.read(RAW_BLOCK):
        while raw:
            try:
                out = decompressor.decompress(raw)
            except Exception as error:  # zlib.error / ZstdError: both mean a corrupt stream
                raise _ReadFailure(f"corrupt {fmt.split('.')[-1]} stream ({error})", pos) from None
            fed = True
            raw = decompressor.unused_data if decompressor.eof else b""
            if decompressor.eof:
                decompressor, fed = DECOMPRESSORS[fmt](), False
            if skip and out:
                dropped = min(skip, len(out))
                out, skip = out[dropped:], skip - dropped
            if out:
                yield pos, out
        pos = handle.tell()
    if fed:
        raise _ReadFailure(f"truncated {fmt.split('.')[-1]} stream: the file ends before the end of the compressed "
                          "data", pos)


def _plain_blocks(handle) -> Iterator[tuple[int, bytes]]:
    while True:
        pos = handle.tell()
        block = handle.read(RAW_BLOCK)
        if not block:
            return
        yield pos, block


def _split(blocks: Iterator[tuple[int, bytes]], offset: int, exact: bool) -> Iterator[tuple[int, int, bytes]]:
    """``(offset, position, line)`` for every line; the last line may lack its newline."""
    pieces: list[bytes] = []
    first_pos = 0
    try:
        for pos, block in blocks:
            parts = block.split(b"\n")
            if not pieces:
                first_pos = pos
            for part in parts[:-1]:
                line = b"".join((*pieces, part)) if pieces else part
                yield offset, offset if exact else first_pos, line
                offset += len(line) + 1
                pieces, first_pos = [], pos
            if parts[-1]:
                pieces.append(parts[-1])
    except _ReadFailure as failure:
        if pieces:
            failure.reason += " (its last line is incomplete)"
        raise
    if pieces:
        line = b"".join(pieces)
        yield offset, offset if exact else first_pos, line


def _first_line_at_or_after(handle, start: int) -> int:
    """Offset of the first line starting at or after ``start`` (the slice's first line)."""
    if start == 0:
        return 0
    handle.seek(start - 1)
    skipped = 0
    while block := handle.read(RAW_BLOCK):
        newline = block.find(b"\n")
        if newline >= 0:
            return start - 1 + skipped + newline + 1
        skipped += len(block)
    return start - 1 + skipped


def lines_before(path: str, offset: int) -> int:
    """The number of lines of a plain JSONL file that start before byte ``offset`` (the lines before a slice
    numbered from its own start)."""
    with storage.open_binary(path) as handle:
        return _count_lines(handle, _first_line_at_or_after(handle, offset))


def _count_lines(handle, end: int) -> int:
    """Newlines in bytes ``[0, end)``: the line number where a mid-file slice begins."""
    handle.seek(0)
    count, left = 0, end
    while left and (block := handle.read(min(RAW_BLOCK, left))):
        count += block.count(b"\n")
        left -= len(block)
    return count


def _open_lines(handle, piece: Slice, resume: ResumePoint) -> tuple[Iterator[tuple[int, int, bytes]], int]:
    """The line iterator of a slice from where ``resume`` says, and the number of lines before it."""
    fmt = piece.file.format
    if fmt == "jsonl":
        if resume.offset is None:
            offset = _first_line_at_or_after(handle, piece.start)
            line = 0 if piece.relative_lines else _count_lines(handle, offset)
        else:
            offset, line = resume.offset, resume.line
        handle.seek(offset)
        return _split(_plain_blocks(handle), offset, exact=True), line
    offset = resume.offset or 0
    return _split(_compressed_blocks(handle, fmt, offset), offset, exact=False), resume.line


def read_lines(piece: Slice, slice_index: int, resume: ResumePoint, options: ReadOptions,
               progress_base: int) -> Iterator[RawBatch]:
    """Batches of raw lines of one slice: at most ``options.batch_size`` records or about
    ``options.batch_bytes`` bytes (a single longer line makes a batch of its own)."""
    batch_size, batch_bytes = options.batch_size, options.batch_bytes
    path, size = piece.file.path, piece.file.size
    with storage.open_binary(path, piece.file.listed()) as handle:
        lines, line_number = _open_lines(handle, piece, resume)
        batch, numbers, held, blank, next_offset = [], [], 0, 0, resume.offset or 0

        def emit(pos: int, error: str | None = None, last: bool = False) -> RawBatch:
            nonlocal batch, numbers, held, blank
            done = piece.size if last else min(piece.size, max(0, pos - piece.start))
            after = ResumePoint(slice_index + 1) if last else ResumePoint(slice_index, next_offset, line_number)
            out = RawBatch(slice_index, path, "line", numbers, LinePayload(batch), after, progress_base + done,
                           read_error=error, error_number=line_number + 1, blank_lines=blank,
                           record_bytes=held + len(batch), lines_read=line_number)  # each line and its newline
            batch, numbers, held, blank = [], [], 0, 0
            return out

        try:
            for offset, pos, line in lines:
                if min(pos, size - 1) >= piece.end:
                    break
                line_number += 1
                next_offset = offset + len(line) + 1
                if min(pos, size - 1) < piece.start:
                    continue
                if offset == 0 and line.startswith(_BOM):
                    line = line[len(_BOM):]
                if not line or line.isspace():
                    blank += 1
                    continue
                batch.append(line)
                numbers.append(line_number)
                held += len(line)
                if len(batch) >= batch_size or held >= batch_bytes:
                    yield emit(pos)
        except _ReadFailure as failure:
            if piece.start <= min(failure.pos, size - 1) < piece.end:
                yield emit(failure.pos, error=failure.reason, last=True)
                return
        yield emit(piece.end, last=True)

