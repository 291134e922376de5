"""The partial files of a writer: growable spill buffers of lengths and document indices, the background sync of a
growing ``.bin``, reopening files at a checkpoint and reading them back in steps."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Iterator

import numpy as np

from corpus.core.disk import guard
from corpus.indexed.errors import IndexFormatError
from corpus.indexed.format import _CHUNK


def sync(handle) -> None:
    handle.flush()
    os.fsync(handle.fileno())


class SyncBehind:
    """Makes a growing file durable in the background, a block behind the writer, so the fsync that publishes
    it finds little left to write: the disk works while the encoder does, not after it (the final fsync of a
    300 MB ``.bin`` otherwise holds the end of a run up by a quarter of a second)."""

    def __init__(self, handle, every: int = 16 << 20) -> None:
        self._handle, self._every, self._unsynced = handle, every, 0
        self._wake, self._stopping = threading.Event(), False
        self._thread = threading.Thread(target=self._run, name="blendforge-sync-behind", daemon=True)
        self._thread.start()

    def wrote(self, size: int) -> None:
        """Count ``size`` more bytes handed to the file; wake the syncing thread every ``every`` bytes."""
        self._unsynced += size
        if self._unsynced >= self._every:
            self._unsynced = 0
            self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            try:
                os.fdatasync(self._handle.fileno())
            except (OSError, ValueError):  # a failing disk is reported by the writer's own fsync
                return

    def stop(self) -> None:
        """End the thread before the file is closed (its descriptor must not be synced after that)."""
        self._stopping = True
        self._wake.set()
        self._thread.join()


class NoSyncBehind:
    """In place of :class:`SyncBehind` for files that are not kept."""

    def wrote(self, size: int) -> None:
        pass

    def stop(self) -> None:
        pass


def reopen_at(path: Path, size: int):
    """Open a partial file of an interrupted writer for appending, cut back to its checkpointed ``size``
    (bytes written after the checkpoint are discarded and will be written again)."""
    try:
        handle = open(path, "r+b")
    except FileNotFoundError:
        raise IndexFormatError(path,
                               "cannot resume: this partial file is missing; start again without --resume") from None
    actual = os.fstat(handle.fileno()).st_size
    if actual < size:
        handle.close()
        raise IndexFormatError(path, f"cannot resume: {actual} bytes, fewer than the {size} checkpointed; "
                                     "start again without --resume")
    handle.truncate(size)
    handle.seek(size)
    return handle


class SpillBuffer:
    """A growable int array that spills to a file every ``_CHUNK`` values, so a writer of
    tens of millions of documents holds no per-document Python objects and bounded memory."""

    def __init__(self, path: Path, dtype: type, resume_count: int | None = None) -> None:
        self.path = path
        self.dtype = np.dtype(dtype)
        self._buffer = np.empty(_CHUNK, dtype=self.dtype)
        self._used = 0
        with guard(path):
            if resume_count is None:
                self.count, self._file = 0, open(path, "wb")
            else:
                self.count, self._file = resume_count, reopen_at(path, resume_count * self.dtype.itemsize)

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
        with guard(self.path):
            self._file.write(self._buffer[: self._used].tobytes())
        self._used = 0

    def sync(self) -> None:
        """Write the buffered values and make the file durable (a checkpoint)."""
        self.flush()
        with guard(self.path):
            sync(self._file)

    def chunks(self) -> Iterator[np.ndarray]:
        """Yield the stored values in order, chunk by chunk (after :meth:`close`)."""
        with open(self.path, "rb") as handle:
            while block := handle.read(_CHUNK * self.dtype.itemsize):
                yield np.frombuffer(block, dtype=self.dtype)

    def close(self) -> None:
        self.flush()
        with guard(self.path):
            self._file.close()


def close_quietly(handle) -> None:
    """Close a partial file, ignoring a failing flush (a full disk): ``--resume`` cuts every partial file back to
    its checkpointed size, which was made durable before the checkpoint was recorded, so nothing is lost."""
    try:
        handle.close()
    except OSError:
        pass


def read_values(path: Path, dtype: type, count: int, skip: int = 0) -> Iterator[np.ndarray]:
    """``count`` values of a spill file after its first ``skip``, chunk by chunk."""
    with open(path, "rb") as handle:
        handle.seek(skip * np.dtype(dtype).itemsize)
        while count > 0:
            chunk = np.fromfile(handle, dtype=dtype, count=min(count, _CHUNK))
            if len(chunk) == 0:
                raise IndexFormatError(path, f"ends {count} values early")
            count -= len(chunk)
            yield chunk


#: Bytes read per step by :func:`read_range`.
_READ_STEP = 16 << 20


def read_range(source: int, start: int, end: int) -> Iterator[memoryview]:
    """Bytes ``[start, end)`` of the open file ``source`` in steps, each read into one reused buffer (a view of it,
    valid until the next step): hashing a file makes no bytes object of it. NOTE: not through a memory map: a fault
    per page costs more than the copy."""
    view = memoryview(bytearray(min(_READ_STEP, max(end - start, 1))))
    for step in range(start, end, _READ_STEP):
        length = min(_READ_STEP, end - step)
        if os.preadv(source, [view[:length]], step) != length:
            raise OSError(errno.EIO, "the file is shorter than expected")
        yield view[:length]
