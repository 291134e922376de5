"""Turn what users pass as ``--input`` (files, globs, directories) into an ordered list of input files.

Order is the user's: inputs in the order given, each glob or directory sorted, so the output's
document order never depends on the file system's listing order.
"""

from __future__ import annotations

import glob
import logging
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from corpus.core.errors import UserError

log = logging.getLogger(__name__)

#: File name endings we read, longest first, and the format each one names.
FORMATS: dict[str, str] = {
    ".jsonl.gz": "jsonl.gz", ".json.gz": "jsonl.gz", ".ndjson.gz": "jsonl.gz",
    ".jsonl.zst": "jsonl.zst", ".json.zst": "jsonl.zst", ".ndjson.zst": "jsonl.zst",
    ".jsonl.zstd": "jsonl.zst", ".json.zstd": "jsonl.zst",
    ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
    ".parquet": "parquet", ".pq": "parquet",
}


class InputError(UserError):
    """An ``--input`` names nothing readable (missing file, unsupported format, empty glob)."""


@dataclass(frozen=True)
class InputFile:
    """One input file, with what resume and the sidecar need to recognise it later."""

    path: str
    format: str
    size: int
    mtime_ns: int

    def identity(self) -> dict:
        """Path, size and modification time: a resumed run refuses inputs that changed."""
        return {"path": self.path, "size": self.size, "mtime_ns": self.mtime_ns}


def format_of(path: str) -> str | None:
    """The format a file name says (``jsonl``, ``jsonl.gz``, ``jsonl.zst``, ``parquet``), or None."""
    lower = path.lower()
    return next((fmt for ending, fmt in FORMATS.items() if lower.endswith(ending)), None)


def _describe(path: str) -> InputFile:
    fmt = format_of(path)
    if fmt is None:
        endings = ", ".join(sorted(set(FORMATS)))
        raise InputError(f"{path}: unsupported input format (supported endings: {endings})")
    try:
        stat = os.stat(path)
    except OSError as error:
        raise InputError(f"{path}: cannot read ({error.strerror})") from None
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: permission denied")
    return InputFile(path=path, format=fmt, size=stat.st_size, mtime_ns=stat.st_mtime_ns)


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
    readable = [p for p in found if format_of(p)]
    if len(readable) < len(found):
        log.info("%s: ignoring %d file(s) that are not .jsonl/.json(.gz/.zst)/.parquet", spec,
                 len(found) - len(readable))
    if not readable:
        raise InputError(f"{spec}: matched no .jsonl, .jsonl.gz, .jsonl.zst or .parquet file")
    return readable


def expand_inputs(specs: list[str] | tuple[str, ...]) -> list[InputFile]:
    """Expand every ``--input`` spec into files, keeping the order given (globs and directories sorted)."""
    if not specs:
        raise InputError("no --input given")
    files = [_describe(path) for spec in specs for path in _matches(str(spec))]
    repeated = sorted(path for path, count in Counter(f.path for f in files).items() if count > 1)
    if repeated:
        log.warning("input file(s) given more than once, their documents will be repeated: %s", ", ".join(repeated))
    return files
