"""The ``.idx`` header's checks, one malformed header each: the error names the file and says exactly what is wrong
(the message and its parts), and a pair's path helpers."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from corpus.indexed.format import MAGIC, IndexFormatError, cast_tokens, exists, read_header, strip_suffix


def _header(version: int = 1, code: int = 8, sequences: int = 2, document_indices: int = 3) -> bytes:
    return MAGIC + struct.pack("<QBQQ", version, code, sequences, document_indices)


GOOD_SIZE = 34 + 12 * 2 + 8 * 3  # two sequences, two documents
TRUNCATED = "truncated: {} bytes, shorter than the 34-byte header"


@pytest.mark.parametrize("content, problem", [
    (b"", TRUNCATED.format(0)),
    (MAGIC[:4], TRUNCATED.format(4)),
    (MAGIC, TRUNCATED.format(9)),
    (MAGIC + b"\x01" * 10, TRUNCATED.format(19)),
    (b"XYZ", "wrong magic b'XYZ': not a Megatron MMIDIDX index file"),
    (b"NOTMAGIC!!" + bytes(40), "wrong magic b'NOTMAGIC!': not a Megatron MMIDIDX index file"),
    (_header(version=2) + bytes(48), "unsupported version 2 (only version 1 exists)"),
    (_header(version=2**63 + 1) + bytes(48), f"unsupported version {2**63 + 1} (only version 1 exists)"),
    (_header(code=9) + bytes(48), "unknown dtype code 9 (valid codes: 1-8)"),
    (_header(code=0) + bytes(48), "unknown dtype code 0 (valid codes: 1-8)"),
    (_header(sequences=0, document_indices=0), "document count field is 0; a valid index holds at least [0]"),
    (_header() + bytes(GOOD_SIZE - 34 - 2),
     f"truncated: header declares 2 sequences and 2 documents ({GOOD_SIZE} bytes) but the file has {GOOD_SIZE - 2} "
     "bytes"),
    (_header(sequences=2**63 + 5, document_indices=1),
     f"truncated: header declares {2**63 + 5} sequences and 0 documents ({34 + 12 * (2**63 + 5) + 8} bytes) but the "
     "file has 34 bytes"),
    (_header() + bytes(GOOD_SIZE - 34 + 3),
     f"3 trailing bytes after the document index (expected {GOOD_SIZE} bytes): multimodal or corrupt index"),
], ids=lambda value: value.split(":")[0][:30] if isinstance(value, str) else None)
def test_each_malformed_header_names_the_file_and_the_problem(tmp_path, content, problem):
    path = tmp_path / "x.idx"
    path.write_bytes(content)
    with pytest.raises(IndexFormatError) as failure:
        read_header(path)
    assert (failure.value.path, failure.value.problem, str(failure.value)) == (str(path), problem, f"{path}: {problem}")


def test_a_missing_or_unreadable_index_is_named_with_what_to_do(tmp_path):
    with pytest.raises(IndexFormatError) as missing:
        read_header(tmp_path / "none.idx")
    expected = "no such file (did `corpus tokenize` finish for this prefix?)"
    assert str(missing.value) == f"{tmp_path / 'none.idx'}: {expected}"
    (tmp_path / "folder.idx").mkdir()
    with pytest.raises(IndexFormatError) as unreadable:
        read_header(tmp_path / "folder.idx")
    assert str(unreadable.value) == f"{tmp_path / 'folder.idx'}: cannot read: Is a directory"


@pytest.mark.parametrize("sequences, document_indices, code, dtype", [(0, 1, 8, np.uint16), (2, 3, 4, np.int32)])
def test_the_smallest_and_a_plain_header_are_read(tmp_path, sequences, document_indices, code, dtype):
    path = tmp_path / "x.idx"
    path.write_bytes(_header(1, code, sequences, document_indices) + bytes(12 * sequences + 8 * document_indices))
    header = read_header(path)
    assert (header.dtype, header.num_sequences, header.num_document_indices) == (dtype, sequences, document_indices)


def test_tokens_already_in_the_dtype_are_the_same_array_not_a_copy():
    tokens = np.arange(10, dtype=np.uint16)
    assert np.shares_memory(cast_tokens(tokens, np.dtype(np.uint16)), tokens)


def test_a_prefix_is_a_pair_only_when_both_files_are_there(tmp_path):
    prefix = tmp_path / "p"
    assert [strip_suffix(f"{prefix}{suffix}") for suffix in (".idx", ".bin", "")] == [str(prefix)] * 3
    assert strip_suffix(f"{prefix}.json") == f"{prefix}.json"
    assert not exists(prefix)
    (tmp_path / "p.idx").write_bytes(b"")
    assert not exists(prefix)
    (tmp_path / "p.idx").unlink()
    (tmp_path / "p.bin").write_bytes(b"")
    assert not exists(prefix)
    (tmp_path / "p.idx").write_bytes(b"")
    assert exists(prefix)


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_ids_up_to_the_dtypes_largest_fit_and_one_more_is_refused_with_the_fix(dtype):
    largest = int(np.iinfo(dtype).max)
    assert cast_tokens(np.array([0, largest], dtype=np.int64), np.dtype(dtype)).tolist() == [0, largest]
    with pytest.raises(ValueError) as refused:
        cast_tokens(np.array([3, largest + 1], dtype=np.int64), np.dtype(dtype))
    assert str(refused.value) == (f"token id range [3, {largest + 1}] does not fit {np.dtype(dtype)}; the vocabulary "
                                  "needs int32 (token_dtype_for_vocab)")
