"""Readers: every input format, every bad-input class, slicing and resume points."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from corpus.core.errors import InputError
from corpus.readers import ReadOptions, ResumePoint, Slice, expand_inputs, extract, read_slices
from corpus.readers import lines as lines_module

RECORDS = [
    {"text": "Hello wörld 🚀", "meta": {"title": "first"}},
    {"text": "", "meta": {"title": "empty text is fine"}},
    {"text": "日本語のテキスト\nwith a newline", "meta": {"title": "third"}},
] + [{"text": f"record {i} " + "x" * (i % 50), "meta": {"title": f"t{i}"}} for i in range(3, 300)]


def jsonl_bytes(records: list[dict]) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records)


def zstd_in_blocks(data: bytes) -> bytes:
    """zstd with a block flushed every ~2 KB (a one-shot frame of a small file is one block, which a
    truncation would lose whole)."""
    compressor = zstandard.ZstdCompressor().compressobj()
    parts = [compressor.compress(data[i:i + 2048]) + compressor.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
             for i in range(0, len(data), 2048)]
    return b"".join(parts) + compressor.flush()


WRITERS = {
    "jsonl": lambda path, data: path.write_bytes(data),
    "jsonl.gz": lambda path, data: path.write_bytes(gzip.compress(data)),
    "jsonl.zst": lambda path, data: path.write_bytes(zstd_in_blocks(data)),
}


def write_input(folder: Path, fmt: str, records: list[dict], name: str = "data") -> Path:
    path = folder / f"{name}.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(records), path, row_group_size=37)
    else:
        WRITERS[fmt](path, jsonl_bytes(records))
    return path


def read_all(paths: list[Path], keys: list[str], batch_size: int = 16, slices: list[Slice] | None = None,
             resume: ResumePoint | None = None) -> tuple[list[tuple], list]:
    """(location number, texts...) of every good record, and the raw batches."""
    if slices is None:
        slices = [Slice(f, 0, f.size) for f in expand_inputs([str(p) for p in paths])]
    batches = list(read_slices(slices, ReadOptions(keys, batch_size, 1 << 20), resume))
    rows = []
    for batch in batches:
        extracted = extract(batch.payload, keys)
        bad = {index for index, _ in extracted.bad}
        good = [n for i, n in enumerate(batch.numbers) if i not in bad]
        rows.extend(zip([batch.path] * len(good), good, *extracted.texts))
    return rows, batches


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.gz", "jsonl.zst", "parquet"])
def test_each_format_reads_every_record_in_order_with_nested_keys(tmp_path, fmt):
    path = write_input(tmp_path, fmt, RECORDS)
    rows, batches = read_all([path], ["text", "meta.title"])
    assert [(r[2], r[3]) for r in rows] == [(r["text"], r["meta"]["title"]) for r in RECORDS]
    first = 0 if fmt == "parquet" else 1
    assert [r[1] for r in rows] == list(range(first, first + len(RECORDS)))
    assert all(b.unit == ("row" if fmt == "parquet" else "line") for b in batches)
    assert batches[-1].progress == path.stat().st_size


def test_parquet_reads_only_the_needed_columns(tmp_path, monkeypatch):
    path = write_input(tmp_path, "parquet", [{**r, "big": "y" * 100} for r in RECORDS[:50]])
    asked = []
    original = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        asked.append(kwargs.get("columns"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    read_all([path], ["meta.title"])
    assert asked and all(columns == ["meta.title"] for columns in asked)


def test_jsonl_details_blank_lines_bom_crlf_and_missing_final_newline(tmp_path):
    path = tmp_path / "odd.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"text": "a"}\r\n\n   \n{"text": "b"}\n{"text": "c"}')
    rows, batches = read_all([path], ["text"])
    assert [(r[1], r[2]) for r in rows] == [(1, "a"), (4, "b"), (5, "c")]
    assert sum(b.blank_lines for b in batches) == 2


BAD_LINES = [
    (b'{"text": "cut', "malformed JSON"),
    (b'{"text": "caf\xe9"}', "invalid UTF-8"),
    (b'["text"]', "not a JSON object"),
    (b'{"title": "no text"}', "missing key 'text'"),
    (b'{"text": 42}', "key 'text' is a JSON number"),
    (b'{"text": null}', "key 'text' is null"),
    (b'{"text": ["a", "b"]}', "key 'text' is a JSON array"),
    (b'{"text": "ok", "meta": {"title": 3}}', "key 'meta.title' is a JSON number"),
    (b'{"text": "ok", "meta": "flat"}', "missing key 'meta.title'"),
]


@pytest.mark.parametrize("line, reason", BAD_LINES)
def test_each_bad_jsonl_record_is_named_with_its_line_and_reason(tmp_path, line, reason):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"text": "fine", "meta": {"title": "t"}}\n' + line + b'\n{"text": "", "meta": {"title": ""}}\n')
    (batch, *_) = read_all([path], ["text", "meta.title"])[1]
    extracted = extract(batch.payload, ["text", "meta.title"])
    assert len(extracted.bad) == 1 and extracted.bad[0][0] == 1 and reason in extracted.bad[0][1]
    assert batch.numbers[extracted.bad[0][0]] == 2
    assert extracted.texts == [["fine", ""], ["t", ""]]


def test_parquet_bad_values_and_columns(tmp_path):
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"text": ["a", None, "c"], "n": [1, 2, 3]}), path)
    (batch, *_) = read_all([path], ["text"])[1]
    assert extract(batch.payload, ["text"]).bad == [(1, "key 'text' is null, not a string")]
    (batch, *_) = read_all([path], ["n"])[1]
    assert [reason for _, reason in extract(batch.payload,
                                            ["n"]).bad] == ["key 'n' is a int64 column, not a string"] * 3
    (batch, *_) = read_all([path], ["title"])[1]
    assert "missing key 'title'" in extract(batch.payload, ["title"]).bad[0][1]


def test_not_a_parquet_file_is_a_read_error(tmp_path):
    path = tmp_path / "x.parquet"
    path.write_bytes(b"not parquet at all")
    (batch,) = read_all([path], ["text"])[1]
    assert "not a readable Parquet file" in batch.read_error


@pytest.mark.parametrize("fmt", ["jsonl.gz", "jsonl.zst"])
def test_truncated_compressed_stream_is_reported_after_the_last_whole_line(tmp_path, fmt, monkeypatch):
    monkeypatch.setattr(lines_module, "RAW_BLOCK", 512)
    path = write_input(tmp_path, fmt, RECORDS)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    rows, batches = read_all([path], ["text"])
    failed = [b for b in batches if b.read_error]
    assert len(failed) == 1 and "truncated" in failed[0].read_error
    assert [r[2] for r in rows] == [r["text"] for r in RECORDS[: len(rows)]]
    assert failed[0].error_number == len(rows) + 1
    assert 0 < len(rows) < len(RECORDS)


def test_corrupt_gzip_is_a_read_error(tmp_path):
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(b"this is not gzip data\n")
    (batch,) = read_all([path], ["text"])[1]
    assert "corrupt gz stream" in batch.read_error and batch.error_number == 1


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.gz", "jsonl.zst", "parquet"])
def test_slices_partition_the_records_exactly(tmp_path, fmt, monkeypatch):
    monkeypatch.setattr(lines_module, "RAW_BLOCK", 256)  # many compressed blocks on a small file
    path = write_input(tmp_path, fmt, RECORDS)
    (file,) = expand_inputs([str(path)])
    whole = read_all([path], ["text"])[0]
    for cuts in ([1, 2, 3], [file.size // 3, file.size // 2], [7, file.size - 5], list(range(0, file.size, 997))):
        bounds = sorted({0, *[c for c in cuts if 0 < c < file.size], file.size})
        pieces = [Slice(file, a, b) for a, b in zip(bounds, bounds[1:])]
        joined = [row for piece in pieces for row in read_all([], ["text"], slices=[piece])[0]]
        assert joined == whole, (fmt, bounds)


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.zst", "parquet"])
def test_reading_from_any_resume_point_gives_the_rest(tmp_path, fmt):
    path = write_input(tmp_path, fmt, RECORDS)
    whole, batches = read_all([path], ["text"], batch_size=23)
    done = 0
    for batch in batches:
        done += len(extract(batch.payload, ["text"]).texts[0])
        rest = read_all([path], ["text"], batch_size=5, resume=batch.resume)[0]
        assert rest == whole[done:]


def test_inputs_keep_order_sort_globs_and_walk_directories(tmp_path):
    for name in ("b", "a", "c"):
        write_input(tmp_path, "jsonl", RECORDS[:2], name)
    (tmp_path / "sub").mkdir()
    write_input(tmp_path / "sub", "jsonl.gz", RECORDS[:2], "z")
    (tmp_path / "notes.txt").write_text("ignored")
    files = expand_inputs([str(tmp_path / "c.jsonl"), str(tmp_path / "[ab].jsonl"), str(tmp_path / "sub")])
    assert [Path(f.path).name for f in files] == ["c.jsonl", "a.jsonl", "b.jsonl", "z.jsonl.gz"]
    assert [f.format for f in expand_inputs([str(tmp_path)])] == ["jsonl", "jsonl", "jsonl", "jsonl.gz"]


@pytest.mark.parametrize("spec, message", [("missing.jsonl", "no such file"), ("notes.txt", "unsupported input format"),
                                           ("*.parquet", "matched no")])
def test_bad_input_specs_are_clear_errors(tmp_path, spec, message):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(InputError, match=message):
        expand_inputs([os.path.join(tmp_path, spec)])
