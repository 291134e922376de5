"""Turn what users type (prefixes, ``.idx``/``.bin`` paths, globs, directories) into dataset prefixes.

Shared by ``corpus merge``, ``corpus inspect`` and blends so every command accepts the same spellings, for local
paths and URLs alike (``s3://bucket/shards/*_text_document``; a key prefix counts as a directory).
"""

from __future__ import annotations

import os

from corpus import storage
from corpus.indexed import idx_path, strip_suffix
from corpus.indexed.errors import PrefixNotFound


def expand(spec: str | os.PathLike) -> list[str]:
    """Prefixes named by one spec, sorted when it is a glob or a directory.

    - a directory: every ``*.idx`` directly inside it;
    - a glob: matched against prefixes (``data/*_text_document``) or files (``data/*.idx``);
    - otherwise a prefix, or a ``.idx``/``.bin`` path.
    """
    text = str(spec)
    if storage.isdir(text):
        found = sorted(strip_suffix(p) for p in storage.glob(storage.join(storage.escape(text), "*.idx")))
        if not found:
            raise PrefixNotFound(f"{text}: directory holds no .idx files")
        return found
    if storage.has_magic(text):
        pattern = strip_suffix(text)
        found = sorted(strip_suffix(p) for p in storage.glob(pattern + ".idx"))
        if not found:
            raise PrefixNotFound(f"{text}: glob matched no .idx files (pattern {pattern}.idx)")
        return found
    prefix = strip_suffix(text)
    if not idx_path(prefix).is_file():
        raise PrefixNotFound(f"{prefix}.idx: no such file (give a prefix, an .idx/.bin path, a glob or a directory)")
    return [prefix]


def expand_all(specs: list[str] | tuple[str, ...]) -> list[str]:
    """Expand several specs, keeping the order they were given in (each glob sorted inside)."""
    prefixes: list[str] = []
    for spec in specs:
        prefixes.extend(expand(spec))
    return prefixes
