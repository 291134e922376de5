"""The files one run writes: a ``.bin/.idx`` writer per json key and the skipped-records list.

All of them are written under temporary names and can be checkpointed (made durable, sizes recorded)
and reopened at a checkpoint, which is what makes ``--resume`` after ``kill -9`` byte-exact. They are local
files: a remote output is written under its staging prefix and :func:`publish_outputs` uploads it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import orjson

from corpus.core.disk import guard
from corpus.indexed import IndexedWriter, finish_interrupted_finalize
from corpus.indexed.handover import file_crc32
from corpus.indexed.publish import publish_file, publish_pair


def output_prefix_for(prefix: str, key: str) -> str:
    """Megatron's naming: ``P_<key>_document`` (``.bin``/``.idx``/``.meta.json``)."""
    return f"{prefix}_{key}_document"


class SkippedLog:
    """``P.skipped.jsonl``: one JSON line per skipped record (location and reason), appended as the
    run goes; renamed into place at the end, and only when something was skipped."""

    def __init__(self, prefix: str, resume_bytes: int | None = None) -> None:
        self.path = Path(f"{prefix}.skipped.jsonl")
        self.partial = Path(f"{prefix}.skipped.jsonl.partial")
        with guard(self.partial):
            if resume_bytes is None:
                self._file = open(self.partial, "wb")
            else:
                if not self.partial.exists() and self.path.exists():  # renamed just before a crash
                    os.replace(self.path, self.partial)
                self._file = open(self.partial, "r+b" if self.partial.exists() else "wb")
                self._file.truncate(resume_bytes)
                self._file.seek(resume_bytes)
        self.count_written = 0

    def add(self, location: dict, reason: str) -> None:
        with guard(self.partial):
            self._file.write(orjson.dumps({**location, "reason": reason}) + b"\n")
        self.count_written += 1

    def checkpoint(self) -> int:
        with guard(self.partial):
            self._file.flush()
            os.fsync(self._file.fileno())
        return self._file.tell()

    def written(self) -> dict:
        """Hand the list over (flushed, not synced, closed) for another run's :meth:`append`: its size and crc32
        (:mod:`corpus.indexed.handover`)."""
        with guard(self.partial):
            self._file.flush()
            size = self._file.tell()
            self._file.close()
        return {"bytes": size, "crc32": file_crc32(self.partial)}

    def append(self, path: Path, size: int, shift: tuple[str, int] | None = None) -> None:
        """Append the first ``size`` bytes of another list (a part's). ``shift = (file, lines)`` adds ``lines`` to
        the line numbers of that file's entries: the part numbered them from a cut inside the file (see
        :attr:`corpus.readers.Slice.relative_lines`)."""
        with open(path, "rb") as source:
            data = source.read(size)
        if shift and shift[1]:
            entries = [orjson.loads(line) for line in data.splitlines()]
            data = b"".join(orjson.dumps({**entry, "line": entry["line"] + shift[1]} if entry["file"] == shift[0]
                                         and "line" in entry else entry) + b"\n" for entry in entries)
        with guard(self.partial):
            self._file.write(data)
        self.count_written += data.count(b"\n")

    def finalize(self, keep: bool) -> None:
        """Rename into place when ``keep`` (something was skipped); otherwise remove it and any stale
        list from an earlier run, which would otherwise be mistaken for this run's."""
        with guard(self.partial):
            self._file.close()
            if keep:
                os.replace(self.partial, self.path)
            else:
                self.partial.unlink(missing_ok=True)
                self.path.unlink(missing_ok=True)

    def close(self) -> None:
        """Close, keeping the partial list for ``--resume`` (a failing flush loses only records past the last
        checkpoint, which a resumed run writes again)."""
        try:
            self._file.close()
        except OSError:
            pass

    def abort(self) -> None:
        self.close()
        self.partial.unlink(missing_ok=True)


class Outputs:
    """One writer per key plus the skipped log; opened fresh or at a checkpoint."""

    def __init__(self, prefix: str, keys: list[str], dtype: np.dtype, state: dict | None = None,
                 part: bool = False) -> None:
        """``part``: the files of a part of a run, joined and deleted (see :meth:`written`)."""
        self.prefixes = {key: output_prefix_for(prefix, key) for key in keys}
        writers = (state or {}).get("writers", {})
        self.writers = {key: IndexedWriter(p, dtype, resume=writers.get(key) if state else None,
                                           handed_over=part) for key, p in self.prefixes.items()}
        self.skipped = SkippedLog(prefix, state["skipped_bytes"] if state else None)

    def add(self, tokens: list[np.ndarray], lengths: list[np.ndarray]) -> None:
        """Append one batch's documents to every key's file."""
        for writer, flat, sizes in zip(self.writers.values(), tokens, lengths):
            writer.add_documents(flat, sizes)

    def checkpoint(self) -> dict:
        """Make every file durable; the state that reopens them exactly here."""
        return {"writers": {key: writer.checkpoint() for key, writer in self.writers.items()},
                "skipped_bytes": self.skipped.checkpoint()}

    def written(self) -> dict:
        """Hand every file over, flushed and closed, for the join of a run's parts (:meth:`append_written`)."""
        return {"writers": {key: writer.written() for key, writer in self.writers.items()},
                "skipped": self.skipped.written()}

    def append_written(self, prefix: str, written: dict, shift: tuple[str, int] | None = None) -> None:
        """Append what a part's outputs under ``prefix`` handed over with :meth:`written` (``shift``: see
        :meth:`SkippedLog.append`)."""
        for key, writer in self.writers.items():
            writer.append_written(output_prefix_for(prefix, key), written["writers"][key])
        self.skipped.append(Path(f"{prefix}.skipped.jsonl.partial"), written["skipped"]["bytes"], shift)

    def finalize(self, metas: dict[str, dict], keep_skipped: bool) -> None:
        """Write indexes and sidecars and rename everything into place."""
        for key, writer in self.writers.items():
            writer.finalize(metas[key])
        self.skipped.finalize(keep_skipped)

    def abort(self) -> None:
        """Delete every partial file (the final names are never touched)."""
        for writer in self.writers.values():
            writer.abort()
        self.skipped.abort()

    def close(self) -> None:
        """Leave the partial files for ``--resume`` (after an interruption)."""
        for writer in self.writers.values():
            writer.close()
        self.skipped.close()


def publish_outputs(stage: str, prefix: str, keys: list[str]) -> None:
    """Upload every key's finished pair from the local ``stage`` to the remote ``prefix``, then the skipped-records
    list (or remove a stale one there, as a local run does)."""
    for key in keys:
        publish_pair(output_prefix_for(stage, key), output_prefix_for(prefix, key))
    publish_file(f"{stage}.skipped.jsonl", f"{prefix}.skipped.jsonl")


def unfinished_keys(prefix: str, keys: list[str]) -> list[str]:
    """After a crash during finalization: finish what only needed renaming and return the keys whose
    writers must be reopened and finalized again."""
    return [key for key in keys if not finish_interrupted_finalize(output_prefix_for(prefix, key))]
