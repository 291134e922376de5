"""Cached verdicts of the fast-encoder check, so a run need not load the reference library to know them.

The check (:mod:`corpus.tokenizers.select`) depends only on the tokenizer, never on the input: its verdict,
what gigatoken is built from and the reference's :class:`~corpus.tokenizers.gigatoken.Profile` are kept as
``<key>.json`` and ``<key>.source`` (the bytes gigatoken reads) in the ``tokenizer_checks`` cache folder
(:mod:`corpus.core.cache`). The key is a sha256 of the tokenizer files' bytes, the options that change ids, the
versions of gigatoken and of the reference library, and the source of this package (changed adapters or checks
never reuse an old verdict). Entries are written atomically; one that cannot be read or parsed, or whose source
fails its sha256, is a miss; a cache folder that cannot be written only means the next run checks again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from pathlib import Path

from corpus.core.atomic_write import write_atomically
from corpus.core.cache import cache_folder
from corpus.indexed.sidecar import fingerprint_files
from corpus.tokenizers.base import library_version
from corpus.tokenizers.config import TokenizerConfig
from corpus.tokenizers.registry import lookup

log = logging.getLogger(__name__)

#: Config fields that change no id: where the files are (their bytes are in the key instead), and which encoder is
#: asked for (the verdict is about the tokenizer, whoever asks).
NOT_IN_KEY = ("model", "vocab_file", "merge_file", "encoder")


def folder() -> Path:
    """Where verdicts live (the ``tokenizer_checks`` cache folder)."""
    return cache_folder("tokenizer_checks")


@functools.cache
def _code_digest() -> str:
    """sha256 of this package's source: the adapters and the check that a verdict depends on."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def key_for(config: TokenizerConfig, files: list[str]) -> str:
    """The cache key of ``config``'s check (its files are read: their bytes are the tokenizer)."""
    options = {name: value for name, value in config.to_dict().items() if name not in NOT_IN_KEY}
    material = {"options": options, "files": fingerprint_files(files), "code": _code_digest(),
                "libraries": [library_version("gigatoken"), library_version(lookup(config.type).library or "")]}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def load(key: str) -> tuple[dict, bytes | None] | None:
    """The verdict stored under ``key`` and its source bytes (None for a verdict without one), or None."""
    base = folder() / key
    try:
        verdict = json.loads((base.with_suffix(".json")).read_text(encoding="utf-8"))
        if not isinstance(verdict, dict) or not isinstance(verdict.get("fast"), bool):
            raise ValueError("not a verdict")
        if not verdict["fast"]:
            return verdict, None
        source = base.with_suffix(".source").read_bytes()
        if hashlib.sha256(source).hexdigest() != verdict["source_sha256"]:
            raise ValueError("its source does not match its sha256")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.debug("tokenizer check %s: cached entry unusable (%s); checking again", key[:12], error)
        return None
    return verdict, source


def store(key: str, verdict: dict, source: bytes | None) -> None:
    """Keep ``verdict`` (and the source gigatoken reads) under ``key``; a failure is logged, never raised."""
    base = folder() / key
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
        if source is not None:
            verdict = {**verdict, "source_sha256": hashlib.sha256(source).hexdigest()}
            write_atomically(base.with_suffix(".source"), source)  # first: a verdict never points at a missing source
        write_atomically(base.with_suffix(".json"), json.dumps(verdict, indent=1).encode())
    except OSError as error:
        log.warning("cannot cache the tokenizer check in %s (%s): the next run checks again", base.parent, error)
