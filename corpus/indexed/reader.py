"""The validating, memory-mapped, zero-copy reader of one ``.bin/.idx`` pair."""

from __future__ import annotations

import os
from typing import Iterator

import numpy as np

from corpus import storage
from corpus.indexed import sidecar
from corpus.indexed.errors import IndexFormatError, SidecarError
from corpus.indexed.format import _CHUNK, bin_path, idx_path, index_arrays, read_header, strip_suffix


class IndexedReader:
    """Memory-mapped, zero-copy read access to one ``.bin/.idx`` pair, local or remote.

    ``sequence_lengths``, ``sequence_pointers`` and ``document_indices`` are views into the mapped
    index, never copies. ``validate="full"`` (the default) checks every pointer and document index
    once at open with chunked vectorised numpy; ``"header"`` only checks sizes and the ends of the
    arrays (for tools that open thousands of shards and validate elsewhere).

    A remote pair (``s3://…``) maps the node-local copy of its ``.idx`` and reads its ``.bin`` through the chunk
    cache (:class:`~corpus.storage.ChunkedArray`): the same arrays and views, fetched on first use.
    """

    def __init__(self, prefix: str | os.PathLike, validate: str = "full") -> None:
        if validate not in ("full", "header"):
            raise ValueError(f"validate must be 'full' or 'header', not {validate!r}")
        self.prefix = strip_suffix(prefix)
        self.idx_file = idx_path(self.prefix)
        self.bin_file = bin_path(self.prefix)
        header = read_header(self.idx_file)
        self.dtype = header.dtype
        # A plain array over the map: np.memmap's __getitem__ is a Python call per length or pointer read.
        self._idx_map = np.memmap(storage.local_file(self.idx_file), dtype=np.uint8, mode="r").view(np.ndarray)
        self.sequence_lengths, self.sequence_pointers, self.document_indices = index_arrays(self._idx_map, header)
        self.num_tokens = self._check_ends()
        self._check_bin_size()
        if validate == "full":
            self.validate_arrays()
        self._bin_map = storage.map_array(self.bin_file, self.dtype)

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
        except FileNotFoundError:  # storage.ObjectNotFound for an object
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
        docs, single = self.document_indices, self._one_sequence_per_document()
        for start in range(0, len(docs) - 1, _CHUNK):
            steps = np.diff(docs[start : start + _CHUNK + 1])
            if (steps < 0).any():
                bad = start + int(np.argmax(steps < 0))
                raise IndexFormatError(
                    self.idx_file,
                    f"document index is not monotonic at document {bad}: {docs[bad]} then {docs[bad + 1]}",
                )
            if single and (steps > 1).any():
                bad = start + int(np.argmax(steps > 1))
                raise IndexFormatError(
                    self.idx_file, f"document {bad} holds sequences {docs[bad]} to {docs[bad + 1] - 1}, but the "
                    "sidecar says every document is one sequence: the document index was changed (corpus inspect "
                    "--check lists every problem)")

    def _one_sequence_per_document(self) -> bool:
        """Whether the sidecar says so (what lets validation insist the document index is 0..N with repeats
        for empty documents); a missing or unreadable sidecar says nothing."""
        try:
            meta = sidecar.parse(self.prefix)
        except SidecarError:
            return False
        return meta is not None and meta.get("one_sequence_per_document") is True

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
            raise IndexError(f"{self.prefix}: range [{offset}, {offset + length}) outside sequence {index} of {size} "
                             "tokens")
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
