"""A remote ``.bin`` as a flat token array, read through the node-local chunk cache.

The object is cut into ``CHUNK_BYTES`` chunks. The first use of a chunk fetches it with one ranged read into the
cache (:mod:`corpus.storage.object_cache`), memory-maps it, and queues the next ``READ_AHEAD`` chunks (wrapping
around to the start: the loader's shuffled samples come from everywhere) for background fetching, each run of
consecutive missing chunks in one ranged read: fewer, larger requests. Later reads of a cached chunk are slices of
a memory map, as for a local file; a read that spans chunks is stitched together. So a cold cache streams the
object at the store's bandwidth while samples are served. An object whose every chunk is cached when it is opened
is one array over the chunk files mapped side by side (:mod:`corpus.storage.side_by_side`): a warm cache costs
what a local memory map does. Measured side by side: ``bench/object_storage.py`` (results in ``bench/RESULTS.md``).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from corpus.storage.object_cache import claim, object_dir, release, store, touch, wait_for
from corpus.storage.objects import ObjectInfo, info
from corpus.storage.paths import is_remote, local_form
from corpus.storage.remote_file import read_range, store_of
from corpus.storage.side_by_side import map_side_by_side

#: Bytes per chunk (a ranged read of a few MB: latency small next to transfer; a multiple of every itemsize).
CHUNK_BYTES = 4 << 20
#: Chunks queued for background fetching after each chunk first used.
READ_AHEAD = 16
#: Background fetches at once, per process.
FETCH_THREADS = 4
#: Chunks kept memory-mapped per array.
MAPPED_CHUNKS = 512

_pool: dict[str, ThreadPoolExecutor] = {}


def _fetcher() -> ThreadPoolExecutor:
    if "pool" not in _pool:
        _pool["pool"] = ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="blendforge-chunks")
    return _pool["pool"]


os.register_at_fork(after_in_child=_pool.clear)  # a forked child has none of the parent's threads


class ChunkedArray:
    """The tokens of one remote object version: ``len()``, ``dtype``, and indexing by an int, a slice (step 1)
    or an integer array, each returning numpy values (see the module docstring)."""

    ndim = 1

    def __init__(self, found: ObjectInfo, dtype: np.dtype, store=None, chunk_bytes: int | None = None) -> None:
        """``store``: what reads the object (default: the S3 client or filesystem of the options in force);
        kept, so an array handed to another process reads through the same store."""
        self.found, self.dtype, self.chunk_bytes = found, np.dtype(dtype), chunk_bytes or CHUNK_BYTES
        self._store = store or store_of(found.path)
        self._count = found.size // self.dtype.itemsize
        self._per_chunk = self.chunk_bytes // self.dtype.itemsize
        self._chunks = -(-found.size // self.chunk_bytes)
        self._folder = object_dir(found)
        self._maps: OrderedDict[int, np.ndarray] = OrderedDict()
        self._pending: dict[int, Future] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {"found": self.found, "dtype": self.dtype, "store": self._store, "chunk_bytes": self.chunk_bytes}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["found"], state["dtype"], state["store"], state["chunk_bytes"])

    def __len__(self) -> int:
        return self._count

    @property
    def shape(self) -> tuple[int]:
        return (self._count,)

    def _path(self, index: int) -> Path:
        return chunk_path(self._folder, index)

    def _fetch(self, index: int) -> None:
        """Put chunk ``index`` in the cache unless it is there (or another process is writing it)."""
        target = self._path(index)
        if target.exists():
            return
        if not claim(target):
            if wait_for(target):
                return
        try:
            self._store_run(index, index)
        finally:
            release(target)

    def _store_run(self, first: int, last: int) -> None:
        """Fetch chunks ``first … last`` with one ranged read and store each (the caller claimed them)."""
        start, size = first * self.chunk_bytes, self.chunk_bytes
        data = memoryview(read_range(self.found, start, min(self.found.size, (last + 1) * size), self._store))
        for index in range(first, last + 1):
            store(self._path(index), data[(index - first) * size : (index - first + 1) * size])

    def _fetch_run(self, first: int, last: int) -> None:
        """Background read-ahead: the chunks of ``first … last`` no other process is fetching, run by run."""
        claimed = [index for index in range(first, last + 1)
                   if not self._path(index).exists() and claim(self._path(index))]
        try:
            for run in _runs(claimed):
                self._store_run(run[0], run[-1])
        finally:
            for index in claimed:
                release(self._path(index))

    def _read_ahead(self, index: int) -> None:
        with self._lock:
            ahead = [(index + step) % self._chunks for step in range(1, min(self._chunks, READ_AHEAD + 1))]
            missing = [i for i in ahead
                       if i not in self._maps and i not in self._pending and not self._path(i).exists()]
            for run in _runs(missing):
                future = _fetcher().submit(self._fetch_run, run[0], run[-1])
                self._pending.update(dict.fromkeys(run, future))

    def _chunk(self, index: int) -> np.ndarray:
        """The tokens of chunk ``index``, memory-mapped (fetched first if the cache lacks it)."""
        mapped = self._maps.get(index)
        if mapped is not None:
            return mapped
        with self._lock:
            pending = self._pending.pop(index, None)
            if pending is not None and pending.cancel():  # queued behind other read-ahead: fetched here instead
                for other in [i for i, future in self._pending.items() if future is pending]:
                    del self._pending[other]
                pending = None
        if pending is not None:
            pending.result()
        target = self._path(index)
        while True:
            self._fetch(index)
            try:
                raw = np.memmap(target, dtype=np.uint8, mode="r").view(np.ndarray)  # no memmap cost per slice
                break
            except FileNotFoundError:  # pruned between fetch and map (only when the budget is tiny): fetch again
                continue
        touch(target)
        mapped = _whole_tokens(raw, self.dtype)
        with self._lock:
            self._maps[index] = mapped
            while len(self._maps) > MAPPED_CHUNKS:
                self._maps.popitem(last=False)
        self._read_ahead(index)
        return mapped

    def _range(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)``: a view of one chunk's map, or the pieces of several joined."""
        if stop <= start:
            return np.empty(0, self.dtype)
        per = self._per_chunk
        first, last = start // per, (stop - 1) // per
        if first == last:  # the common case (a sample inside one chunk): one slice of a map
            chunk = self._maps.get(first)
            return (chunk if chunk is not None else self._chunk(first))[start - first * per : stop - first * per]
        pieces = [self._chunk(index)[max(start, index * per) - index * per : min(stop, (index + 1) * per) - index * per]
                  for index in range(first, last + 1)]
        return np.concatenate(pieces)

    def _gather(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, dtype=np.int64)
        positions = np.where(positions < 0, positions + self._count, positions)
        if positions.size and (positions.min() < 0 or positions.max() >= self._count):
            raise IndexError(f"{self.found.path}: index out of range for {self._count} tokens")
        out = np.empty(positions.shape, self.dtype)
        chunks = positions // self._per_chunk
        for index in np.unique(chunks):
            chosen = chunks == index
            out[chosen] = self._chunk(int(index))[positions[chosen] - index * self._per_chunk]
        return out

    def __getitem__(self, key):
        if type(key) is slice and key.step is None and type(key.start) is int and type(key.stop) is int \
                and 0 <= key.start < key.stop <= self._count:
            # The loader's read (a document piece inside one mapped chunk), without slice.indices and a call.
            first = key.start // self._per_chunk
            chunk = self._maps.get(first)
            if chunk is not None and (key.stop - 1) // self._per_chunk == first:
                return chunk[key.start - first * self._per_chunk : key.stop - first * self._per_chunk]
            return self._range(key.start, key.stop)
        if isinstance(key, slice):
            start, stop, step = key.indices(self._count)
            if step != 1:
                return self._gather(np.arange(start, stop, step))
            return self._range(start, stop)
        if isinstance(key, (int, np.integer)):
            return self._gather(np.asarray([key]))[0]
        return self._gather(key)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        whole = self._range(0, self._count)
        return whole.astype(dtype) if dtype is not None else whole


def _whole_tokens(raw: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The bytes ``raw`` viewed as tokens of ``dtype`` (a torn last token is not one)."""
    return raw[: len(raw) - len(raw) % dtype.itemsize].view(dtype)


def chunk_path(folder: Path, index: int) -> Path:
    """Where chunk ``index`` of the object cached in ``folder`` is kept."""
    return folder / f"{index:08d}.chunk"


def _cached_whole(found: ObjectInfo, dtype: np.dtype) -> np.ndarray | None:
    """The tokens of ``found`` as one array over its chunk files when every chunk is cached (else None)."""
    folder = object_dir(found)
    try:
        present = set(os.listdir(folder))
    except FileNotFoundError:
        return None
    paths = [chunk_path(folder, index) for index in range(-(-found.size // CHUNK_BYTES))]
    if not all(path.name in present for path in paths):
        return None
    whole = map_side_by_side(paths, CHUNK_BYTES, found.size)
    if whole is None:
        return None
    for path in paths:  # used now: the cache's pruning goes by last use
        touch(path)
    return _whole_tokens(whole, dtype)


def _runs(indices: list[int]) -> list[list[int]]:
    """``indices`` cut into runs of consecutive numbers, in order (``[7, 8, 0, 1]`` -> ``[[7, 8], [0, 1]]``)."""
    runs: list[list[int]] = []
    for index in indices:
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return runs


def map_array(path: str | os.PathLike, dtype: np.dtype) -> np.ndarray | ChunkedArray:
    """The whole tokens of a ``.bin`` (a partial trailing token is left out): a read-only memory map of a local
    file; for an object, one array over its cached chunks when all are cached, else a :class:`ChunkedArray`.
    ``FileNotFoundError`` when there is none."""
    dtype, text = np.dtype(dtype), str(path)
    if is_remote(text):
        found = info(text)
        whole = _cached_whole(found, dtype)
        return whole if whole is not None else ChunkedArray(found, dtype)
    count = os.stat(local_form(text)).st_size // dtype.itemsize
    if not count:
        return np.empty(0, dtype=dtype)
    # A plain array over the map: np.memmap's own __getitem__ costs a Python call per slice, per document read.
    return np.memmap(local_form(text), dtype=dtype, mode="r", shape=(count,)).view(np.ndarray)
