"""Cutting a run into parts: the parts in order are the input cut at allowed points, guided sizes, deterministic."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpus.readers import Slice, expand_inputs, row_group_positions
from corpus.tokenize.plan import Part, part_bytes, plan_parts
from tests.corpus.tokenize.support import sample_records, write_jsonl


def whole(files) -> list[Slice]:
    return [Slice(file, 0, file.size) for file in files]


def joined(parts: list[Part]) -> list[tuple[str, int, int]]:
    """The parts' slices with the cuts inside a file removed again: must give back the input's slices."""
    pieces: list[tuple[str, int, int]] = []
    for part in parts:
        for piece in part.slices:
            if pieces and pieces[-1][0] == piece.file.path and pieces[-1][2] == piece.start:
                pieces[-1] = (piece.file.path, pieces[-1][1], piece.end)
            else:
                pieces.append((piece.file.path, piece.start, piece.end))
    return pieces


@pytest.fixture
def jsonl_files(tmp_path):
    records = sample_records()
    return expand_inputs([str(write_jsonl(tmp_path / f"in{i}.jsonl", records[i::3])) for i in range(3)])


def test_parts_in_order_are_the_input_cut_into_shrinking_pieces(jsonl_files):
    slices = whole(jsonl_files)
    parts = plan_parts(slices, 4, smallest=50_000, least_total=0)
    assert joined(parts) == [(s.file.path, s.start, s.end) for s in slices]
    assert [part.index for part in parts] == list(range(len(parts)))
    sizes = [part.size for part in parts]
    assert len(parts) > 8 and sizes[0] >= sizes[len(sizes) // 2] >= sizes[-2]  # guided: large first, small last
    assert all(size >= 50_000 for size in sizes[:-1])
    cut_inside = [piece for part in parts for piece in part.slices if piece.start > 0]
    assert cut_inside and all(piece.relative_lines for piece in cut_inside)
    assert not any(piece.relative_lines for part in parts for piece in part.slices if piece.start == 0)
    assert plan_parts(slices, 4, smallest=50_000, least_total=0) == parts


def test_one_part_for_one_worker_or_a_small_input(jsonl_files):
    slices = whole(jsonl_files)
    total = sum(s.size for s in slices)
    assert len(plan_parts(slices, 1, smallest=1, least_total=0)) == 1
    assert len(plan_parts(slices, 8, smallest=1, least_total=total + 1)) == 1
    assert len(plan_parts(slices, 8, smallest=total, least_total=0)) == 1
    assert plan_parts([], 8) == [Part(0, ())]


def test_a_compressed_file_is_never_cut(tmp_path):
    records = sample_records()
    lines = "".join(json.dumps({"text": r["text"]}) + "\n" for r in records[:5]).encode()
    paths = []
    for index in range(3):
        path = tmp_path / f"c{index}.jsonl.gz"
        path.write_bytes(gzip.compress(lines * (index + 1)))
        paths.append(str(path))
    files = expand_inputs(paths)
    parts = plan_parts(whole(files), 8, smallest=1, least_total=0)
    assert all(piece.start == 0 and piece.end == piece.file.size for part in parts for piece in part.slices)
    assert joined(parts) == [(f.path, 0, f.size) for f in files]


def test_parquet_is_cut_only_where_a_row_group_starts(tmp_path):
    records = [{"text": r["text"]} for r in sample_records()]
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(records), path, row_group_size=10)
    files = expand_inputs([str(path)])
    allowed = set(row_group_positions(files[0]))
    assert len(allowed) == len(records) // 10 + (len(records) % 10 > 0) - 1
    parts = plan_parts(whole(files), 3, smallest=1, least_total=0)
    cuts = [piece.start for part in parts for piece in part.slices if piece.start]
    assert len(parts) > 1 and set(cuts) <= allowed
    assert not any(piece.relative_lines for part in parts for piece in part.slices)


def test_part_sizes_shrink_with_the_input_left():
    assert part_bytes(1000, 5, 1) == 100
    assert part_bytes(10, 5, 4) == 4
    assert part_bytes(0, 5, 4) == 4


def test_a_plan_survives_its_checkpoint_record(jsonl_files):
    parts = plan_parts(whole(jsonl_files), 3, smallest=60_000, least_total=0)
    assert [Part.from_record(part.index, part.record()) for part in parts] == parts
