"""The Megatron-compatible ``.bin/.idx`` token format: a validating memory-mapped reader and a
streaming writer.

Byte layout (Megatron-LM ``MMIDIDX`` version 1, little-endian, no padding)::

    .idx  magic b"MMIDIDX\\x00\\x00" | u64 version=1 | u8 dtype code | u64 N sequences
          | u64 D = documents + 1 | int32 lengths[N] | int64 byte pointers[N] | int64 doc_index[D]
    .bin  the tokens of every sequence back to back, in the dataset dtype, no header

Document d is sequences ``[doc_index[d], doc_index[d + 1])``. A document that encoded to nothing
has no sequence (two equal consecutive doc indices), exactly as Megatron writes it.

Every problem with a file is raised as :class:`IndexFormatError`, which names the file and what is
wrong, so a corrupt pair never surfaces as a numpy traceback or a silent wrong read.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from corpus import meta as sidecar
from corpus.errors import CorpusError

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


class IndexFormatError(CorpusError, ValueError):
    """A ``.bin/.idx`` pair is malformed or inconsistent.

    ``path`` is the offending file; the message says what is wrong and, where possible, how to fix it.
    """

    def __init__(self, path: str | os.PathLike, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


def token_dtype_for_vocab(vocab_size: int | None) -> np.dtype:
    """Megatron's rule for the token dtype: uint16 below 65,500 ids, else int32.

    Keeping the rule (not, say, "uint16 up to 65,536") is what lets our files interoperate.
    """
    if vocab_size is not None and vocab_size < 65500:
        return np.dtype(np.uint16)
    return np.dtype(np.int32)


def bin_path(prefix: str | os.PathLike) -> Path:
    """The ``.bin`` path of a dataset prefix."""
    return Path(f"{prefix}.bin")


def idx_path(prefix: str | os.PathLike) -> Path:
    """The ``.idx`` path of a dataset prefix."""
    return Path(f"{prefix}.idx")


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


def read_header(path: str | os.PathLike) -> IndexHeader:
    """Parse and sanity-check the 34-byte header of an ``.idx`` file, and its total size."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
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


class IndexedReader:
    """Memory-mapped, zero-copy read access to one ``.bin/.idx`` pair.

    ``sequence_lengths``, ``sequence_pointers`` and ``document_indices`` are views into the mapped
    index, never copies. ``validate="full"`` (the default) checks every pointer and document index
    once at open with chunked vectorised numpy; ``"header"`` only checks sizes and the ends of the
    arrays (for tools that open thousands of shards and validate elsewhere).
    """

    def __init__(self, prefix: str | os.PathLike, validate: str = "full") -> None:
        if validate not in ("full", "header"):
            raise ValueError(f"validate must be 'full' or 'header', not {validate!r}")
        self.prefix = strip_suffix(prefix)
        self.idx_file = idx_path(self.prefix)
        self.bin_file = bin_path(self.prefix)
        header = read_header(self.idx_file)
        self.dtype = header.dtype
        self._idx_map = np.memmap(self.idx_file, dtype=np.uint8, mode="r")
        self.sequence_lengths, self.sequence_pointers, self.document_indices = index_arrays(self._idx_map, header)
        self.num_tokens = self._check_ends()
        self._check_bin_size()
        if validate == "full":
            self.validate_arrays()
        if self.bin_file.stat().st_size:
            self._bin_map = np.memmap(self.bin_file, dtype=self.dtype, mode="r")
        else:  # numpy cannot map an empty file
            self._bin_map = np.empty(0, dtype=self.dtype)

    # -- validation ---------------------------------------------------------------------------

    def _check_ends(self) -> int:
        """Cheap O(1) checks of the array ends; returns the token count they imply."""
        docs, lengths, pointers = self.document_indices, self.sequence_lengths, self.sequence_pointers
        if docs[0] != 0:
            raise IndexFormatError(self.idx_file, f"document index starts at {docs[0]}, not 0")
        if docs[-1] != len(lengths):
            raise IndexFormatError(
                self.idx_file, f"document index ends at {docs[-1]}, not at the sequence count {len(lengths)}"
            )
        if len(lengths) == 0:
            return 0
        if pointers[0] != 0:
            raise IndexFormatError(self.idx_file, f"first sequence pointer is {pointers[0]}, not 0")
        last_end = int(pointers[-1]) + int(lengths[-1]) * self.dtype.itemsize
        if pointers[-1] < 0 or lengths[-1] < 0 or last_end % self.dtype.itemsize:
            raise IndexFormatError(self.idx_file, "last sequence pointer or length is negative or misaligned")
        return last_end // self.dtype.itemsize

    def _check_bin_size(self) -> None:
        try:
            size = self.bin_file.stat().st_size
        except FileNotFoundError:
            raise IndexFormatError(self.bin_file, "missing: the .idx exists but its .bin does not") from None
        expected = self.num_tokens * self.dtype.itemsize
        if size != expected:
            raise IndexFormatError(
                self.bin_file,
                f"size {size} bytes disagrees with the index ({self.num_tokens} tokens x "
                f"{self.dtype.itemsize} bytes = {expected}): truncated or mismatched pair",
            )

    def validate_arrays(self) -> None:
        """Check every length, pointer and document index (vectorised, in bounded-memory chunks).

        Raises :class:`IndexFormatError` at the first inconsistency, naming the sequence or document.
        """
        itemsize = self.dtype.itemsize
        lengths, pointers = self.sequence_lengths, self.sequence_pointers
        running = 0
        for start in range(0, len(lengths), _CHUNK):
            chunk = lengths[start : start + _CHUNK].astype(np.int64)
            if (chunk < 0).any():
                bad = start + int(np.argmax(chunk < 0))
                raise IndexFormatError(self.idx_file, f"sequence {bad} has negative length {lengths[bad]}")
            expected = running + np.concatenate(([0], np.cumsum(chunk[:-1] * itemsize)))
            mismatch = pointers[start : start + len(chunk)] != expected
            if mismatch.any():
                bad = start + int(np.argmax(mismatch))
                raise IndexFormatError(
                    self.idx_file,
                    f"sequence pointer {bad} is {pointers[bad]}, expected {expected[bad - start]} "
                    "(pointers must be the running sum of lengths x itemsize)",
                )
            running = int(expected[-1]) + int(chunk[-1]) * itemsize
        docs = self.document_indices
        for start in range(0, len(docs) - 1, _CHUNK):
            window = docs[start : start + _CHUNK + 1]
            decreasing = np.diff(window) < 0
            if decreasing.any():
                bad = start + int(np.argmax(decreasing))
                raise IndexFormatError(
                    self.idx_file,
                    f"document index is not monotonic at document {bad}: {docs[bad]} then {docs[bad + 1]}",
                )

    # -- access -------------------------------------------------------------------------------

    @property
    def num_sequences(self) -> int:
        return len(self.sequence_lengths)

    @property
    def num_documents(self) -> int:
        return len(self.document_indices) - 1

    @property
    def tokens(self) -> np.ndarray:
        """All tokens of the file as one flat memory-mapped array."""
        return self._bin_map

    def __len__(self) -> int:
        return self.num_sequences

    def __getitem__(self, index: int) -> np.ndarray:
        return self.get(index)

    def get(self, index: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Tokens of sequence ``index`` from ``offset`` (``length`` of them, default to the end), zero-copy."""
        if not -self.num_sequences <= index < self.num_sequences:
            raise IndexError(f"{self.prefix}: sequence {index} out of range (0..{self.num_sequences - 1})")
        index %= self.num_sequences
        size = int(self.sequence_lengths[index])
        if length is None:
            length = size - offset
        if offset < 0 or length < 0 or offset + length > size:
            raise IndexError(f"{self.prefix}: range [{offset}, {offset + length}) outside sequence {index} of {size} tokens")
        start = int(self.sequence_pointers[index]) // self.dtype.itemsize + offset
        tokens = self._bin_map[start : start + length]
        if len(tokens) != length:  # only reachable when opened with validate="header"
            raise IndexFormatError(self.bin_file, f"sequence {index} points past the end of the file")
        return tokens

    def document(self, index: int) -> list[np.ndarray]:
        """The sequences of document ``index`` (an empty list for a document that encoded to nothing)."""
        if not 0 <= index < self.num_documents:
            raise IndexError(f"{self.prefix}: document {index} out of range (0..{self.num_documents - 1})")
        first, last = int(self.document_indices[index]), int(self.document_indices[index + 1])
        return [self.get(i) for i in range(first, last)]

    def __iter__(self) -> Iterator[np.ndarray]:
        for index in range(self.num_sequences):
            yield self.get(index)

    @property
    def meta(self) -> dict | None:
        """The ``.meta.json`` sidecar, or None for files written by Megatron itself."""
        return sidecar.read(self.prefix)

    def close(self) -> None:
        """Drop the memory maps (views handed out earlier keep their own reference)."""
        self._idx_map = self._bin_map = None  # type: ignore[assignment]

    def __enter__(self) -> "IndexedReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sync(handle) -> None:
    handle.flush()
    os.fsync(handle.fileno())


def _reopen_at(path: Path, size: int):
    """Open a partial file of an interrupted writer for appending, cut back to its checkpointed ``size``
    (bytes written after the checkpoint are discarded and will be written again)."""
    try:
        handle = open(path, "r+b")
    except FileNotFoundError:
        raise IndexFormatError(path, "cannot resume: this partial file is missing; start again without --resume") from None
    actual = os.fstat(handle.fileno()).st_size
    if actual < size:
        handle.close()
        raise IndexFormatError(path, f"cannot resume: {actual} bytes, fewer than the {size} checkpointed; "
                                     "start again without --resume")
    handle.truncate(size)
    handle.seek(size)
    return handle


class _SpillBuffer:
    """A growable int array that spills to a file every ``_CHUNK`` values, so a writer of
    tens of millions of documents holds no per-document Python objects and bounded memory."""

    def __init__(self, path: Path, dtype: type, resume_count: int | None = None) -> None:
        self.path = path
        self.dtype = np.dtype(dtype)
        self._buffer = np.empty(_CHUNK, dtype=self.dtype)
        self._used = 0
        if resume_count is None:
            self.count, self._file = 0, open(path, "wb")
        else:
            self.count, self._file = resume_count, _reopen_at(path, resume_count * self.dtype.itemsize)

    def extend(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=self.dtype)
        while len(values):
            take = min(len(values), _CHUNK - self._used)
            self._buffer[self._used : self._used + take] = values[:take]
            self._used += take
            self.count += take
            values = values[take:]
            if self._used == _CHUNK:
                self.flush()

    def flush(self) -> None:
        self._file.write(self._buffer[: self._used].tobytes())
        self._used = 0

    def sync(self) -> None:
        """Write the buffered values and make the file durable (a checkpoint)."""
        self.flush()
        _sync(self._file)

    def chunks(self) -> Iterator[np.ndarray]:
        """Yield the stored values in order, chunk by chunk (after :meth:`close`)."""
        with open(self.path, "rb") as handle:
            while block := handle.read(_CHUNK * self.dtype.itemsize):
                yield np.frombuffer(block, dtype=self.dtype)

    def close(self) -> None:
        self.flush()
        self._file.close()


class IndexedWriter:
    """Streams documents into a ``.bin/.idx`` pair that is byte-identical to Megatron's builder output.

    Data goes to ``<prefix>.bin.partial`` and spill files; :meth:`finalize` writes the index and the
    sidecar under temporary names and renames them into place, ``.idx`` last, so a reader never sees
    a half-written pair. Use as a context manager: an exception inside aborts and removes the
    partial files.
    """

    def __init__(self, prefix: str | os.PathLike, dtype: np.dtype | type, resume: dict | None = None) -> None:
        """Start a new pair, or, with ``resume`` (a :meth:`checkpoint` result), continue the partial
        files of an interrupted writer exactly where that checkpoint was taken."""
        self.prefix = str(prefix)
        self.dtype = np.dtype(dtype)
        if self.dtype not in CODE_BY_DTYPE:
            raise ValueError(f"dtype {self.dtype} has no Megatron code; use one of {sorted(map(str, CODE_BY_DTYPE))}")
        Path(self.prefix).parent.mkdir(parents=True, exist_ok=True)
        self._partial_bin = Path(f"{self.prefix}.bin.partial")
        lengths, doc_ends = Path(f"{self.prefix}.lengths.partial"), Path(f"{self.prefix}.docs.partial")
        if resume is None:
            self._bin = open(self._partial_bin, "wb")
            self._lengths = _SpillBuffer(lengths, np.int32)
            self._doc_ends = _SpillBuffer(doc_ends, np.int64)
            self._doc_ends.extend(np.zeros(1, dtype=np.int64))
            self.num_tokens = 0
        else:
            self._bin = _reopen_at(self._partial_bin, resume["num_tokens"] * self.dtype.itemsize)
            self._lengths = _SpillBuffer(lengths, np.int32, resume_count=resume["num_sequences"])
            self._doc_ends = _SpillBuffer(doc_ends, np.int64, resume_count=resume["num_documents"] + 1)
            self.num_tokens = resume["num_tokens"]
        self._limits = np.iinfo(self.dtype) if self.dtype.kind in "iu" else None

    def checkpoint(self) -> dict:
        """Make everything written so far durable; the returned counts let ``IndexedWriter(prefix, dtype,
        resume=...)`` continue from exactly here after a crash (even ``kill -9``)."""
        _sync(self._bin)
        self._lengths.sync()
        self._doc_ends.sync()
        return {"num_tokens": self.num_tokens, "num_sequences": self.num_sequences,
                "num_documents": self.num_documents}

    @property
    def num_sequences(self) -> int:
        return self._lengths.count

    @property
    def num_documents(self) -> int:
        return self._doc_ends.count - 1

    def _write_tokens(self, tokens: np.ndarray) -> None:
        if self._limits is not None and tokens.size:
            low, high = int(tokens.min()), int(tokens.max())
            if low < self._limits.min or high > self._limits.max:
                raise ValueError(
                    f"{self.prefix}: token id range [{low}, {high}] does not fit {self.dtype}; "
                    "the vocabulary needs int32 (token_dtype_for_vocab)"
                )
        self._bin.write(np.ascontiguousarray(tokens, dtype=self.dtype).tobytes())
        self.num_tokens += tokens.size

    def add_sequence(self, tokens: Sequence[int] | np.ndarray) -> None:
        """Append one sequence to the current document (close it with :meth:`end_document`)."""
        array = np.asarray(tokens).reshape(-1)
        self._write_tokens(array)
        self._lengths.extend(np.array([array.size], dtype=np.int32))

    def end_document(self) -> None:
        """Close the current document (it may hold no sequence at all)."""
        self._doc_ends.extend(np.array([self._lengths.count], dtype=np.int64))

    def add_document(self, tokens: Sequence[int] | np.ndarray, lengths: Sequence[int] | None = None) -> None:
        """Append a whole document: one sequence, or several when ``lengths`` splits it (sentences).

        An empty document adds a document boundary and no sequence, as Megatron's preprocessing does.
        """
        array = np.asarray(tokens).reshape(-1)
        if lengths is None:
            lengths = [array.size] if array.size else []
        lengths = np.asarray(lengths, dtype=np.int64)
        if int(lengths.sum()) != array.size:
            raise ValueError(f"{self.prefix}: lengths sum to {int(lengths.sum())} but the document has {array.size} tokens")
        self._write_tokens(array)
        self._lengths.extend(lengths.astype(np.int32))
        self.end_document()

    def add_documents(self, tokens: np.ndarray, lengths: np.ndarray) -> None:
        """Append many single-sequence documents at once: ``tokens`` is their concatenation and
        ``lengths[i]`` the size of document i (0 = a document with no sequence). The fast path for
        the tokenize pipeline: no Python loop per document."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if int(lengths.sum()) != len(tokens):
            raise ValueError(f"{self.prefix}: lengths sum to {int(lengths.sum())} but {len(tokens)} tokens were given")
        self._write_tokens(np.asarray(tokens))
        nonempty = lengths[lengths > 0]
        first = self._lengths.count
        self._lengths.extend(nonempty.astype(np.int32))
        self._doc_ends.extend(first + np.cumsum(lengths > 0))

    def add_index(self, prefix: str | os.PathLike) -> None:
        """Append every document of an existing pair, streaming (``corpus merge`` uses this)."""
        with IndexedReader(prefix) as source:
            if source.dtype != self.dtype:
                raise IndexFormatError(source.idx_file, f"dtype {source.dtype} differs from the output's {self.dtype}")
            offset = self._lengths.count
            for start in range(0, source.num_sequences, _CHUNK):
                self._lengths.extend(source.sequence_lengths[start : start + _CHUNK])
            docs = source.document_indices
            for start in range(1, len(docs), _CHUNK):
                self._doc_ends.extend(offset + docs[start : start + _CHUNK])
            with open(source.bin_file, "rb") as handle:
                while block := handle.read(64 << 20):
                    self._bin.write(block)
            self.num_tokens += source.num_tokens

    def finalize(self, meta: dict | None = None) -> None:
        """Write the index and (when ``meta`` is given) the sidecar, then rename everything into place.

        ``meta`` holds what only the caller knows (tokenizer, inputs, options); counts and the dtype
        are filled in here. The old ``.idx`` is removed first and the new one renamed last, so a crash
        at any point leaves either no pair or a complete one.
        """
        self._bin.flush()
        os.fsync(self._bin.fileno())
        self._bin.close()
        self._lengths.close()
        self._doc_ends.close()
        partial_idx = Path(f"{self.prefix}.idx.partial")
        with open(partial_idx, "wb") as out:
            out.write(MAGIC)
            out.write(struct.pack("<QB", VERSION, CODE_BY_DTYPE[self.dtype]))
            out.write(struct.pack("<QQ", self._lengths.count, self._doc_ends.count))
            for chunk in self._lengths.chunks():
                out.write(chunk.tobytes())
            running = 0
            for chunk in self._lengths.chunks():
                sizes = chunk.astype(np.int64) * self.dtype.itemsize
                pointers = running + np.concatenate(([0], np.cumsum(sizes[:-1])))
                out.write(pointers.astype(np.int64).tobytes())
                running = int(pointers[-1] + sizes[-1])
            for chunk in self._doc_ends.chunks():
                out.write(chunk.tobytes())
            out.flush()
            os.fsync(out.fileno())
        idx_path(self.prefix).unlink(missing_ok=True)
        if meta is not None:
            sidecar.write(self.prefix, self._completed_meta(meta))
        os.replace(self._partial_bin, bin_path(self.prefix))
        os.replace(partial_idx, idx_path(self.prefix))
        self._lengths.path.unlink()
        self._doc_ends.path.unlink()

    def _completed_meta(self, meta: dict) -> dict:
        return {
            **meta,
            "dtype": str(self.dtype),
            "num_sequences": self.num_sequences,
            "num_documents": self.num_documents,
            "num_tokens": self.num_tokens,
        }

    def close(self) -> None:
        """Close the partial files, keeping them (an interrupted run that ``--resume`` will continue)."""
        for handle in (self._bin, self._lengths._file, self._doc_ends._file):
            handle.close()

    def abort(self) -> None:
        """Close and delete every partial file; nothing under the final names is touched."""
        self.close()
        for path in (self._partial_bin, self._lengths.path, self._doc_ends.path, Path(f"{self.prefix}.idx.partial")):
            path.unlink(missing_ok=True)

    def __enter__(self) -> "IndexedWriter":
        return self

    def __exit__(self, exc_type: type | None, *rest: object) -> None:
        if exc_type is not None:
            self.abort()


def finish_interrupted_finalize(prefix: str | os.PathLike) -> bool:
    """Complete a :meth:`IndexedWriter.finalize` that a crash cut short after the ``.bin`` was renamed
    into place (the ``.idx.partial`` was complete and synced by then) and return True; return False
    when the ``.bin.partial`` is still there, i.e. the writer must be resumed and finalized again."""
    if Path(f"{prefix}.bin.partial").exists():
        return False
    partial_idx = Path(f"{prefix}.idx.partial")
    if partial_idx.exists():
        os.replace(partial_idx, idx_path(prefix))
    for suffix in (".lengths.partial", ".docs.partial"):
        Path(f"{prefix}{suffix}").unlink(missing_ok=True)
    return True
