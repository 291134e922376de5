"""A content-addressed, concurrent-safe on-disk cache of numpy arrays (the index maps).

An entry is a folder ``<kind>-<key>/`` holding ``<name>.npy`` files and ``manifest.json`` (dtype,
shape, byte size and crc32 of every file, plus a human-readable description). ``key`` is a
sha256 of everything that changes the arrays, computed by the caller.

- Atomic: an entry is built in a private temporary folder and renamed into place; a reader never
  sees half an entry. (No fsync: a file torn by a power loss fails its checks and is rebuilt.)
- One build: builders take ``<kind>-<key>.lock`` (an ``fcntl`` lock through ``filelock``, released
  by the kernel if the holder dies, so nobody hangs on a crashed builder) and look again before
  building, so any number of processes asking at once get exactly one build per filesystem.
- Trusted only after checking: a truncated, resized or corrupted file (crc32 mismatch, ~7 GB/s)
  is detected at load, logged, and the entry rebuilt.

Default location: ``$BLENDFORGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/blendforge/index_maps``
(``~/.cache/blendforge/index_maps``); a blend's ``cache_dir`` overrides both. A remote ``cache_dir``
(``s3://bucket/index_maps``) is shared by every node: entries live in a local mirror of it (in the object cache,
:func:`corpus.storage.object_cache.mirror_dir`), are downloaded from it when there and verified, and a
node that builds one uploads its ``.npy`` files first and its manifest last (the manifest is what makes an entry
visible). Nodes building the same entry at once write the same bytes, so the last upload is as good as the first.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from corpus import storage
from corpus.core.cache import default_cache_dir
from corpus.core.errors import UserError
from corpus.storage.object_cache import mirror_dir

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
#: Staging folders older than this are leftovers of a killed builder (cleared when that entry is built).
STALE_SECONDS = 3600
_CRC_BLOCK = 64 << 20


def cache_key(material: object) -> str:
    """sha256 of a JSON-serialisable description (sorted keys, so dict order never matters)."""
    text = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class _CorruptEntry(Exception):
    """An entry on disk does not match its manifest (private: the cache rebuilds the entry, so no user sees it)."""


@dataclass
class Entry:
    """A loaded cache entry: memory-mapped arrays, the metadata saved with them, and whether this
    process built it (tests count builds with it)."""

    path: Path
    arrays: dict[str, np.ndarray]
    meta: dict
    built: bool = field(default=False)


def _crc32(array: np.ndarray) -> int:
    flat = array.reshape(-1).view(np.uint8) if array.size else np.empty(0, np.uint8)
    crc = 0
    for start in range(0, flat.size, _CRC_BLOCK):
        crc = zlib.crc32(flat[start : start + _CRC_BLOCK], crc)
    return crc


def _write_entry(folder: Path, arrays: dict[str, np.ndarray], meta: dict, description: dict) -> None:
    files = {}
    for name, array in arrays.items():
        array = np.ascontiguousarray(array)
        target = folder / f"{name}.npy"
        with open(target, "wb") as handle:
            np.save(handle, array, allow_pickle=False)
        files[name] = {"dtype": array.dtype.str, "shape": list(array.shape), "bytes": target.stat().st_size,
                       "crc32": _crc32(array)}
    manifest = {"files": files, "meta": meta, "description": description,
                "built_by": {"host": socket.gethostname(), "pid": os.getpid()}}
    with open(folder / MANIFEST, "w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)


def _read_entry(folder: Path, checksums: bool = True) -> Entry:
    """Load and verify an entry (``checksums=False``: sizes, dtypes and shapes only, for an entry
    this process just wrote); raise _CorruptEntry on any mismatch, FileNotFoundError if absent."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        files = manifest["files"]
    except FileNotFoundError:
        raise
    except (ValueError, KeyError, TypeError) as error:
        raise _CorruptEntry(f"{folder / MANIFEST}: unreadable manifest ({error})") from None
    arrays = {}
    for name, expected in files.items():
        path = folder / f"{name}.npy"
        try:
            if path.stat().st_size != expected["bytes"]:
                raise _CorruptEntry(f"{path}: {path.stat().st_size} bytes, manifest says {expected['bytes']}")
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except FileNotFoundError:
            raise _CorruptEntry(f"{path}: missing") from None
        except ValueError as error:
            raise _CorruptEntry(f"{path}: not a valid .npy ({error})") from None
        if array.dtype.str != expected["dtype"] or list(array.shape) != expected["shape"]:
            raise _CorruptEntry(f"{path}: dtype/shape differ from the manifest")
        if checksums and _crc32(array) != expected["crc32"]:
            raise _CorruptEntry(f"{path}: crc32 mismatch (corrupt file)")
        arrays[name] = array
    return Entry(folder, arrays, manifest.get("meta", {}))


class MapCache:
    """The cache rooted at one folder (created on first write)."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.remote = str(root) if root is not None and storage.is_remote(root) else None
        """The shared remote folder (None for a local cache); :attr:`root` is then its local mirror."""
        self.root = mirror_dir(self.remote) if self.remote else Path(root) if root is not None else default_cache_dir()

    def entry_path(self, kind: str, key: str) -> Path:
        """The folder of entry ``kind``/``key``."""
        return self.root / f"{kind}-{key[:40]}"

    def has(self, kind: str, key: str) -> bool:
        """Whether an entry is present (not verified: a cheap look before deciding to build)."""
        return (self.entry_path(kind, key) / MANIFEST).is_file() or bool(
            self.remote and storage.isfile(self._remote_path(kind, key, MANIFEST)))

    def load(self, kind: str, key: str) -> Entry | None:
        """The verified entry, or None when it is absent or corrupt (a corrupt one is logged)."""
        try:
            return _read_entry(self.entry_path(kind, key))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except _CorruptEntry as error:
            log.warning("cache entry corrupt, will rebuild: %s", error)
            return None

    def get_or_build(self, kind: str, key: str, build: Callable[[], tuple[dict[str, np.ndarray], dict]],
                     description: dict | None = None) -> Entry:
        """Load the entry ``kind``/``key``, building it with ``build() -> (arrays, meta)`` if needed.

        Exactly one of any number of concurrent callers builds; the others wait on the lock and
        then load what it wrote.
        """
        entry = self.load(kind, key)
        if entry is not None:
            return entry
        from filelock import FileLock

        final = self.entry_path(kind, key)
        with self._writing():
            self.root.mkdir(parents=True, exist_ok=True)
            lock = FileLock(str(self.root / f"{final.name}.lock"))
            lock.acquire()
        try:
            entry = self.load(kind, key)
            if entry is not None:  # built by another process while we waited
                return entry
            if self.remote and self._download(kind, key):
                entry = self.load(kind, key)
                if entry is not None:
                    return entry
            for leftover in self.root.glob(f".tmp-{final.name}-*"):  # from a builder killed mid-write
                if time.time() - leftover.stat().st_mtime > STALE_SECONDS:
                    shutil.rmtree(leftover, ignore_errors=True)
            arrays, meta = build()
            with self._writing():
                self._publish(kind, key, lambda folder: _write_entry(folder, arrays, meta,
                                                                     {"kind": kind, "key": key, **(description or {})}))
            if self.remote:
                self._upload(kind, key)
        finally:
            lock.release()
        entry = _read_entry(final, checksums=False)
        entry.built = True
        return entry

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Turn a failed write into a message saying where the cache is and what to do."""
        try:
            yield
        except OSError as error:
            raise UserError(f"cannot write the index-map cache {self.root} ({error.strerror or error}); set "
                            "cache_dir in the blend or $BLENDFORGE_CACHE_DIR to a writable folder, or prebuild "
                            "the maps where it is writable with `corpus blend FILE --build`") from None

    def _remote_path(self, kind: str, key: str, name: str) -> str:
        return storage.join(self.remote, self.entry_path(kind, key).name, name)

    def _download(self, kind: str, key: str) -> bool:
        """Copy the entry from the remote cache into the local mirror; False when the remote has none (or a
        corrupt one, which is then rebuilt and uploaded again)."""
        try:
            manifest = json.loads(storage.read_bytes(self._remote_path(kind, key, MANIFEST)))
        except FileNotFoundError:
            return False

        def fill(folder: Path) -> None:
            for name in manifest["files"]:
                try:
                    storage.download(self._remote_path(kind, key, f"{name}.npy"), folder / f"{name}.npy")
                except FileNotFoundError as missing:  # storage.ObjectNotFound: an entry cut short remotely
                    raise _CorruptEntry(str(missing)) from None
            (folder / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
            _read_entry(folder)

        try:
            with self._writing():
                self._publish(kind, key, fill)
        except (_CorruptEntry, ValueError, KeyError, TypeError) as error:
            log.warning("remote cache entry %s is corrupt, will rebuild: %s", self._remote_path(kind, key, ""), error)
            return False
        log.info("downloaded %s", self._remote_path(kind, key, ""))
        return True

    def _upload(self, kind: str, key: str) -> None:
        """Copy a locally built entry to the remote cache, its manifest last."""
        final = self.entry_path(kind, key)
        for path in sorted(final.glob("*.npy")):
            storage.upload(path, self._remote_path(kind, key, path.name))
        storage.upload(final / MANIFEST, self._remote_path(kind, key, MANIFEST))

    def _publish(self, kind: str, key: str, fill: Callable[[Path], None]) -> None:
        """Write the entry with ``fill(folder)`` into a private folder, then swap it in (moving a corrupt
        predecessor aside first)."""
        final = self.entry_path(kind, key)
        staging = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=self.root))
        try:
            fill(staging)
            if final.exists():
                trash = Path(tempfile.mkdtemp(prefix=f".trash-{final.name}-", dir=self.root))
                os.replace(final, trash / "entry")
                shutil.rmtree(trash, ignore_errors=True)
            try:
                os.replace(staging, final)
            except OSError:
                # NOTE: only reachable where the filesystem ignores the lock (some NFS setups): another
                # builder published first; its entry is as good as ours if it verifies.
                if self.load(kind, key) is None:
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
