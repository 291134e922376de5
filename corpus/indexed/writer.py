"""The streaming, resumable, atomic writer of ``.bin/.idx`` pairs (byte-identical to Megatron's builder).

Every file system error is raised as :class:`~corpus.core.disk.OutputError` naming the file (a full disk, a
read-only folder), and the sidecar records what ``corpus inspect --check`` needs beyond the index itself: the
sha256 of both files, the empty-document count and whether every document is one sequence.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from corpus import storage
from corpus.core.disk import guard
from corpus.indexed import sidecar
from corpus.indexed.append import Appender, BlockDigest, digest_of
from corpus.indexed.errors import IndexFormatError
from corpus.indexed.format import _CHUNK, CODE_BY_DTYPE, HEADER_SIZE, MAGIC, VERSION, bin_path, cast_tokens, idx_path
from corpus.indexed.handover import Crc32, crc32_of, file_crc32
from corpus.indexed.partial_files import (
    NoSyncBehind,
    SpillBuffer,
    SyncBehind,
    close_quietly,
    read_values,
    reopen_at,
    sync,
)
from corpus.indexed.reader import IndexedReader


class IndexedWriter:
    """Streams documents into a ``.bin/.idx`` pair that is byte-identical to Megatron's builder output.

    Data goes to ``<prefix>.bin.partial`` and spill files; :meth:`finalize` writes the index and the
    sidecar under temporary names and renames them into place, ``.idx`` last, so a reader never sees
    a half-written pair. Use as a context manager: an exception inside aborts and removes the
    partial files.
    """

    def __init__(self, prefix: str | os.PathLike, dtype: np.dtype | type, resume: dict | None = None,
                 handed_over: bool = False) -> None:
        """Start a new pair, or, with ``resume`` (a :meth:`checkpoint` result), continue the partial
        files of an interrupted writer exactly where that checkpoint was taken. ``handed_over`` for files that are
        joined into another writer's and deleted (:meth:`written`): nothing is written to disk ahead of need, and the
        ``.bin`` is checksummed by crc32 (:mod:`corpus.indexed.handover`), not by the tree sha256 that a finalized
        pair records."""
        self.prefix = str(prefix)
        self.dtype = np.dtype(dtype)
        if self.dtype not in CODE_BY_DTYPE:
            raise ValueError(f"dtype {self.dtype} has no Megatron code; use one of {sorted(map(str, CODE_BY_DTYPE))}")
        self._partial_bin = Path(f"{self.prefix}.bin.partial")
        lengths, doc_ends = Path(f"{self.prefix}.lengths.partial"), Path(f"{self.prefix}.docs.partial")
        with guard(self._partial_bin):
            Path(self.prefix).parent.mkdir(parents=True, exist_ok=True)
            if resume is None:
                self._bin = open(self._partial_bin, "w+b")  # read back when appending
                self._digest = Crc32() if handed_over else BlockDigest()
            else:
                size = resume["num_tokens"] * self.dtype.itemsize
                self._bin = reopen_at(self._partial_bin, size)
                self._digest = (crc32_of if handed_over else digest_of)(self._bin.fileno(), size)
        self.handed_over = handed_over
        self._appender: Appender | None = None
        """Copies files into the ``.bin`` (:meth:`append_written`, :meth:`add_index`), in threads."""
        self._sync_behind = NoSyncBehind() if handed_over else SyncBehind(self._bin)
        if resume is None:
            self._lengths = SpillBuffer(lengths, np.int32)
            self._doc_ends = SpillBuffer(doc_ends, np.int64)
            self._doc_ends.extend(np.zeros(1, dtype=np.int64))
            self.num_tokens = 0
        else:
            self._lengths = SpillBuffer(lengths, np.int32, resume_count=resume["num_sequences"])
            self._doc_ends = SpillBuffer(doc_ends, np.int64, resume_count=resume["num_documents"] + 1)
            self.num_tokens = resume["num_tokens"]

    def checkpoint(self) -> dict:
        """Make everything written so far durable; the returned counts let ``IndexedWriter(prefix, dtype,
        resume=...)`` continue from exactly here after a crash (even ``kill -9``)."""
        with guard(self._partial_bin):
            if self._appender:
                self._appender.wait()
            sync(self._bin)
        self._lengths.sync()
        self._doc_ends.sync()
        return self.counts()

    def counts(self) -> dict:
        """Tokens, sequences and documents written so far (what :meth:`checkpoint` records)."""
        return {"num_tokens": self.num_tokens, "num_sequences": self.num_sequences,
                "num_documents": self.num_documents}

    def written(self) -> dict:
        """Hand the partial files over as they are, for another writer's :meth:`append_written` (a writer made with
        ``handed_over``): everything flushed to the files (not synced), closed, with the counts and the crc32 of each
        file."""
        with guard(self._partial_bin):
            self._bin.flush()
        self._lengths.flush()
        self._doc_ends.flush()
        self.close()
        digests = {"bin": self._digest.hexdigest(), "lengths": file_crc32(self._lengths.path),
                   "docs": file_crc32(self._doc_ends.path)}
        return {**self.counts(), "crc32": digests}

    @property
    def num_sequences(self) -> int:
        return self._lengths.count

    @property
    def num_documents(self) -> int:
        return self._doc_ends.count - 1

    def _write_tokens(self, tokens: np.ndarray) -> None:
        try:
            data = np.ascontiguousarray(cast_tokens(tokens, self.dtype))
        except ValueError as error:
            raise ValueError(f"{self.prefix}: {error}") from None
        self._finish_appends()
        with guard(self._partial_bin):
            self._bin.write(data)  # the array's own buffer: no bytes copy of it
        self._sync_behind.wrote(data.nbytes)
        self._digest.update(data)
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
            raise ValueError(f"{self.prefix}: lengths sum to {int(lengths.sum())} but the document has {array.size} "
                             "tokens")
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
            if storage.is_remote(source.bin_file):
                with storage.open_binary(source.bin_file) as handle:
                    while block := handle.read(64 << 20):
                        self._finish_appends()
                        with guard(self._partial_bin):
                            self._bin.write(block)
                        self._sync_behind.wrote(len(block))
                        self._digest.update(block)
            else:
                self._append_bin(source.bin_file, source.num_tokens * self.dtype.itemsize)
            self.num_tokens += source.num_tokens

    def append_written(self, prefix: str | os.PathLike, written: dict) -> None:
        """Append the documents another writer handed over with :meth:`written` under ``prefix`` (a part of a
        tokenize run): its tokens copied by the kernel, its lengths as they are, its document index shifted."""
        offset = self._lengths.count
        self._append_bin(f"{prefix}.bin.partial", written["num_tokens"] * self.dtype.itemsize)
        self.num_tokens += written["num_tokens"]
        for chunk in read_values(Path(f"{prefix}.lengths.partial"), np.int32, written["num_sequences"]):
            self._lengths.extend(chunk)
        for chunk in read_values(Path(f"{prefix}.docs.partial"), np.int64, written["num_documents"], skip=1):
            self._doc_ends.extend(offset + chunk)

    def _append_bin(self, path: str | os.PathLike, size: int) -> None:
        """Append ``size`` bytes of the file ``path`` to the ``.bin``: copied and hashed in threads, as the file
        :class:`~corpus.indexed.append.Appender` says (waited for at a checkpoint and when finalizing)."""
        with guard(self._partial_bin):
            if self._appender is None:
                self._bin.flush()
                self._appender = Appender(self._bin.fileno(), self._bin.tell(), self._digest)
            self._appender.append(path, size)
        self._sync_behind.wrote(size)

    def _finish_appends(self) -> None:
        """Wait for the copies and hashes under way before bytes are written here directly or the file ends."""
        if self._appender is not None:
            with guard(self._partial_bin):
                self._appender.finish()
                self._bin.seek(self._appender.end)  # the buffered file learns where the copies ended
            self._appender = None

    def finalize(self, meta: dict | None = None) -> None:
        """Write the index and (when ``meta`` is given) the sidecar, then rename everything into place.

        ``meta`` holds what only the caller knows (tokenizer, inputs, options); counts, the dtype, the document
        facts and the checksums are filled in here. The old ``.idx`` is removed first and the new one renamed
        last, so a crash at any point leaves either no pair or a complete one.
        """
        if self.handed_over:
            raise RuntimeError(f"{self.prefix}: a writer made to hand its files over has no tree checksum to record; "
                               "its files are joined into another writer's, which is finalized")
        self._finish_appends()
        self._sync_behind.stop()
        with guard(self._partial_bin):
            sync(self._bin)
            self._bin.close()
        self._lengths.close()
        self._doc_ends.close()
        partial_idx = Path(f"{self.prefix}.idx.partial")
        index_bytes = HEADER_SIZE + 12 * self._lengths.count + 8 * self._doc_ends.count
        with guard(partial_idx, needed=index_bytes):
            with open(partial_idx, "wb") as out:
                facts = self._write_index(out)
                out.flush()
                os.fsync(out.fileno())
            idx_path(self.prefix).unlink(missing_ok=True)
        if meta is not None:
            sidecar.write(self.prefix, self._completed_meta(meta, facts))
        with guard(bin_path(self.prefix)):
            os.replace(self._partial_bin, bin_path(self.prefix))
            os.replace(partial_idx, idx_path(self.prefix))
            self._lengths.path.unlink()
            self._doc_ends.path.unlink()

    def _write_index(self, out) -> dict:
        """Write the ``.idx`` bytes to ``out``; returns the facts the sidecar records about them."""
        idx_digest = BlockDigest()

        def emit(data: bytes) -> None:
            out.write(data)
            idx_digest.update(data)

        emit(MAGIC)
        emit(struct.pack("<QB", VERSION, CODE_BY_DTYPE[self.dtype]))
        emit(struct.pack("<QQ", self._lengths.count, self._doc_ends.count))
        for chunk in self._lengths.chunks():
            emit(chunk.tobytes())
        running = 0
        for chunk in self._lengths.chunks():
            sizes = chunk.astype(np.int64) * self.dtype.itemsize
            pointers = running + np.concatenate(([0], np.cumsum(sizes[:-1])))
            emit(pointers.astype(np.int64).tobytes())
            running = int(pointers[-1] + sizes[-1])
        empty, widest = _document_facts(self._doc_ends.chunks(), emit)
        return {"num_empty_documents": empty, "one_sequence_per_document": widest <= 1,
                "checksums": {"bin_sha256_tree": self._digest.hexdigest(), "idx_sha256_tree": idx_digest.hexdigest()}}

    def _completed_meta(self, meta: dict, facts: dict) -> dict:
        return {
            **meta,
            "dtype": str(self.dtype),
            "num_sequences": self.num_sequences,
            "num_documents": self.num_documents,
            "num_tokens": self.num_tokens,
            **facts,
        }

    def close(self) -> None:
        """Close the partial files, keeping them (an interrupted run that ``--resume`` will continue)."""
        if self._appender is not None:
            self._appender.close()
            self._appender = None
        self._sync_behind.stop()
        for handle in (self._bin, self._lengths._file, self._doc_ends._file):
            close_quietly(handle)

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


def _document_facts(chunks: Iterator[np.ndarray], emit: Callable[[bytes], None]) -> tuple[int, int]:
    """Write the document index chunk by chunk with ``emit``; returns (documents with no sequence, the most
    sequences in one document)."""
    empty, widest, previous = 0, 0, None
    for chunk in chunks:
        emit(chunk.tobytes())
        steps = np.diff(chunk) if previous is None else np.diff(chunk, prepend=previous)
        if len(steps):
            empty += int(np.count_nonzero(steps == 0))
            widest = max(widest, int(steps.max()))
        previous = chunk[-1]
    return empty, widest


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
