"""The ``<prefix>.meta.json`` sidecar: what wrote a token file and with which tokenizer.

Megatron ignores the sidecar and nothing needs it to read the data; our readers use it to refuse
mixing tokenizers (merge, blends) and to decode (inspect). Writes are atomic (temp name + rename). A sidecar
is read through its schema (:data:`SCHEMA`): a value of the wrong type, or a count missing from one this tool
wrote, is a :class:`SidecarError` (``corpus inspect --check`` lists each one), never a ``TypeError`` later.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable, Iterable

from corpus import storage
from corpus.core.atomic_write import write_atomically
from corpus.core.disk import guard
from corpus.indexed.errors import SidecarError
from corpus.storage import ObjectPath

TOOL_NAME = "blendforge"
SIDE_SUFFIX = ".meta.json"


def _count(value: object) -> bool:
    return type(value) is int and value >= 0


def _positive(value: object) -> bool:
    return type(value) is int and value > 0


def _token_id(value: object) -> bool:
    return value is None or _count(value)


def _kind(*types: type) -> Callable[[object], bool]:
    return lambda value: type(value) in types


#: Each key a sidecar may hold: the test its value must pass and what that test wants (for messages). Keys not
#: listed are kept and not checked (another version may add some).
SCHEMA: dict[str, tuple[Callable[[object], bool], str]] = {
    "tool": (_kind(str), "a string"),
    "tool_version": (_kind(str), "a string"),
    "tokenizer": (_kind(dict), "an object"),
    "encoder": (_kind(str), "a string"),
    "vocab_size": (_positive, "a positive integer"),
    "eod_id": (_token_id, "a token id (an integer >= 0) or null"),
    "bos_id": (_token_id, "a token id (an integer >= 0) or null"),
    "json_key": (_kind(str), "a string"),
    "append_eod": (_kind(bool), "true or false"),
    "options_hash": (_kind(str), "a string"),
    "inputs": (_kind(list), "a list"),
    "merged_from": (_kind(list), "a list"),
    "dtype": (_kind(str), "a dtype name such as \"uint16\""),
    "num_sequences": (_count, "an integer >= 0"),
    "num_documents": (_count, "an integer >= 0"),
    "num_tokens": (_count, "an integer >= 0"),
    "num_empty_documents": (_count, "an integer >= 0"),
    "one_sequence_per_document": (_kind(bool), "true or false"),
    "checksums": (lambda v: type(v) is dict and all(type(x) is str for x in v.values()), "an object of strings"),
}
#: The keys of the ``tokenizer`` record that readers use, checked the same way.
TOKENIZER_SCHEMA: dict[str, tuple[Callable[[object], bool], str]] = {
    "type": (_kind(str), "a string"),
    "fingerprint": (_kind(str), "a string"),
    "vocab_size": SCHEMA["vocab_size"],
    "eod": SCHEMA["eod_id"],
    "bos": SCHEMA["bos_id"],
    "model": (_kind(str), "a path"),
    "vocab_file": (_kind(str), "a path"),
    "merge_file": (_kind(str), "a path"),
    "options": (_kind(dict), "an object"),
    "config": (_kind(dict), "an object (the tokenizer's rebuild recipe)"),
}
#: What every sidecar this tool writes holds (the writer fills them in): one missing was renamed or deleted.
REQUIRED = ("dtype", "num_sequences", "num_documents", "num_tokens")


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
    """Atomically write the sidecar of ``prefix`` (an ``OutputError`` when the disk refuses)."""
    target = path_for(prefix)
    document = {"tool": TOOL_NAME, "tool_version": tool_version(), **meta}
    with guard(target):
        write_atomically(target, json.dumps(document, indent=2, sort_keys=True) + "\n")


def _shown(value: object) -> str:
    return json.dumps(value)  # NaN too, as Python's json reads and writes it


def parse(prefix: str | os.PathLike) -> dict | None:
    """The sidecar of ``prefix`` as parsed JSON, its values unchecked (None when there is none); not valid
    JSON, or JSON that is not an object, is a :class:`SidecarError`."""
    target = path_for(prefix)
    try:
        text = target.read_text()
    except FileNotFoundError:  # storage.ObjectNotFound for an object
        return None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as error:
        raise SidecarError(target, f"not valid JSON ({error})") from None
    if not isinstance(meta, dict):
        raise SidecarError(target, f"expected a JSON object, got {_shown(meta)}")
    return meta


def problems(meta: dict) -> list[tuple[str, str]]:
    """Every way ``meta`` (a parsed sidecar) breaks :data:`SCHEMA`, as (key, problem); empty when sound."""
    found = [(key, f"{key}: expected {wanted}, got {_shown(meta[key])}")
             for key, (test, wanted) in SCHEMA.items() if key in meta and not test(meta[key])]
    record = meta.get("tokenizer")
    if isinstance(record, dict):
        found += [(f"tokenizer.{key}", f"tokenizer.{key}: expected {wanted}, got {_shown(record[key])}")
                  for key, (test, wanted) in TOKENIZER_SCHEMA.items()
                  if record.get(key) is not None and not test(record[key])]
    if meta.get("tool") == TOOL_NAME:
        found += [(key, f"{key} is missing (every sidecar {TOOL_NAME} writes has it: renamed or deleted?)")
                  for key in REQUIRED if key not in meta]
    return found


#: Facts a sidecar records twice, at the top level and in its ``tokenizer`` record (and the record's rebuild recipe,
#: ``config``, or its id ``options``): (key, the same fact's other places as key paths). The writer fills every place
#: from one tokenizer, so two that disagree mean an edit, and no reader can know which one to trust.
RECORDED_TWICE: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    ("vocab_size", (("tokenizer", "vocab_size"),)),
    ("eod_id", (("tokenizer", "eod"), ("tokenizer", "options", "eod_id"))),
    ("bos_id", (("tokenizer", "bos"), ("tokenizer", "options", "bos_id"))),
    ("tokenizer.type", (("tokenizer", "config", "type"),)),
    ("tokenizer.model", (("tokenizer", "config", "model"),)),
)


def _at(meta: dict, path: tuple[str, ...]) -> tuple[bool, object]:
    """(whether ``path`` is in ``meta``, its value)."""
    value: object = meta
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return False, None
        value = value[key]
    return True, value


def contradictions(meta: dict) -> list[str]:
    """Every fact ``meta`` (a parsed sidecar) records in two places with two values (:data:`RECORDED_TWICE`)."""
    found = []
    for key, others in RECORDED_TWICE:
        present, value = _at(meta, tuple(key.split(".")))
        for other in others:
            there, other_value = _at(meta, other)
            if present and there and other_value != value:
                found.append(f"{key} is {_shown(value)} but {'.'.join(other)} is {_shown(other_value)}: the sidecar "
                             "contradicts itself (edited by hand?); restore it or re-run corpus tokenize")
    return found


def usable(meta: dict, found: list[tuple[str, str]]) -> dict:
    """``meta`` without the values :func:`problems` found wrong: what checks may still trust."""
    bad = {key for key, _ in found}
    clean = {key: value for key, value in meta.items() if key not in bad}
    if isinstance(clean.get("tokenizer"), dict):
        clean["tokenizer"] = {k: v for k, v in clean["tokenizer"].items() if f"tokenizer.{k}" not in bad}
    return clean


def read(prefix: str | os.PathLike) -> dict | None:
    """The sidecar of ``prefix`` as a dict, or None when there is none (files written by Megatron).

    A sidecar that exists but is not valid JSON, not an object, or breaks :data:`SCHEMA` raises
    :class:`SidecarError` (a ``ValueError``) naming the file and every problem.
    """
    meta = parse(prefix)
    if meta is None:
        return None
    found = problems(meta)
    if found:
        raise SidecarError(path_for(prefix), "; ".join(problem for _, problem in found))
    return meta


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
