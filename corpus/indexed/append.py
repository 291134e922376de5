"""Appending the bytes of one file to another without passing them through Python objects, hashed on the way.

Joining the parts of a tokenize run and ``corpus merge`` both append whole ``.bin`` files to the one being written
and fold those bytes into its sha256. The copy is ``os.copy_file_range`` (the kernel moves the bytes; a file system
that shares blocks clones them), with ``os.sendfile`` and then a plain read as fallbacks where it is refused; the
hash reads the source through a memory map, so no bytes object of the data is ever made.
"""

from __future__ import annotations

import errno
import os

#: Bytes copied and hashed per step (the hash of one step runs while nothing else holds the GIL).
STEP = 64 << 20
_FALLBACK_ERRORS = (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF)


def _copy(source: int, target: int, offset: int, size: int) -> None:
    """Bytes ``[offset, offset + size)`` of ``source`` to ``target``'s current position (which advances)."""
    done = 0
    while done < size:
        try:
            moved = os.copy_file_range(source, target, size - done, offset + done)
        except OSError as error:
            if error.errno not in _FALLBACK_ERRORS:
                raise
            moved = os.sendfile(target, source, offset + done, size - done)
        if moved == 0:
            raise OSError(errno.EIO, f"the source ended {size - done} bytes early")
        done += moved


def append_file(source: int, target: int, size: int, digest, offset: int = 0) -> None:
    """Append ``size`` bytes of the open file ``source`` from ``offset`` at ``target``'s position, updating the
    ``hashlib`` object ``digest`` with them. ``target`` is a raw descriptor (flush a Python file first)."""
    buffer = bytearray(min(size, STEP))
    view = memoryview(buffer)
    for step in range(offset, offset + size, STEP):
        length = min(STEP, offset + size - step)
        _copy(source, target, step, length)
        # NOTE: read back into one reused buffer, not through a memory map: a fault per page costs more than the copy
        if os.preadv(source, [view[:length]], step) != length:
            raise OSError(errno.EIO, "the source changed while it was appended")
        digest.update(view[:length])
