"""Turn what users pass as ``--input`` (files, globs, directories) into an ordered list of input files.

Order is the user's: inputs in the order given, each glob or directory sorted, so the output's
document order never depends on the file system's listing order. A URL (``s3://bucket/web/*.jsonl.zst``) is
listed in the store: a glob, a key prefix (a "directory": every object under it) or one object.
"""

from __future__ import annotations

import glob
import logging
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from corpus import storage
from corpus.core.errors import InputError

log = logging.getLogger(__name__)

#: File name endings we read, longest first, and the format each one names.
FORMATS: dict[str, str] = {
    ".jsonl.gz": "jsonl.gz", ".json.gz": "jsonl.gz", ".ndjson.gz": "jsonl.gz",
    ".jsonl.zst": "jsonl.zst", ".json.zst": "jsonl.zst", ".ndjson.zst": "jsonl.zst",
    ".jsonl.zstd": "jsonl.zst", ".json.zstd": "jsonl.zst",
    ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
    ".parquet": "parquet", ".pq": "parquet",
}


@dataclass(frozen=True)
class InputFile:
    """One input file, with what resume and the sidecar need to recognise it later."""

    path: str
    format: str
    size: int
    mtime_ns: int
    version: str | None = None
    """An object's ETag or version id (None for a local file)."""

    def listed(self) -> storage.ObjectInfo | None:
        """An object as its listing described it (None for a local file): opening it then needs no HEAD."""
        return storage.ObjectInfo(self.path, self.size, self.mtime_ns, self.version) if self.version else None

    def identity(self) -> dict:
        """Path, size, modification time (and an object's version): a resumed run refuses inputs that changed."""
        identity = {"path": self.path, "size": self.size, "mtime_ns": self.mtime_ns}
        return identity if self.version is None else {**identity, "version": self.version}


def format_of(path: str) -> str | None:
    """The format a file name says (``jsonl``, ``jsonl.gz``, ``jsonl.zst``, ``parquet``), or None."""
    lower = path.lower()
    return next((fmt for ending, fmt in FORMATS.items() if lower.endswith(ending)), None)


def _format(path: str) -> str:
    fmt = format_of(path)
    if fmt is None:
        endings = ", ".join(sorted(set(FORMATS)))
        raise InputError(f"{path}: unsupported input format (supported endings: {endings})")
    return fmt


def _describe(path: str) -> InputFile:
    fmt = _format(path)
    try:
        stat = os.stat(path)
    except OSError as error:
        raise InputError(f"{path}: cannot read ({error.strerror})") from None
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: permission denied")
    return InputFile(path=path, format=fmt, size=stat.st_size, mtime_ns=stat.st_mtime_ns)


def _readable(spec: str, found: list[str]) -> list[str]:
    """The files of a glob or directory that have a format we read (the others are logged)."""
    readable = [p for p in found if format_of(p)]
    if len(readable) < len(found):
        log.info("%s: ignoring %d file(s) that are not .jsonl/.json(.gz/.zst)/.parquet", spec,
                 len(found) - len(readable))
    if not readable:
        raise InputError(f"{spec}: matched no .jsonl, .jsonl.gz, .jsonl.zst or .parquet file")
    return readable


def _remote_files(spec: str) -> list[InputFile]:
    """The objects named by a remote spec, described from the listing (no request per object)."""
    try:
        objects = storage.list_objects(spec)
    except storage.ObjectNotFound:
        raise InputError(f"{spec}: no such object or key prefix") from None
    if storage.has_magic(spec) or [o.path for o in objects] != [spec]:
        keep = set(_readable(spec, [o.path for o in objects]))
        objects = [o for o in objects if o.path in keep]
    return [InputFile(o.path, _format(o.path), o.size, o.mtime_ns, o.version) for o in objects]


def _matches(spec: str) -> list[str]:
    """Files named by one spec: a directory (searched recursively), a glob, or a single file."""
    if os.path.isdir(spec):
        found = sorted(str(p) for p in Path(spec).rglob("*") if p.is_file())
    elif glob.has_magic(spec):
        found = sorted(p for p in glob.glob(spec, recursive=True) if os.path.isfile(p))
    else:
        if not os.path.exists(spec):
            raise InputError(f"{spec}: no such file or directory")
        return [spec]
    return _readable(spec, found)


def expand_inputs(specs: list[str] | tuple[str, ...]) -> list[InputFile]:
    """Expand every ``--input`` spec into files, keeping the order given (globs and directories sorted)."""
    if not specs:
        raise InputError("no --input given")
    files = [file for spec in map(str, specs)
             for file in (_remote_files(spec) if storage.is_remote(spec) else map(_describe, _matches(spec)))]
    repeated = sorted(path for path, count in Counter(f.path for f in files).items() if count > 1)
    if repeated:
        log.warning("input file(s) given more than once, their documents will be repeated: %s", ", ".join(repeated))
    return files
