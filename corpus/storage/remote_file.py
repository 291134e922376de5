"""A remote object as a seekable binary file: a sequential reader gets one streaming GET, any other large ranges
fetched ahead.

The first block of an object (``FIRST_BLOCK_BYTES``) is one ranged read, and the first block of the last objects
opened is kept, so the run that follows a look at an input's first records does not fetch them again. A reader that
goes on in order past it (JSONL, a compressed stream, ``corpus merge``) is served by an
:class:`~corpus.storage.object_stream.ObjectStream` from there to the object's end: one GET received ahead by a
thread: on a local S3 server one GET for 105 MB took three quarters of the wall time and about half the server's CPU
of ranged blocks (``bench/object_storage.py`` reads the object both ways side by side). Where streaming does not
apply (other stores, options a presigned GET would drop) or after a seek (Parquet's footer and column chunks, a
shard starting mid-file), the object is cut into blocks growing from ``FIRST_BLOCK_BYTES`` to ``BLOCK_BYTES``
(doubling) and, while the reader works on block ``i``, blocks ``i+1 … i+AHEAD`` are fetched by background threads
(ranged GETs), with the read-ahead growing with each block read in order (none for the first): a reader that stops
early fetches little and starts at once, a long one makes few, large requests. Memory stays bounded: ``AHEAD + 2``
blocks at most per reader, or the stream's chunks.
"""

from __future__ import annotations

import bisect
import io
import os
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

from corpus.storage.errors import ShortRead, translate
from corpus.storage.filesystems import call, filesystem
from corpus.storage.object_stream import ObjectStream
from corpus.storage.objects import ObjectInfo, info
from corpus.storage.paths import is_remote, local_form
from corpus.storage.s3_client import S3Client, s3_client

#: The largest ranged read: large enough that a request's latency and per-request cost are small next to its
#: transfer (on a local S3 server 105 MB read in 16 MB ranges took 0.69-0.75 s, in 64 MB ranges 0.47-0.72 s).
BLOCK_BYTES = 64 << 20
#: The first block's size; each next one is twice as large, up to BLOCK_BYTES.
FIRST_BLOCK_BYTES = 4 << 20
#: Blocks fetched ahead of the one being read (memory: ``(AHEAD + 2) * BLOCK_BYTES`` at most).
AHEAD = 2
#: Objects whose first block (or, where they stream, whose stream from the start) is kept after their reader
#: closes.
KEPT_FIRST_BLOCKS = 2

_first_blocks: OrderedDict[tuple, bytes] = OrderedDict()
_first_blocks_lock = threading.Lock()
_first_streams: OrderedDict[tuple, ObjectStream] = OrderedDict()


def store_of(url: str):
    """What reads ``url``: the S3 client where it applies (:mod:`corpus.storage.s3_client`), else the fsspec
    filesystem. Both pickle, for arrays handed to worker processes."""
    return s3_client(url) or filesystem(url)


def read_range(found: ObjectInfo, start: int, end: int, store=None) -> bytes:
    """Bytes ``[start, end)`` of an object through ``store`` (default: :func:`store_of` its URL), retried on
    throttling, dropped connections and short reads."""
    store = store or store_of(found.path)

    def fetch() -> bytes:
        if isinstance(store, S3Client):
            data = store.read(found.path, start, end, found.size)
        else:
            data = store.cat_file(store._strip_protocol(found.path), start=start, end=end)
        if len(data) != end - start:
            raise ShortRead(f"got {len(data)} of {end - start} bytes at offset {start}")
        return data

    return call("read", found.path, fetch)


class RemoteReader(io.RawIOBase):
    """Read-only, seekable file over one object (see the module docstring)."""

    def __init__(self, found: ObjectInfo, block_bytes: int = BLOCK_BYTES, ahead: int = AHEAD,
                 first_block_bytes: int = FIRST_BLOCK_BYTES, stream: bool | None = None) -> None:
        """``stream``: serve reads in order by one streaming GET (None: where the store's S3 client allows
        it); then blocks, for reads after a seek, are ``first_block_bytes`` and never read ahead."""
        super().__init__()
        self.name, self.size = found.path, found.size
        self._found, self._client = found, s3_client(found.path)
        self._streams = (self._client is not None and not self._client.proxies) if stream is None else stream
        self._stream: ObjectStream | None = None
        self._reached = 0  # where the last read ended: a read starting there goes on in order
        if self._streams:
            block_bytes = first_block_bytes = min(block_bytes, first_block_bytes)
        self._block_bytes = block_bytes
        self._ahead = 0 if self._streams else ahead
        self._ramp_starts = [0]  # where the growing blocks before the uniform ones start, and where they end
        size = min(first_block_bytes, block_bytes)
        while size < block_bytes:
            self._ramp_starts.append(self._ramp_starts[-1] + size)
            size *= 2
        self._ramp_blocks, self._ramp_end = len(self._ramp_starts) - 1, self._ramp_starts[-1]
        self._last = self._locate(self.size - 1)
        self._position = 0
        self._current, self._in_order = -1, 0  # the block being read; blocks read in order up to it
        self._blocks: OrderedDict[int, Future] = OrderedDict()
        self._pool = ThreadPoolExecutor(max(1, ahead), thread_name_prefix="blendforge-read")

    def _start(self, index: int) -> int:
        """Where block ``index`` starts."""
        if index <= self._ramp_blocks:
            return self._ramp_starts[index]
        return self._ramp_end + (index - self._ramp_blocks) * self._block_bytes

    def _locate(self, position: int) -> int:
        """The index of the block holding byte ``position``."""
        if position < self._ramp_end:
            return bisect.bisect_right(self._ramp_starts, position) - 1
        return self._ramp_blocks + (position - self._ramp_end) // self._block_bytes

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self.size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def _fetch(self, index: int) -> bytes:
        start, end = self._start(index), min(self.size, self._start(index + 1))
        if index:
            return read_range(self._found, start, end)
        key = (self._found.path, self._found.size, self._found.version, end)
        with _first_blocks_lock:
            kept = _first_blocks.get(key)
        if kept is None:
            kept = read_range(self._found, start, end)
            with _first_blocks_lock:
                _first_blocks[key] = kept
                while len(_first_blocks) > KEPT_FIRST_BLOCKS:
                    _first_blocks.popitem(last=False)
        return kept

    def _block(self, index: int) -> bytes:
        """Block ``index``, with up to ``ahead`` next blocks requested behind it."""
        if index != self._current:
            self._in_order = self._in_order + 1 if 0 <= self._current == index - 1 else 0
            self._current = index
        for wanted in range(index, min(self._last, index + min(self._ahead, self._in_order)) + 1):
            if wanted not in self._blocks:
                self._blocks[wanted] = self._pool.submit(self._fetch, wanted)
        for stale in [i for i in self._blocks if i < index - 1 or i > index + self._ahead]:
            self._blocks.pop(stale).cancel()
        return self._blocks[index].result()

    def _identity(self) -> tuple:
        return self._found.path, self._found.size, self._found.version

    def _streaming(self) -> ObjectStream | None:
        """The stream serving the position: the open one if it is there, else one if the reader goes on in order
        (from the start: the one a reader that closed early left, if any); None where blocks serve it."""
        if self._stream is not None and self._stream.position != self._position:
            self._stream.close()
            self._stream = None
        if self._stream is None and self._streams and self._position == self._reached:
            with _first_blocks_lock:
                kept = _first_streams.pop(self._identity(), None) if self._position == 0 else None
            self._stream = kept or ObjectStream(self._client, self.name, self._position, self.size,
                                                keep_bytes=FIRST_BLOCK_BYTES if self._position == 0 else 0)
        return self._stream

    def read(self, size: int = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self._position + size)
        pieces = []
        while self._position < end:
            stream = self._streaming()
            if stream is not None:
                piece = stream.read(end - self._position)
                if not piece:
                    raise translate(ShortRead(f"the object ended at byte {self._position} of {self.size}"),
                                    self.name, "read")
            else:
                index = self._locate(self._position)
                block = self._block(index)
                inside = self._position - self._start(index)
                piece = block[inside : inside + end - self._position]
            pieces.append(piece)
            self._position += len(piece)
            self._reached = self._position
        return b"".join(pieces)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        if not self.closed:
            for future in self._blocks.values():
                future.cancel()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._blocks.clear()
            if self._stream is not None:
                self._keep_or_close(self._stream)
                self._stream = None
        super().close()

    def _keep_or_close(self, stream: ObjectStream) -> None:
        """Keep a stream from the start that was read no further than its first block, back at the start, for
        the next reader of the object (a run after a look at its first records); close any other."""
        if stream.start != 0 or not stream.rewind():
            stream.close()
            return
        with _first_blocks_lock:
            _first_streams[self._identity()] = stream
            while len(_first_streams) > KEPT_FIRST_BLOCKS:
                _first_streams.popitem(last=False)[1].close()


def open_binary(path: str | os.PathLike, listed: ObjectInfo | None = None):
    """A readable, seekable binary file: ``open(path, "rb")`` locally; a :class:`RemoteReader` for a URL.

    ``listed``: the object as a listing described it (size and version), which spares a HEAD request."""
    text = str(path)
    if not is_remote(text):
        return open(local_form(text), "rb")
    return RemoteReader(listed if listed is not None and listed.path == text else info(text))
