"""Appending whole files to a ``.bin`` on every core, and the checksum that allows it.

A ``.bin`` is checksummed as a tree: the sha256 of each :data:`BLOCK_BYTES` block, and the sha256 of those digests
in order (``bin_sha256_tree`` in the sidecar). A plain sha256 of the file would have to read it in order on one
core (about 1.4 GB/s on a Xeon), which caps a tokenize run on a many-core node; blocks are hashed side by side, and
``corpus inspect --check --deep`` checks them side by side too.

:class:`Appender` appends files (the parts of a tokenize run, the pairs ``corpus merge`` joins) at offsets known up
front, each copy in a thread by ``os.copy_file_range`` (the kernel moves the bytes; a file system that shares blocks
clones them), with ``os.sendfile`` as the fallback where it is refused, and hashes every block once all of its bytes
are in, reading them back into a reused buffer: no bytes object of the data is ever made.
"""

from __future__ import annotations

import errno
import hashlib
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from corpus.core.cores import available_cores
from corpus.indexed.partial_files import read_range

#: The checksum's block: large next to the cost of a thread hand-off, small next to a file of a many-core run.
BLOCK_BYTES = 64 << 20
_FALLBACK_ERRORS = (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF)


class BlockDigest:
    """The tree checksum of bytes given in order (:meth:`update`), or block by block (:meth:`set_block`)."""

    def __init__(self) -> None:
        self.blocks: dict[int, bytes] = {}
        self._tail = hashlib.sha256()
        self.size = 0
        """Bytes covered so far."""

    def update(self, data) -> None:
        """Hash the next bytes (anything with the buffer protocol)."""
        view = memoryview(data).cast("B")
        while len(view):
            room = BLOCK_BYTES - self.size % BLOCK_BYTES
            self._tail.update(view[:room])
            taken = min(room, len(view))
            self.size += taken
            view = view[taken:]
            if self.size % BLOCK_BYTES == 0:
                self.blocks[self.size // BLOCK_BYTES - 1] = self._tail.digest()
                self._tail = hashlib.sha256()

    def set_block(self, index: int, digest: bytes) -> None:
        """The digest of block ``index``, hashed elsewhere (the bytes covered are then counted by the caller)."""
        self.blocks[index] = digest

    def restart_at(self, size: int) -> int:
        """Forget the partial block before byte ``size`` (it will be hashed again from the file); returns where
        that block starts."""
        start = size - size % BLOCK_BYTES
        self._tail, self.size = hashlib.sha256(), start
        return start

    def hexdigest(self) -> str:
        """The root: sha256 over the blocks' digests in order (the partial last block included)."""
        full, partial = divmod(self.size, BLOCK_BYTES)
        digests = [self.blocks[index] for index in range(full)] + ([self._tail.digest()] if partial else [])
        return hashlib.sha256(b"".join(digests)).hexdigest()


def hash_range(source: int, start: int, end: int) -> bytes:
    """The sha256 of bytes ``[start, end)`` of the open file ``source``."""
    digest = hashlib.sha256()
    for step in read_range(source, start, end):
        digest.update(step)
    return digest.digest()


def digest_of(source: int, size: int) -> BlockDigest:
    """The tree checksum of the first ``size`` bytes of the open file ``source``, its blocks hashed on every core."""
    digest, full = BlockDigest(), size // BLOCK_BYTES
    with ThreadPoolExecutor(min(available_cores(), max(full, 1))) as pool:
        blocks = pool.map(lambda index: hash_range(source, index * BLOCK_BYTES, (index + 1) * BLOCK_BYTES),
                          range(full))
        for index, block in enumerate(blocks):
            digest.set_block(index, block)
    digest.size = full * BLOCK_BYTES
    if size > digest.size:
        digest.update(os.pread(source, size - digest.size, digest.size))
    return digest


def file_tree_digest(path: str | os.PathLike) -> str:
    """The tree checksum of a whole file (``bin_sha256_tree``)."""
    with open(path, "rb") as handle:
        return digest_of(handle.fileno(), os.fstat(handle.fileno()).st_size).hexdigest()


def _copy(source: int, target: int, offset: int, size: int, target_offset: int) -> None:
    """Bytes ``[offset, offset + size)`` of ``source`` to ``target`` at ``target_offset``."""
    done = 0
    while done < size:
        try:
            moved = os.copy_file_range(source, target, size - done, offset + done, target_offset + done)
        except OSError as error:
            if error.errno not in _FALLBACK_ERRORS:
                raise
            moved = _send(source, target, offset + done, size - done, target_offset + done)
        if moved == 0:
            raise OSError(errno.EIO, f"the source ended {size - done} bytes early")
        done += moved


def _send(source: int, target: int, offset: int, size: int, target_offset: int) -> int:
    """``sendfile`` writes at the target's position: a descriptor of its own, placed there."""
    with open(f"/proc/self/fd/{target}", "r+b", buffering=0) as placed:
        placed.seek(target_offset)
        return os.sendfile(placed.fileno(), source, offset, size)


class Appender:
    """Appends files to the open file ``target`` from byte ``start`` on, copies and block hashes in threads;
    ``digest`` receives every block from the one holding ``start`` on (its partial block there is hashed again)."""

    def __init__(self, target: int, start: int, digest: BlockDigest) -> None:
        self.target, self.end, self.digest = target, start, digest
        self._hashed_to = digest.restart_at(start)
        """Every block before this is hashed, or being hashed."""
        self._copies: list[tuple[int, Future]] = []
        """(start offset, copy) of the copies not yet seen complete, in order."""
        self._hashes: list[Future] = []
        self._lock = threading.Lock()
        """Guards the lists above, ``end`` and ``_hashed_to``: a copy that ends calls :meth:`_copied` in its thread."""
        self._closed = False
        self._pool = ThreadPoolExecutor(available_cores(), thread_name_prefix="blendforge-append")

    def append(self, path: str | os.PathLike, size: int, offset: int = 0) -> None:
        """Append ``size`` bytes of the file ``path`` from ``offset``, copied in a thread (see :meth:`wait`)."""
        if size == 0:
            return
        source = os.open(path, os.O_RDONLY)
        with self._lock:
            at, self.end = self.end, self.end + size

            def copy() -> None:
                try:
                    _copy(source, self.target, offset, size, at)
                finally:
                    os.close(source)

            copying = self._pool.submit(copy)
            self._copies.append((at, copying))
        copying.add_done_callback(self._copied)

    def _copied(self, _copy: Future) -> None:
        """A copy ended: hash the blocks it completed now, while the run goes on, not when the file ends."""
        with self._lock:
            if not self._closed:
                self._hash_blocks()

    def _hash_blocks(self) -> None:
        """Start hashing every whole block all of whose bytes are copied (the lock held). A failed copy stops
        here; :meth:`wait` raises its error."""
        while self._copies and self._copies[0][1].done() and self._copies[0][1].exception() is None:
            self._copies.pop(0)
        copied = self._copies[0][0] if self._copies else self.end
        while self._hashed_to + BLOCK_BYTES <= copied:
            start = self._hashed_to
            self._hashes.append(self._pool.submit(self._hash_block, start))
            self._hashed_to += BLOCK_BYTES

    def _hash_block(self, start: int) -> None:
        self.digest.set_block(start // BLOCK_BYTES, hash_range(self.target, start, start + BLOCK_BYTES))

    def wait(self) -> None:
        """Wait for every copy and the hash of every whole block (a checkpoint: appending may go on)."""
        with self._lock:
            copies = [copy for _, copy in self._copies]
        for copy in copies:
            copy.result()  # a failed copy raises here
        with self._lock:
            self._hash_blocks()
            hashes, self._hashes = self._hashes, []
        for future in hashes:
            future.result()
        self.digest.size = self._hashed_to

    def finish(self) -> None:
        """:meth:`wait`, then hash the partial last block into the digest and stop the threads."""
        try:
            self.wait()
            if self.end > self._hashed_to:
                self.digest.update(os.pread(self.target, self.end - self._hashed_to, self._hashed_to))
        finally:
            self.close()

    def close(self) -> None:
        """Stop the threads (after the copies under way)."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(cancel_futures=True)
