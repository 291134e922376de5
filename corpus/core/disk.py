"""Writing files for people: a full disk, a read-only mount, a missing permission or a file standing where a folder
is expected becomes one :class:`OutputError` naming the path, the free space where it matters and the fix, never
an ``OSError`` traceback.

Every writer of the project (token files and their sidecars, the tokenize checkpoint, merges, trainer checkpoints,
exports) wraps its file system calls in :func:`guard`; the command that called it adds its own flag and next step
with :meth:`OutputError.for_command` (``--output-prefix``, "rerun the same command with --resume").
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path
from typing import Iterator

from corpus.core.errors import UserError

#: The errors that mean "no room": a full disk or a full quota.
FULL = (errno.ENOSPC, errno.EDQUOT)
#: The errors that mean "not allowed to write there".
FORBIDDEN = (errno.EROFS, errno.EACCES, errno.EPERM)
#: The errors that mean "a file stands where a folder is expected".
NOT_A_FOLDER = (errno.ENOTDIR, errno.EEXIST)


def format_bytes(count: float) -> str:
    """``1.5 GB``-style sizes (powers of 1000, as disk tools and vendors count)."""
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if abs(count) < 1000 or unit == "TB":
            return f"{count:,.0f} {unit}" if unit == "bytes" else f"{count:,.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def free_bytes(path: str | os.PathLike) -> int | None:
    """Bytes free for this user on the file system that holds (or would hold) ``path``; None if unknown."""
    place = _nearest_existing(Path(os.path.abspath(path)))
    try:
        return shutil.disk_usage(place if place.is_dir() else place.parent).free
    except OSError:
        return None


def _blocking_file(path: Path) -> Path | None:
    """The file that stands where a folder on the way to ``path`` should be, if any."""
    for candidate in reversed((path, *path.parents)):
        if candidate.exists() and not candidate.is_dir():
            return candidate
    return None


class OutputError(UserError):
    """A file or folder could not be written. ``option`` is the flag that chooses the place (named in the fix);
    ``then`` is what to do once space is freed; ``needed`` the bytes still to write, where known."""

    def __init__(self, path: str | os.PathLike, error: OSError, needed: int | None = None, option: str | None = None,
                 then: str | None = None) -> None:
        self.path, self.error, self.needed, self.option, self.then = str(path), error, needed, option, then
        super().__init__(self._message())

    def __reduce__(self):  # raised in a tokenize worker process, re-raised in the run's
        return type(self), (self.path, self.error, self.needed, self.option, self.then)

    def for_command(self, option: str, then: str | None = None, needed: int | None = None) -> "OutputError":
        """The same error with the flag that chooses the place, the next step and the space needed filled in."""
        return OutputError(self.path, self.error, self.needed if needed is None else needed, option,
                           then or self.then)

    @property
    def full(self) -> bool:
        """Whether the disk (or the quota) is full."""
        return self.error.errno in FULL

    def _message(self) -> str:
        reason = self.error.strerror or str(self.error)
        elsewhere = f"choose another {self.option}" if self.option else "write somewhere else"
        if self.full:
            free = free_bytes(self.path)
            space = ", ".join(([f"{format_bytes(free)} free"] if free is not None else [])
                              + ([f"about {format_bytes(self.needed)} needed"] if self.needed else []))
            then = self.then or "run the command again"
            return f"cannot write {self.path}: {reason}{f' ({space})' if space else ''}; free space and {then}, " \
                   f"or {elsewhere}"
        if self.error.errno in FORBIDDEN:
            return f"cannot write {self.path}: {reason}; {elsewhere} (a folder you may write to)"
        blocking = _blocking_file(Path(self.path)) if self.error.errno in NOT_A_FOLDER else None
        if blocking is not None:
            return f"cannot write {self.path}: {blocking} is a file, not a folder; {elsewhere}, or move that file"
        return f"cannot write {self.path}: {reason}; check that path, or {elsewhere}"


@contextlib.contextmanager
def guard(path: str | os.PathLike, needed: int | None = None) -> Iterator[None]:
    """Turn an ``OSError`` raised inside into an :class:`OutputError` about ``path`` (the file being written:
    errors of writes on open files carry no file name)."""
    try:
        yield
    except OSError as error:
        raise OutputError(error.filename or path, error, needed) from None


def discard(path: str | os.PathLike) -> None:
    """Remove a temporary file left by a failed write, if it is there (a file standing where its folder should
    be, or a vanished folder, is no error here: the write's own error is what the user needs)."""
    try:
        os.unlink(path)
    except OSError:
        pass
