"""Files mapped side by side into one address range: one read-only numpy array over all of them, without a copy.

A remote ``.bin`` whose chunks are all in the node-local cache is a folder of chunk files. Read through
:class:`~corpus.storage.chunked.ChunkedArray`, every slice is a Python call; a local ``.bin`` is one memory map
that numpy slices itself, and a loader reading a document piece per call pays that difference on every piece
(a tenth of a warm pass). Mapping each chunk file at its offset inside one reserved range gives the cached
object the local file's cost: the pages are the cache files' own, so nothing is copied and no disk is used.

POSIX ``mmap`` with ``MAP_FIXED``, called through ctypes (Python's ``mmap`` takes no address). Where it is not
available, :func:`map_side_by_side` returns None and the caller reads chunk by chunk.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import sys
import weakref
from pathlib import Path

import numpy as np

#: ``MAP_FIXED`` and ``PROT_NONE`` on Linux and macOS (Python's mmap module does not export them).
_MAP_FIXED, _PROT_NONE = 0x10, 0
_SUPPORTED = sys.platform in ("linux", "darwin") and hasattr(mmap, "MAP_ANONYMOUS")
_FAILED = ctypes.c_void_p(-1).value


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.restype = ctypes.c_int
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def map_side_by_side(paths: list[Path], piece_bytes: int, total_bytes: int) -> np.ndarray | None:
    """A read-only uint8 array of ``total_bytes``: file ``i`` of ``paths`` at byte ``i * piece_bytes``.

    Every file but the last holds ``piece_bytes`` (a multiple of the page size), the last the rest. None where
    the platform cannot map at a chosen address, or a file is missing or shorter than its place (the caller
    reads chunk by chunk then). The mapping is undone when the array and every view of it are gone; a file
    deleted meanwhile keeps its pages until then, as any memory-mapped file does."""
    pieces = -(-total_bytes // piece_bytes) if total_bytes else 0
    if not _SUPPORTED or not pieces or len(paths) != pieces or piece_bytes % mmap.PAGESIZE:
        return None
    libc = _libc()
    span = -(-total_bytes // mmap.PAGESIZE) * mmap.PAGESIZE
    base = libc.mmap(None, span, _PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)  # the range, reserved
    if base in (None, _FAILED):
        return None
    try:
        for index, path in enumerate(paths):
            size = min(piece_bytes, total_bytes - index * piece_bytes)
            descriptor = os.open(path, os.O_RDONLY)
            try:
                if os.fstat(descriptor).st_size < size:
                    raise OSError(f"{path}: shorter than its place")
                at = base + index * piece_bytes
                if libc.mmap(at, size, mmap.PROT_READ, mmap.MAP_SHARED | _MAP_FIXED, descriptor, 0) != at:
                    raise OSError(ctypes.get_errno(), f"{path}: cannot be mapped at its place")
            finally:
                os.close(descriptor)
    except OSError:
        libc.munmap(base, span)
        return None
    memory = (ctypes.c_char * total_bytes).from_address(base)
    weakref.finalize(memory, libc.munmap, base, span)
    array = np.frombuffer(memory, dtype=np.uint8)  # keeps ``memory`` (and so the mapping) alive
    array.flags.writeable = False  # the pages are read-only: a write would crash the process
    return array
