"""The ``<prefix>.meta.json`` sidecar: what wrote a token file and with which tokenizer.

Megatron ignores the sidecar and nothing needs it to read the data; our readers use it to refuse
mixing tokenizers (merge, blends) and to decode (inspect). Writes are atomic (temp name + rename).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable

from corpus import storage
from corpus.storage import ObjectPath

TOOL_NAME = "blendforge"
SIDE_SUFFIX = ".meta.json"


def path_for(prefix: str | os.PathLike) -> Path | ObjectPath:
    """The sidecar path of a dataset prefix (an :class:`~corpus.storage.ObjectPath` for a URL)."""
    return storage.as_path(f"{prefix}{SIDE_SUFFIX}")


def tool_version() -> str:
    """The installed blendforge version (recorded in every sidecar)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("blendforge")
    except PackageNotFoundError:
        return "0+unknown"


def write(prefix: str | os.PathLike, meta: dict) -> None:
    """Atomically write the sidecar of ``prefix``."""
    target = path_for(prefix)
    partial = target.with_name(target.name + ".partial")
    document = {"tool": TOOL_NAME, "tool_version": tool_version(), **meta}
    partial.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    os.replace(partial, target)


def read(prefix: str | os.PathLike) -> dict | None:
    """The sidecar of ``prefix`` as a dict, or None when there is none (files written by Megatron).

    A sidecar that exists but is not valid JSON raises ValueError naming the file.
    """
    target = path_for(prefix)
    try:
        text = target.read_text()
    except FileNotFoundError:  # storage.ObjectNotFound for an object
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{target}: not valid JSON ({error}); delete it or re-run corpus tokenize") from None


def fingerprint_files(paths: Iterable[str | os.PathLike]) -> str:
    """sha256 over the bytes of each file in order (a tokenizer's identity, independent of its path)."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()


def options_hash(options: dict) -> str:
    """A stable short hash of a JSON-serialisable options dict."""
    return hashlib.sha256(json.dumps(options, sort_keys=True, default=str).encode()).hexdigest()[:16]


def tokenizer_identity(meta: dict | None) -> tuple | None:
    """What must match for two files to share a token space: tokenizer type, file fingerprint and
    the options that change ids. None when unknown (no sidecar or no tokenizer recorded)."""
    if not meta or "tokenizer" not in meta:
        return None
    tokenizer = meta["tokenizer"]
    options = json.dumps(tokenizer.get("options", {}), sort_keys=True)
    return (tokenizer.get("type"), tokenizer.get("fingerprint"), options)
