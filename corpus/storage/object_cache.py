"""The node-local cache of remote objects: whole copies of small ones (``.idx``, index maps) and fixed-size chunks
of large ones (``.bin``), shared by every process of the node and bounded in size.

Layout: ``<root>/<key>/`` per object version, ``key`` a hash of the URL, size and version (ETag or version id), so
a rewritten object is a new entry and never mixes with the old one. In it: ``whole`` (a full copy) or
``<index>.chunk`` files, and ``source`` (the URL, for people looking in).

- Safe for many processes: every file is written under a private temporary name and renamed into place, so a
  reader sees a complete file or none; a process fetching a chunk leaves a ``.fetching`` marker (created with
  ``O_EXCL``) so the others wait for it instead of fetching it again (a marker older than ``STALE_S`` is a
  killed fetcher's and is taken over).
- Bounded: once this process has written ``budget / 16`` bytes, the oldest files (by modification time, which
  every use refreshes) are deleted until the cache holds at most 90% of the budget. A file another process has
  mapped stays readable for it after deletion (POSIX keeps it until unmapped).

Location: ``$BLENDFORGE_OBJECT_CACHE_DIR``, else ``$XDG_CACHE_HOME/blendforge/objects`` (``~/.cache/…``);
budget: ``$BLENDFORGE_OBJECT_CACHE_GB`` (default 50).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from pathlib import Path

from corpus.core.atomic_write import atomic_path, write_atomically
from corpus.core.cache import cache_folder
from corpus.storage.objects import ObjectInfo, download, info
from corpus.storage.paths import is_remote, local_form

log = logging.getLogger(__name__)

DEFAULT_BUDGET_GB = 50.0
#: Seconds after which a ``.fetching`` marker is taken as a dead process's, and files used this recently are
#: never pruned (another process may be about to map them).
STALE_S = 60.0
_written = {"bytes": 0}
_lock = threading.Lock()


def cache_root() -> Path:
    """Where remote objects are cached on this node."""
    return cache_folder("objects")


def mirror_dir(url: str) -> Path:
    """The local mirror of a remote folder (a shared index-map cache); never pruned."""
    return cache_root() / "folders" / hashlib.sha256(url.encode()).hexdigest()[:16]


def budget_bytes() -> int:
    """The most bytes the cache may hold."""
    return int(float(os.environ.get("BLENDFORGE_OBJECT_CACHE_GB", DEFAULT_BUDGET_GB)) * (1 << 30))


def object_dir(found: ObjectInfo) -> Path:
    """The cache folder of one version of an object (created)."""
    key = hashlib.sha256(f"{found.path}\0{found.size}\0{found.version}".encode()).hexdigest()[:32]
    folder = cache_root() / key
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        write_atomically(folder / "source", found.path + "\n")
    return folder


def store(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` atomically (temporary name, then rename) and count it against the budget."""
    write_atomically(target, data)
    note_written(len(data))


def touch(target: Path) -> None:
    """Mark a cached file as just used (pruning removes the least recently used first)."""
    try:
        os.utime(target)
    except FileNotFoundError:
        pass


def claim(target: Path) -> bool:
    """Whether this process should fetch ``target``: False while another process's fresh marker says it is."""
    marker = target.with_name(target.name + ".fetching")
    for _ in range(2):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            try:
                if time.time() - marker.stat().st_mtime < STALE_S:
                    return False
                marker.unlink()
            except FileNotFoundError:
                continue
    return False


def release(target: Path) -> None:
    """Drop the marker :func:`claim` left."""
    target.with_name(target.name + ".fetching").unlink(missing_ok=True)


def wait_for(target: Path, seconds: float = STALE_S) -> bool:
    """Wait (polling) until another process has written ``target``; False if it has not within ``seconds``."""
    deadline = time.monotonic() + seconds
    marker = target.with_name(target.name + ".fetching")
    while time.monotonic() < deadline:
        if target.exists():
            return True
        if not marker.exists():
            return target.exists()
        time.sleep(0.01)
    return target.exists()


def local_file(path: str | os.PathLike) -> Path:
    """A local file with the content of ``path``: the path itself when local; for a URL the node-local copy of the
    object's current version, downloaded once (the ``.idx`` of a remote pair, memory-mapped from here)."""
    text = str(path)
    if not is_remote(text):
        return Path(local_form(text))
    found = info(text)
    target = object_dir(found) / "whole"
    while not (target.exists() and target.stat().st_size == found.size):
        if claim(target):
            try:
                with atomic_path(target) as temporary:
                    download(text, temporary)
                note_written(found.size)
            finally:
                release(target)
        else:
            wait_for(target)
    touch(target)
    return target


def note_written(count: int) -> None:
    """Count bytes this process added; prune once they pass a sixteenth of the budget."""
    with _lock:
        _written["bytes"] += count
        due = _written["bytes"] >= budget_bytes() // 16
        if due:
            _written["bytes"] = 0
    if due:
        prune()


def prune(budget: int | None = None) -> int:
    """Delete the least recently used cached files until the cache holds at most 90% of ``budget``; returns the
    bytes freed. Files used in the last ``STALE_S`` seconds are kept."""
    budget = budget_bytes() if budget is None else budget
    files = []
    for folder in cache_root().glob("*"):
        for entry in os.scandir(folder) if folder.is_dir() else ():
            if entry.name == "whole" or entry.name.endswith(".chunk"):
                try:
                    stat = entry.stat()
                except FileNotFoundError:  # pruned by another process meanwhile
                    continue
                files.append((stat.st_mtime, stat.st_size, entry.path))
    total = sum(size for _, size, _ in files)
    freed, now = 0, time.time()
    for mtime, size, path in sorted(files):
        if total - freed <= 0.9 * budget:
            break
        if now - mtime < STALE_S:
            continue
        try:
            os.unlink(path)
            freed += size
        except FileNotFoundError:
            pass
    if freed:
        log.info("object cache %s: removed %.1f MB of least recently used data", cache_root(), freed / 1e6)
    return freed
