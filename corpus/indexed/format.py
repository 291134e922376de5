"""Byte layout of the Megatron-compatible ``.bin/.idx`` pair, its one error type and path helpers.

Byte layout (Megatron-LM ``MMIDIDX`` version 1, little-endian, no padding)::

    .idx  magic b"MMIDIDX\\x00\\x00" | u64 version=1 | u8 dtype code | u64 N sequences
          | u64 D = documents + 1 | int32 lengths[N] | int64 byte pointers[N] | int64 doc_index[D]
    .bin  the tokens of every sequence back to back, in the dataset dtype, no header

Document d is sequences ``[doc_index[d], doc_index[d + 1])``. A document that encoded to nothing
has no sequence (two equal consecutive doc indices), exactly as Megatron writes it.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus import storage
from corpus.indexed.errors import IndexFormatError
from corpus.storage import ObjectPath

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_SIZE = len(MAGIC) + 8 + 1 + 8 + 8  # 34 bytes

#: Megatron's dtype codes (``megatron.core.datasets.indexed_dataset.DType``).
DTYPE_BY_CODE: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float32),
    8: np.dtype(np.uint16),
}
CODE_BY_DTYPE: dict[np.dtype, int] = {dtype: code for code, dtype in DTYPE_BY_CODE.items()}

# Validation and index writing walk the arrays in chunks so memory stays bounded on huge files.
_CHUNK = 1 << 20


def token_dtype_for_vocab(vocab_size: int | None) -> np.dtype:
    """Megatron's rule for the token dtype: uint16 below 65,500 ids, else int32.

    Keeping the rule (not, say, "uint16 up to 65,536") is what lets our files interoperate.
    """
    if vocab_size is not None and vocab_size < 65500:
        return np.dtype(np.uint16)
    return np.dtype(np.int32)


def cast_tokens(tokens: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``tokens`` as ``dtype``, refusing ids it cannot hold (ValueError): checked only where the cast could
    lose them, and a view, not a copy, where only the sign differs and every id fits (the tokenizer's uint32
    ids written as Megatron's int32)."""
    dtype = np.dtype(dtype)
    if tokens.dtype == dtype or not tokens.size:
        return tokens.astype(dtype, copy=False)
    if dtype.kind in "iu" and not np.can_cast(tokens.dtype, dtype):
        limits = np.iinfo(dtype)
        low = 0 if tokens.dtype.kind == "u" else int(tokens.min())
        high = int(tokens.max())
        if low < limits.min or high > limits.max:
            raise ValueError(f"token id range [{low}, {high}] does not fit {dtype}; the vocabulary needs int32 "
                             "(token_dtype_for_vocab)")
    if tokens.dtype.kind in "iu" and dtype.kind in "iu" and tokens.dtype.itemsize == dtype.itemsize:
        return tokens.view(dtype)
    return tokens.astype(dtype)


def bin_path(prefix: str | os.PathLike) -> Path | ObjectPath:
    """The ``.bin`` path of a dataset prefix (an :class:`~corpus.storage.ObjectPath` for a URL)."""
    return storage.as_path(f"{prefix}.bin")


def idx_path(prefix: str | os.PathLike) -> Path | ObjectPath:
    """The ``.idx`` path of a dataset prefix (an :class:`~corpus.storage.ObjectPath` for a URL)."""
    return storage.as_path(f"{prefix}.idx")


def strip_suffix(path: str | os.PathLike) -> str:
    """Turn ``x.idx``, ``x.bin`` or ``x`` into the prefix ``x``."""
    text = str(path)
    for suffix in (".idx", ".bin"):
        if text.endswith(suffix):
            return text[: -len(suffix)]
    return text


def exists(prefix: str | os.PathLike) -> bool:
    """Whether both files of a pair exist."""
    return idx_path(prefix).is_file() and bin_path(prefix).is_file()


@dataclass(frozen=True)
class IndexHeader:
    """The fixed-size fields at the start of an ``.idx`` file."""

    dtype: np.dtype
    num_sequences: int
    num_document_indices: int

    @property
    def expected_idx_size(self) -> int:
        return HEADER_SIZE + 12 * self.num_sequences + 8 * self.num_document_indices


def read_header(path: str | os.PathLike | ObjectPath) -> IndexHeader:
    """Parse and sanity-check the 34-byte header of an ``.idx`` file, and its total size (a remote ``.idx`` is
    read from its node-local copy, :func:`corpus.storage.local_file`)."""
    path = storage.as_path(path)
    try:
        local = storage.local_file(path)
        size = local.stat().st_size
        with open(local, "rb") as handle:
            raw = handle.read(HEADER_SIZE)
    except FileNotFoundError:
        raise IndexFormatError(path, "no such file (did `corpus tokenize` finish for this prefix?)") from None
    except OSError as error:
        raise IndexFormatError(path, f"cannot read: {error.strerror}") from None
    if len(raw) < len(MAGIC) and raw == MAGIC[: len(raw)]:
        raise IndexFormatError(path, f"truncated: {size} bytes, shorter than the {HEADER_SIZE}-byte header")
    if raw[: len(MAGIC)] != MAGIC:
        raise IndexFormatError(path, f"wrong magic {raw[:9]!r}: not a Megatron MMIDIDX index file")
    if len(raw) < HEADER_SIZE:
        raise IndexFormatError(path, f"truncated: {size} bytes, shorter than the {HEADER_SIZE}-byte header")
    (version,) = struct.unpack_from("<Q", raw, 9)
    if version != VERSION:
        raise IndexFormatError(path, f"unsupported version {version} (only version {VERSION} exists)")
    code = raw[17]
    if code not in DTYPE_BY_CODE:
        raise IndexFormatError(path, f"unknown dtype code {code} (valid codes: 1-8)")
    num_sequences, num_document_indices = struct.unpack_from("<QQ", raw, 18)
    header = IndexHeader(DTYPE_BY_CODE[code], num_sequences, num_document_indices)
    if num_document_indices < 1:
        raise IndexFormatError(path, "document count field is 0; a valid index holds at least [0]")
    if size < header.expected_idx_size:
        raise IndexFormatError(
            path,
            f"truncated: header declares {num_sequences} sequences and {num_document_indices - 1} documents "
            f"({header.expected_idx_size} bytes) but the file has {size} bytes",
        )
    if size > header.expected_idx_size:
        raise IndexFormatError(
            path,
            f"{size - header.expected_idx_size} trailing bytes after the document index "
            f"(expected {header.expected_idx_size} bytes): multimodal or corrupt index",
        )
    return header


def index_arrays(idx_map: np.ndarray, header: IndexHeader) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Zero-copy views of the lengths, byte pointers and document indices inside a mapped ``.idx``.

    No value is checked: :class:`IndexedReader` validates them, ``corpus inspect --check`` reports
    every inconsistency in them instead of stopping at the first.
    """
    n = header.num_sequences
    lengths = idx_map[HEADER_SIZE : HEADER_SIZE + 4 * n].view(np.int32)
    pointers = idx_map[HEADER_SIZE + 4 * n : HEADER_SIZE + 12 * n].view(np.int64)
    documents = idx_map[HEADER_SIZE + 12 * n : header.expected_idx_size].view(np.int64)
    return lengths, pointers, documents
