"""Streaming Parquet reader: only the json-key columns, row group by row group.

Position of row ``r`` of a file of ``R`` rows and ``S`` bytes: ``r * S // R``, so byte ranges of
the file map to contiguous row ranges and a shard may start inside a row group. Rows are numbered
from 0, as pyarrow and pandas do. Nested keys (``meta.title``) read only that field of the struct.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from corpus import storage
from corpus.readers.batches import ColumnPayload, RawBatch, ReadOptions, ResumePoint, Slice
from corpus.readers.inputs import InputFile


@dataclass(frozen=True)
class _Column:
    """Where one json key lives in the file: the path to read and the struct fields below it."""

    read_path: str | None
    fields: tuple[str, ...]
    problem: str | None


def _is_text(arrow_type) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) or pa.types.is_string_view(arrow_type)


def _resolve(schema, key: str) -> _Column:
    """Find ``key`` in the schema: a top-level column, else a dotted path into struct columns."""
    import pyarrow as pa

    if key in schema.names:
        arrow_type, read_path, fields = schema.field(key).type, key, ()
    else:
        top, *rest = key.split(".")
        if top not in schema.names:
            return _Column(None, (), f"missing key '{key}' (the file's columns: {', '.join(schema.names)})")
        arrow_type = schema.field(top).type
        for name in rest:
            if not pa.types.is_struct(arrow_type) or arrow_type.get_field_index(name) < 0:
                return _Column(None, (),
                               f"missing key '{key}' (no field '{name}' in column '{top}' of type {arrow_type})")
            arrow_type = arrow_type.field(name).type
        read_path, fields = key, tuple(rest)
    if not _is_text(arrow_type):
        return _Column(None, (), f"key '{key}' is a {arrow_type} column, not a string")
    return _Column(read_path, fields, None)


def _values(batch, column: _Column) -> list | None:
    """The Python values of one key in a record batch (None entries for nulls)."""
    import pyarrow.compute as pc

    if column.read_path is None:
        return None
    array = batch.column(column.read_path.split(".")[0])
    for name in column.fields:
        array = pc.struct_field(array, name)
    return array.to_pylist()


def _text_bytes(values: list[list | None]) -> int:
    """UTF-8 bytes of the string values of a batch (what the records amount to once decompressed)."""
    return sum(len(value.encode("utf-8", "replace")) for column in values if column for value in column
               if isinstance(value, str))


def row_group_positions(file: InputFile) -> list[int]:
    """The position (``r * S // R``) of the first row of every row group but the first: where a Parquet file can be
    cut so that no row group is read by two slices."""
    import pyarrow.parquet as pq

    source = storage.open_binary(file.path, file.listed()) if storage.is_remote(file.path) else file.path
    with pq.ParquetFile(source) as handle:
        metadata = handle.metadata
        rows, positions, first = metadata.num_rows, [], 0
        for group in range(metadata.num_row_groups - 1):
            first += metadata.row_group(group).num_rows
            positions.append(first * file.size // max(rows, 1))
    return positions


def _row_range(piece: Slice, rows: int) -> tuple[int, int]:
    """Rows whose position ``r * size // rows`` lies in the slice (smallest r with r*size >= start*rows)."""
    size = max(piece.file.size, 1)
    return -(-piece.start * rows // size), min(rows, -(-piece.end * rows // size))


def _groups(metadata, first: int, last: int) -> Iterator[tuple[int, int, int]]:
    """``(row group, first row of it to read, row where the group starts)`` for rows ``[first, last)``."""
    begin = 0
    for group in range(metadata.num_row_groups):
        count = metadata.row_group(group).num_rows
        if begin + count > first and begin < last:
            yield group, max(first, begin) - begin, begin
        begin += count


def read_rows(piece: Slice, slice_index: int, resume: ResumePoint, options: ReadOptions,
              progress_base: int) -> Iterator[RawBatch]:
    """Batches of extracted key values for the slice's rows, reading one row group at a time.

    Batches hold at most ``options.batch_size`` rows (Parquet has no cheap per-row byte size)."""
    keys, batch_size = options.keys, options.batch_size
    import pyarrow.parquet as pq

    path, size = piece.file.path, max(piece.file.size, 1)
    try:
        handle = pq.ParquetFile(storage.open_binary(path, piece.file.listed()) if storage.is_remote(path) else path)
    except storage.StorageError:
        raise
    except Exception as error:  # pyarrow raises ArrowInvalid/OSError for a corrupt or non-Parquet file
        yield RawBatch(slice_index, path, "row", [], ColumnPayload([], [], 0), ResumePoint(slice_index + 1),
                       progress_base + piece.size, read_error=f"not a readable Parquet file ({error})")
        return
    with handle:
        rows = handle.metadata.num_rows
        first, last = _row_range(piece, rows)
        if resume.offset is not None:
            first = resume.offset
        columns = [_resolve(handle.schema_arrow, key) for key in keys]
        problems = [column.problem for column in columns]
        paths = sorted({c.read_path for c in columns if c.read_path}) or [handle.schema_arrow.names[0]]
        for group, skip, group_start in _groups(handle.metadata, first, last):
            row = group_start
            for batch in handle.iter_batches(batch_size=batch_size, row_groups=[group], columns=paths):
                start, stop = max(skip - (row - group_start), 0), min(batch.num_rows, last - row)
                if stop > start:
                    part = batch.slice(start, stop - start)
                    values = [_values(part, column) for column in columns]
                    after = row + stop
                    yield RawBatch(slice_index, path, "row", list(range(row + start, after)),
                                   ColumnPayload(values, problems, stop - start),
                                   ResumePoint(slice_index, after, after),
                                   progress_base + min(piece.size, max(0, after * size // max(rows, 1) - piece.start)),
                                   record_bytes=_text_bytes(values))
                row += batch.num_rows
                if row >= last:
                    break
    yield RawBatch(slice_index, path, "row", [], ColumnPayload([], [], 0), ResumePoint(slice_index + 1),
                   progress_base + piece.size)
