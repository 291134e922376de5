"""Paths as users write them: a local path, or a URL of an object store (``s3://bucket/key``).

Pure string work, no I/O: which paths are remote, and the ``os.path``/``glob`` helpers that also keep a URL's
``//`` (``os.path.normpath`` and ``pathlib`` would fold ``s3://b/k`` into ``s3:/b/k``).
"""

from __future__ import annotations

import glob as _glob
import os
import posixpath
import re
from typing import Callable, NamedTuple

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def protocol_of(path: str | os.PathLike) -> str | None:
    """``s3`` for ``s3://bucket/key``; None for a local path (``file://`` URLs count as local)."""
    match = _URL.match(str(path))
    if not match or match.group(1).lower() == "file":
        return None
    return match.group(1).lower()


def is_remote(path: str | os.PathLike) -> bool:
    """Whether ``path`` names an object in a store (any ``scheme://`` but ``file://``)."""
    return protocol_of(path) is not None


def local_form(path: str | os.PathLike) -> str:
    """A local path with any ``file://`` removed."""
    text = str(path)
    return text[len("file://"):] if text.lower().startswith("file://") else text


def join(base: str, *parts: str) -> str:
    """``os.path.join`` that keeps URLs intact (``s3://b/dir`` + ``x`` = ``s3://b/dir/x``)."""
    if not is_remote(base):
        return os.path.join(base, *parts)
    return posixpath.join(base, *parts)


def parent(path: str) -> str:
    """The folder holding ``path`` (``s3://b/dir`` for ``s3://b/dir/x``)."""
    if not is_remote(path):
        return os.path.dirname(path)
    head, tail = path.rstrip("/").rsplit("/", 1)
    return head if not head.endswith(":/") else head + "/" + tail


def basename(path: str) -> str:
    """The last component of ``path``."""
    return posixpath.basename(path.rstrip("/")) if is_remote(path) else os.path.basename(path)


def has_magic(path: str) -> bool:
    """Whether ``path`` is a glob pattern."""
    return _glob.has_magic(path)


class GlobListing(NamedTuple):
    """What a remote glob lists, and how it tells a listed name (``bucket/key``) that matches."""

    folder: str
    """The pattern's literal folder (``bucket/key``, no scheme): nothing outside it can match."""
    one_level: bool
    """Only the folder's own objects can match (every wildcard in the last part, no ``**``)."""
    matches: Callable[[str], object]
    """The test of a listed name, in fsspec's glob syntax (``*`` within a folder, ``**`` across folders)."""


def glob_listing(pattern: str) -> GlobListing:
    """How to list the objects a remote glob ``pattern`` matches: below its literal folder only, and only that
    folder when every wildcard is in the last part."""
    from fsspec.utils import glob_translate

    path = pattern.split("://", 1)[1]
    literal = re.split(r"[*?\[]", path, maxsplit=1)[0]
    folder = literal.rsplit("/", 1)[0] if "/" in literal else ""
    if not folder:
        raise ValueError(f"{pattern}: a wildcard in the bucket name")
    one_level = "**" not in path and "/" not in path[len(folder) + 1:]
    return GlobListing(folder, one_level, re.compile(glob_translate(path)).match)


def escape(path: str) -> str:
    """``path`` with glob characters escaped (the scheme of a URL left alone)."""
    match = _URL.match(path)
    if not match or not is_remote(path):
        return _glob.escape(path)
    return match.group(0) + _glob.escape(path[match.end():])


def absolute(path: str) -> str:
    """``os.path.abspath`` for a local path; a URL as it is."""
    return path if is_remote(path) else os.path.abspath(path)
