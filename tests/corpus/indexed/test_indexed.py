"""The .bin/.idx format: round trips, byte-identity with megatron-core, and corrupt files."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch

from corpus.indexed import (
    DTYPE_BY_CODE,
    HEADER_SIZE,
    IndexedReader,
    IndexedWriter,
    cast_tokens,
    sidecar,
    token_dtype_for_vocab,
)
from corpus.indexed.errors import IndexFormatError
from corpus.indexed.merge import merge
from corpus.indexed.partial_files import read_values
from tests.chunks import shrink_chunks
from tests.conftest import REPO


def random_documents(rng: np.random.Generator, dtype: np.dtype, count: int = 60) -> list[list[np.ndarray]]:
    """Documents of 0-3 sequences each, empty sequences-less documents included."""
    high = 120 if dtype.kind in "iu" and dtype.itemsize == 1 else 60000
    documents = []
    for _ in range(count):
        sequences = [rng.integers(0, high, size=rng.integers(1, 50)).astype(dtype) for _ in range(rng.integers(0, 4))]
        documents.append(sequences)
    return documents


def write_ours(prefix: Path, dtype: np.dtype, documents: list[list[np.ndarray]], meta: dict | None = None) -> None:
    with IndexedWriter(prefix, dtype) as writer:
        for sequences in documents:
            for sequence in sequences:
                writer.add_sequence(sequence)
            writer.end_document()
        writer.finalize(meta)


def write_megatron(indexed_dataset, prefix: Path, dtype: np.dtype, documents: list[list[np.ndarray]]) -> None:
    builder = indexed_dataset.IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype.type)
    for sequences in documents:
        for sequence in sequences:
            builder.add_item(torch.from_numpy(sequence.astype(np.int64)))
        builder.end_document()
    builder.finalize(f"{prefix}.idx")


@pytest.mark.parametrize("code", sorted(DTYPE_BY_CODE))
def test_round_trip_every_dtype(tmp_path: Path, code: int) -> None:
    dtype = DTYPE_BY_CODE[code]
    documents = random_documents(np.random.default_rng(code), dtype)
    write_ours(tmp_path / "d", dtype, documents)
    reader = IndexedReader(tmp_path / "d")
    assert reader.dtype == dtype
    assert reader.num_documents == len(documents)
    flat = [s for doc in documents for s in doc]
    assert reader.num_sequences == len(flat)
    assert reader.num_tokens == sum(len(s) for s in flat)
    for d, sequences in enumerate(documents):
        got = reader.document(d)
        assert len(got) == len(sequences)
        for a, b in zip(got, sequences):
            np.testing.assert_array_equal(a, b)
    sequence = next(i for i, s in enumerate(flat) if len(s) > 4)
    np.testing.assert_array_equal(reader.get(sequence, offset=2, length=2), flat[sequence][2:4])


def test_views_are_zero_copy(tmp_path: Path) -> None:
    """What the reader hands out are views of the mapped files: a change to the files' bytes (made through another
    mapping) shows in arrays taken before it, which a copy would not."""
    write_ours(tmp_path / "d", np.dtype(np.uint16), [[np.arange(10, dtype=np.uint16)], [np.arange(3, dtype=np.uint16)]])
    reader = IndexedReader(tmp_path / "d")
    tokens, lengths, documents = reader.get(0, offset=2, length=5), reader.sequence_lengths, reader.document_indices
    assert tokens.tolist() == [2, 3, 4, 5, 6] and lengths.tolist() == [10, 3] and documents.tolist() == [0, 1, 2]
    bin_file = np.memmap(tmp_path / "d.bin", dtype=np.uint16, mode="r+")
    bin_file[3] = 999
    bin_file.flush()
    idx_file = np.memmap(tmp_path / "d.idx", dtype=np.uint8, mode="r+")
    idx_file[34:38] = np.frombuffer(np.int32(77).tobytes(), np.uint8)  # the first sequence length (see DESIGN §2)
    doc_start = 34 + 12 * 2 + 8  # the second document index
    idx_file[doc_start : doc_start + 8] = np.frombuffer(np.int64(5).tobytes(), np.uint8)
    idx_file.flush()
    assert tokens.tolist() == [2, 999, 4, 5, 6] and lengths.tolist() == [77, 3] and documents.tolist() == [0, 5, 2]


def test_empty_dataset(tmp_path: Path) -> None:
    write_ours(tmp_path / "e", np.dtype(np.uint16), [[], []])
    reader = IndexedReader(tmp_path / "e")
    assert (reader.num_sequences, reader.num_documents, reader.num_tokens) == (0, 2, 0)
    assert reader.document(1) == []


def test_add_documents_batch_equals_one_by_one(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 1000, size=n).astype(np.uint16) for n in [3, 0, 5, 0, 0, 7, 1]]
    with IndexedWriter(tmp_path / "batch", np.uint16) as writer:
        writer.add_documents(np.concatenate(docs), np.array([len(d) for d in docs]))
        writer.finalize()
    with IndexedWriter(tmp_path / "single", np.uint16) as writer:
        for doc in docs:
            writer.add_document(doc)
        writer.finalize()
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"batch{suffix}").read_bytes() == (tmp_path / f"single{suffix}").read_bytes()


def test_token_dtype_rule() -> None:
    assert token_dtype_for_vocab(65499) == np.uint16
    assert token_dtype_for_vocab(65500) == np.int32
    assert token_dtype_for_vocab(None) == np.int32


def test_cast_tokens_views_when_only_the_sign_differs_and_refuses_what_does_not_fit() -> None:
    flat = np.array([11, 12, 13, 14, 15, 16, 17, 18, 19], dtype=np.uint32)
    as_int32 = cast_tokens(flat, np.dtype(np.int32))
    assert as_int32.dtype == np.int32 and np.shares_memory(as_int32, flat) and as_int32.tolist() == flat.tolist()
    assert cast_tokens(flat, np.dtype(np.uint16)).tolist() == flat.tolist()
    with pytest.raises(ValueError, match=r"\[0, 70000\] does not fit uint16"):
        cast_tokens(np.array([0, 70000], dtype=np.uint32), np.dtype(np.uint16))
    with pytest.raises(ValueError, match=r"\[-1, 5\] does not fit uint16"):
        cast_tokens(np.array([-1, 5], dtype=np.int64), np.dtype(np.uint16))
    with pytest.raises(ValueError, match="does not fit int32"):
        cast_tokens(np.array([1 << 31], dtype=np.uint32), np.dtype(np.int32))


def test_ids_that_do_not_fit_the_dtype_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not fit uint16"):
        with IndexedWriter(tmp_path / "x", np.uint16) as writer:
            writer.add_document([1, 70000])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.int64, np.uint8])
def test_byte_identical_to_megatron_and_readable_both_ways(tmp_path: Path, megatron_indexed, dtype) -> None:
    dtype = np.dtype(dtype)
    documents = random_documents(np.random.default_rng(7), dtype, count=200)
    write_ours(tmp_path / "ours", dtype, documents)
    write_megatron(megatron_indexed, tmp_path / "theirs", dtype, documents)
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"ours{suffix}").read_bytes() == (tmp_path / f"theirs{suffix}").read_bytes()

    theirs_read_ours = megatron_indexed.IndexedDataset(str(tmp_path / "ours"))
    ours_read_theirs = IndexedReader(tmp_path / "theirs")
    np.testing.assert_array_equal(theirs_read_ours.document_indices, ours_read_theirs.document_indices)
    flat = [s for doc in documents for s in doc]
    for i, sequence in enumerate(flat):
        np.testing.assert_array_equal(theirs_read_ours[i], sequence)
        np.testing.assert_array_equal(ours_read_theirs[i], sequence)


def test_megatron_merge_equals_ours(tmp_path: Path, megatron_indexed) -> None:
    from corpus.indexed.merge import merge

    dtype = np.dtype(np.uint16)
    shards = [random_documents(np.random.default_rng(s), dtype, count=30) for s in range(3)]
    for i, documents in enumerate(shards):
        write_ours(tmp_path / f"shard{i}", dtype, documents)
    merge([str(tmp_path / f"shard{i}") for i in range(3)], str(tmp_path / "ours"))
    builder = megatron_indexed.IndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=np.uint16)
    for i in range(3):
        builder.add_index(str(tmp_path / f"shard{i}"))
    builder.finalize(str(tmp_path / "theirs.idx"))
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"ours{suffix}").read_bytes() == (tmp_path / f"theirs{suffix}").read_bytes()


# -- corrupt and truncated files -------------------------------------------------------------


@pytest.fixture()
def good_pair(tmp_path: Path) -> Path:
    documents = random_documents(np.random.default_rng(3), np.dtype(np.uint16), count=40)
    write_ours(tmp_path / "good", np.dtype(np.uint16), documents)
    return tmp_path / "good"


def rewrite(prefix: Path, suffix: str, data: bytes) -> None:
    Path(f"{prefix}{suffix}").write_bytes(data)


def expect_format_error(prefix: Path, match: str | None = None) -> IndexFormatError:
    with pytest.raises(IndexFormatError, match=match) as info:
        reader = IndexedReader(prefix)
        for i in range(len(reader)):
            reader[i]
    assert str(prefix) in info.value.path
    return info.value


def test_wrong_magic(good_pair: Path) -> None:
    data = bytearray(Path(f"{good_pair}.idx").read_bytes())
    data[0:4] = b"JUNK"
    rewrite(good_pair, ".idx", bytes(data))
    expect_format_error(good_pair, "wrong magic")


def test_unsupported_version(good_pair: Path) -> None:
    data = bytearray(Path(f"{good_pair}.idx").read_bytes())
    data[9:17] = struct.pack("<Q", 2)
    rewrite(good_pair, ".idx", bytes(data))
    expect_format_error(good_pair, "unsupported version 2")


def test_bin_size_disagrees(good_pair: Path) -> None:
    data = Path(f"{good_pair}.bin").read_bytes()
    rewrite(good_pair, ".bin", data[:-2])
    expect_format_error(good_pair, "disagrees with the index")
    rewrite(good_pair, ".bin", data + b"\0\0")
    expect_format_error(good_pair, "disagrees with the index")


def test_missing_bin(good_pair: Path) -> None:
    Path(f"{good_pair}.bin").unlink()
    expect_format_error(good_pair, "missing")




def plant_int64(prefix: Path, array_offset: Callable[[int], int], index: int, value: int) -> None:
    """Overwrite element ``index`` of an int64 array of the ``.idx`` (at ``array_offset(N)``) with ``value``."""
    n = IndexedReader(prefix).num_sequences
    data = bytearray(Path(f"{prefix}.idx").read_bytes())
    offset = array_offset(n) + 8 * index
    data[offset : offset + 8] = struct.pack("<q", value)
    rewrite(prefix, ".idx", bytes(data))


def test_non_monotonic_pointers(good_pair: Path) -> None:
    plant_int64(good_pair, lambda n: HEADER_SIZE + 4 * n, 5, 2)
    expect_format_error(good_pair, "sequence pointer 5")


def test_non_monotonic_document_index(good_pair: Path) -> None:
    plant_int64(good_pair, lambda n: HEADER_SIZE + 12 * n, 10, IndexedReader(good_pair).num_sequences - 1)
    expect_format_error(good_pair, "not monotonic")


def test_cut_at_every_region_boundary(good_pair: Path) -> None:
    data = Path(f"{good_pair}.idx").read_bytes()
    n = IndexedReader(good_pair).num_sequences
    boundaries = {0, 4, 9, 17, 18, 26, HEADER_SIZE, HEADER_SIZE + 4 * n, HEADER_SIZE + 12 * n, len(data) - 1}
    for cut in sorted(boundaries):
        for delta in (-1, 0, 1):
            size = cut + delta
            if 0 <= size < len(data):
                rewrite(good_pair, ".idx", data[:size])
                expect_format_error(good_pair)


def test_fuzz_never_crashes_or_hangs(good_pair: Path) -> None:
    """Random garbage of many sizes and random byte flips: the documented error or a valid read."""
    original = Path(f"{good_pair}.idx").read_bytes()
    rng = np.random.default_rng(1234)
    for trial in range(400):
        if trial % 2:
            data = bytes(rng.integers(0, 256, size=int(rng.integers(0, 400)), dtype=np.uint8))
            if trial % 4 == 1:
                data = original[:9] + data  # right magic, garbage after
        else:
            flipped = bytearray(original)
            for _ in range(int(rng.integers(1, 6))):
                flipped[int(rng.integers(0, len(flipped)))] ^= 1 << int(rng.integers(0, 8))
            data = bytes(flipped)
        rewrite(good_pair, ".idx", data)
        try:
            reader = IndexedReader(good_pair)
            for i in range(len(reader)):
                reader[i]
        except IndexFormatError:
            pass


def test_interrupted_write_leaves_no_pair(tmp_path: Path) -> None:
    """A writer killed mid-run leaves only .partial files; an older complete pair stays readable."""
    write_ours(tmp_path / "x", np.dtype(np.uint16), [[np.arange(5, dtype=np.uint16)]])
    script = textwrap.dedent(f"""
        import os, numpy as np
        from corpus.indexed import IndexedWriter
        w = IndexedWriter({str(tmp_path / 'x')!r}, np.uint16)
        for i in range(1000):
            w.add_document(np.arange(i % 50, dtype=np.uint16))
        os._exit(9)  # dies before finalize
    """)
    subprocess.run([sys.executable, "-c", script], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    reader = IndexedReader(tmp_path / "x")
    assert reader.num_documents == 1
    assert any(p.name.endswith(".partial") for p in tmp_path.iterdir())


def test_sidecar_written_with_counts(tmp_path: Path) -> None:
    with IndexedWriter(tmp_path / "m", np.uint16) as writer:
        writer.add_document([1, 2, 3])
        writer.add_document([])
        writer.finalize({"tokenizer": {"type": "NullTokenizer", "fingerprint": None, "options": {}}, "vocab_size": 10})
    meta = IndexedReader(tmp_path / "m").meta
    assert meta["num_documents"] == 2 and meta["num_sequences"] == 1 and meta["num_tokens"] == 3
    assert meta["dtype"] == "uint16" and meta["vocab_size"] == 10 and meta["tool"] == "blendforge"


@pytest.mark.slow
def test_fifty_million_documents_bounded_memory(tmp_path: Path) -> None:
    """50M one-token documents written in batches: peak RSS stays far below a Python-list writer's."""
    script = textwrap.dedent(f"""
        import resource, numpy as np
        from corpus.indexed import IndexedWriter, IndexedReader
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with IndexedWriter({str(tmp_path / 'big')!r}, np.uint16) as w:
            batch = np.ones(1_000_000, dtype=np.uint16)
            lengths = np.ones(1_000_000, dtype=np.int64)
            for _ in range(50):
                w.add_documents(batch, lengths)
            w.finalize()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print((peak - before) // 1024)
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)
    growth_mb = int(result.stdout.split()[-1])
    assert growth_mb < 200, f"writer grew RSS by {growth_mb} MB for 50M documents"
    reader = IndexedReader(tmp_path / "big")
    assert reader.num_documents == 50_000_000


# -- chunk boundaries -------------------------------------------------------------------------------


def _pair_files(prefix: Path) -> tuple[bytes, bytes, dict]:
    """Both files' bytes and the sidecar (its counts, the empty documents and whether each is one sequence) but
    for the inputs' folder."""
    meta = {key: value for key, value in sidecar.read(prefix).items() if key != "merged_from"}
    return Path(f"{prefix}.bin").read_bytes(), Path(f"{prefix}.idx").read_bytes(), meta


def test_writing_and_merging_in_chunks_of_seven_give_the_same_files(tmp_path: Path, monkeypatch) -> None:
    """The writer's spill buffers, its index writing and merge's streaming of another pair's arrays, each
    walking 7 values at a time over files of ~40 documents: the bytes and counts of one chunk."""
    dtype = np.dtype(np.uint16)
    shards = [random_documents(np.random.default_rng(n), dtype, count=40) for n in range(3)]

    def write_all(folder: Path) -> list[tuple[bytes, bytes, dict]]:
        for number, documents in enumerate(shards):
            write_ours(folder / f"shard{number}", dtype, documents, {})
        merge([str(folder / f"shard{number}") for number in range(3)], str(folder / "merged"))
        return [_pair_files(folder / name) for name in ("shard0", "shard1", "shard2", "merged")]

    whole = write_all(tmp_path / "whole")
    assert "corpus.indexed.partial_files._CHUNK" in shrink_chunks(monkeypatch, 7)
    assert write_all(tmp_path / "chunked") == whole


@pytest.mark.parametrize("chunk", [7, None])
def test_validation_in_chunks_names_each_defect_where_it_is(good_pair: Path, monkeypatch, chunk) -> None:
    """Pointers carried from one chunk to the next: a valid file passes, and a defect at a chunk's first or last
    value, or inside one, is named at its own index (40 documents, chunks of 7)."""
    if chunk:
        shrink_chunks(monkeypatch, chunk)
    IndexedReader(good_pair).validate_arrays()
    n = IndexedReader(good_pair).num_sequences
    original = Path(f"{good_pair}.idx").read_bytes()
    for sequence in (7, 13, 14, 20):
        plant_int64(good_pair, lambda n: HEADER_SIZE + 4 * n, sequence, 10**9)
        expect_format_error(good_pair, f"sequence pointer {sequence} is 1000000000")
        rewrite(good_pair, ".idx", original)
        data = bytearray(original)
        data[HEADER_SIZE + 4 * sequence : HEADER_SIZE + 4 * sequence + 4] = struct.pack("<i", -1)
        rewrite(good_pair, ".idx", bytes(data))
        expect_format_error(good_pair, f"sequence {sequence} has negative length")
        rewrite(good_pair, ".idx", original)
    documents = len(IndexedReader(good_pair).document_indices) - 1
    for document in (7, 13, 14):
        before = IndexedReader(good_pair).document_indices[document]
        plant_int64(good_pair, lambda n: HEADER_SIZE + 12 * n, document + 1, before - 1)
        expect_format_error(good_pair, f"not monotonic at document {document}:")
        rewrite(good_pair, ".idx", original)
    assert n > 21 and documents > 14


def test_spilled_values_read_back_in_chunks_and_a_short_file_is_named(tmp_path: Path, monkeypatch) -> None:
    shrink_chunks(monkeypatch, 7)
    values = np.arange(40, dtype=np.int64) * 3
    path = tmp_path / "docs.partial"
    path.write_bytes(values.tobytes())
    chunks = list(read_values(path, np.int64, 30, skip=3))
    assert [len(chunk) for chunk in chunks] == [7, 7, 7, 7, 2]
    np.testing.assert_array_equal(np.concatenate(chunks), values[3:33])
    with pytest.raises(IndexFormatError, match="ends 5 values early"):
        list(read_values(path, np.int64, 42, skip=3))
