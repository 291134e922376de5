"""The checksum of files one process of a run hands to another: the parts of a tokenize run, joined by the run.

A part's files live for seconds, between the worker that writes them and the join that copies them into the
outputs; their checksum only tells a resumed run whether a part recorded as done still holds what it wrote after the
machine went down (its files and record are not synced). That needs no strength against anyone, so it is crc32 (about
6.7 GB/s on one core of the development VM, against 2.0 GB/s for sha256), not the outputs' tree sha256
(:mod:`corpus.indexed.append`): a profile of a 16-CPU run put at most a twentieth of all its CPU time in the
parts' sha256 (at most: the profiler over-counts calls made without the GIL, bench/RESULTS.md).
"""

from __future__ import annotations

import os
import zlib

from corpus.indexed.partial_files import read_range


class Crc32:
    """The crc32 of bytes given in order."""

    def __init__(self, value: int = 0) -> None:
        self.value = value

    def update(self, data) -> None:
        """Add the next bytes (anything with the buffer protocol)."""
        self.value = zlib.crc32(memoryview(data).cast("B"), self.value)

    def hexdigest(self) -> str:
        return f"{self.value:08x}"


def crc32_of(source: int, size: int) -> Crc32:
    """The crc32 of the first ``size`` bytes of the open file ``source``."""
    digest = Crc32()
    for step in read_range(source, 0, size):
        digest.update(step)
    return digest


def file_crc32(path: str | os.PathLike) -> str:
    """The crc32 of a whole file, as :meth:`Crc32.hexdigest` gives it."""
    with open(path, "rb") as handle:
        return crc32_of(handle.fileno(), os.fstat(handle.fileno()).st_size).hexdigest()
