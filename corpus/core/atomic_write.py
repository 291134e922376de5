"""The one way the project writes a whole file: a reader (another process, another node, the next run after a
crash) sees the old content or the new, never half of it, and a failed write leaves nothing behind.

Every file written in one go goes through here: sidecars, the tokenize checkpoint, ``--stats-json``, blend files,
figures, tokenizer verdicts, cached objects, compiled kernels, checkpoint trackers and ``run.json``, exports,
metrics files. The steps, in this order:

1. a temporary file beside the target, named for this host, this process and a random token
   (``.<name>.<host>.<pid>.<token>.partial``) and created exclusively, so two processes (or threads) writing the
   same file never share one; it gets the umask's mode, as a file created under its final name would;
2. the caller writes it (an open handle from :func:`atomic_file`, or its path from :func:`atomic_path` for a
   library that wants a file name: numpy, matplotlib, safetensors, a compiler, a download);
3. flush and ``fsync``, so the rename cannot reach the disk before the data does;
4. ``os.replace`` over the target (atomic on one file system; the last writer wins);
5. ``fsync`` of the folder, so the rename itself survives a power loss.

Any failure on the way (an exception in the caller's block, a full disk, ``KeyboardInterrupt``) removes the temporary
file and re-raises; the target keeps its old content. A process killed outright (``kill -9``) cannot clean up: the
next write of the same file on that host removes what dead processes left. ``OSError``s of these steps name the
target, not the temporary file; callers that write for a person wrap the call in :func:`corpus.core.disk.guard` to
turn them into one line.

NOTE: not for files that grow while a run goes on and are checkpointed on the way (the ``.bin``/``.idx`` writer's
``*.partial`` files, the tokenize quarantine file, the metrics JSONL): a resumed run reopens and extends those, so
their names must be fixed and known to the next run. The token files are published by one rename once complete,
under their own protocol (``corpus/indexed/writer.py``); the metrics JSONL is appended to, line by line. Folders
published whole (index-map cache entries, checkpoints) fill a private folder and rename it: the files inside are
never visible under a final name before the folder is.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import socket
from pathlib import Path
from typing import IO, Iterator

#: Errors of ``fsync`` on a folder that mean the file system does not do that (some network file systems): the
#: rename is then as durable as that file system makes it.
_FOLDER_SYNC_UNSUPPORTED = (errno.EINVAL, errno.EBADF, errno.ENOTSUP, errno.EACCES)


def _owner_prefix(path: Path) -> str:
    """The start of the temporary names this host's processes give ``path``."""
    return f".{path.name}.{socket.gethostname()}."


def temporary_name(path: Path) -> Path:
    """A name beside ``path`` that no other process or call uses: this host, this process's id and a random
    token (``.<name>.<host>.<pid>.<token>.partial``)."""
    return path.with_name(f"{_owner_prefix(path)}{os.getpid()}.{secrets.token_hex(4)}.partial")


def _is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _sweep_dead_writers(path: Path) -> None:
    """Remove the temporary files of ``path`` left by processes of this host that died mid-write (``kill -9``),
    so that a writer killed again and again does not pile them up. Other hosts' are left alone: their process ids
    mean nothing here (a folder may be shared)."""
    prefix = _owner_prefix(path)
    try:
        entries = [entry.name for entry in os.scandir(path.parent) if entry.name.startswith(prefix)]
    except OSError:
        return
    for name in entries:
        pid, _, rest = name[len(prefix):].partition(".")
        if pid.isdigit() and rest.endswith(".partial") and not _is_running(int(pid)):
            _discard(path.with_name(name))


def _create_temporary(path: Path) -> Path:
    """Create a fresh, empty temporary file for ``path``, exclusively (never one another writer holds); its errors
    name ``path`` (a missing or read-only folder is the target's)."""
    while True:
        temporary = temporary_name(path)
        try:
            os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return temporary
        except FileExistsError:
            continue  # a token drawn twice: draw again
        except OSError as error:
            raise _naming(path, temporary, error) from error


def fsync_folder(folder: str | os.PathLike) -> None:
    """Make the entries of ``folder`` (a rename into it) durable, where the file system supports that."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError as error:
        if error.errno in _FOLDER_SYNC_UNSUPPORTED:
            return
        raise
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in _FOLDER_SYNC_UNSUPPORTED:
            raise
    finally:
        os.close(descriptor)


def _discard(temporary: Path) -> None:
    try:
        os.unlink(temporary)
    except FileNotFoundError:
        pass


def _publish(temporary: Path, path: Path, durable: bool) -> None:
    """Rename the complete ``temporary`` over ``path`` (and make the rename durable)."""
    os.replace(temporary, path)
    if durable:
        fsync_folder(path.parent)


def _naming(path: Path, temporary: Path, error: OSError) -> OSError:
    """``error`` naming ``path`` where it named the temporary file (the file a person asked for is ``path``)."""
    if error.filename == str(temporary) and error.errno is not None:
        return type(error)(error.errno, error.strerror, str(path))
    return error


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, durable: bool = True) -> Iterator[Path]:
    """The path of a fresh, empty temporary file for a writer that takes a file name; when the block ends without
    an exception, whatever was written there is synced and becomes ``path``; otherwise it is removed.

    ``durable=False`` leaves out both fsyncs (steps 3 and 5): the file is still never seen half-written by another
    process, but a power loss may leave it missing or empty. Only for a record whose reader takes a missing or
    unreadable one as absent and redoes the work it stood for (a tokenize part's record of being done): at a few
    tens of milliseconds an fsync on a busy disk, many such records cost more than the work they would save."""
    path = Path(path)
    temporary = _create_temporary(path)
    try:
        yield temporary
        if durable:
            # NOTE: synced through a descriptor of its own: the writer's is closed by now, or was never ours (a
            # library may even have replaced the file), and fsync makes the file's data durable whichever asks.
            descriptor = os.open(temporary, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        _publish(temporary, path, durable)
        _sweep_dead_writers(path)
    except OSError as error:
        _discard(temporary)
        raise _naming(path, temporary, error) from error
    except BaseException:
        _discard(temporary)
        raise


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb", durable: bool = True) -> Iterator[IO]:
    """An open file (``mode`` ``"wb"`` or ``"w"``, UTF-8) whose content becomes ``path`` when the block ends
    without an exception, and is removed otherwise (``durable``: see :func:`atomic_path`)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_file writes a new file: mode 'w' or 'wb', not {mode!r}")
    with atomic_path(path, durable) as temporary, open(temporary, mode, **({} if "b" in mode else
                                                                           {"encoding": "utf-8"})) as handle:
        yield handle


def write_atomically(path: str | os.PathLike, data: bytes | str, durable: bool = True) -> None:
    """Write ``data`` (text is written as UTF-8) to ``path`` atomically (``durable``: see :func:`atomic_path`)."""
    with atomic_file(path, "w" if isinstance(data, str) else "wb", durable) as handle:
        handle.write(data)
