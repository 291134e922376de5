"""``corpus add-checksums``: record in a pair's sidecar the checksums ``corpus inspect --check --deep`` compares,
for pairs written before checksums existed (or by Megatron, which writes no sidecar).

A checksum vouches for the bytes it was taken of, so it is recorded only for a pair every check passes (a
damaged pair would otherwise be blessed); checksums already recorded are compared, never replaced. The sidecar is
rewritten atomically (:func:`corpus.indexed.sidecar.write`): a reader sees the old one or the new one.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass

from corpus import storage
from corpus.core.errors import InputError
from corpus.core.typed_config import knob
from corpus.indexed import bin_path, idx_path, read_header, sidecar
from corpus.indexed.append import file_tree_digest
from corpus.indexed.prefixes import expand_all
from corpus.inspect.checks import CheckOptions, check_prefix, unverified_files

#: The checksum of each file this command records: the tree checksum every pair is written with now.
RECORDED = {"bin": "bin_sha256_tree", "idx": "idx_sha256_tree"}


@dataclass(frozen=True)
class AddChecksumsConfig:
    """The pairs ``corpus add-checksums`` records checksums for (the command's arguments are generated from it)."""

    datasets: tuple[str, ...] = knob(MISSING, "Prefixes, .idx/.bin paths, globs or directories.", "DATASETS")


@dataclass(frozen=True)
class ChecksumResult:
    """What :func:`add_checksums` did to one pair."""

    prefix: str
    #: The files whose checksums were recorded now (empty: the sidecar had them, and they match).
    added: tuple[str, ...]
    #: Whether the pair had no sidecar (one was written, with the counts read from the ``.idx``).
    new_sidecar: bool


def add_checksums(datasets: list[str] | tuple[str, ...]) -> list[ChecksumResult]:
    """Record the checksums of every pair ``datasets`` names (prefixes, ``.idx``/``.bin`` paths, globs, folders).

    Every pair is checked first (``--check --deep``, with the recorded checksums compared); one that fails stops the
    command before any sidecar is written, naming its first problem."""
    prefixes = expand_all(tuple(datasets))
    for prefix in prefixes:
        if storage.is_remote(prefix):
            raise InputError(f"{prefix}: checksums are recorded for pairs on a local disk; copy the pair here, "
                             "run corpus add-checksums, and copy its .meta.json back")
        problems = check_prefix(prefix, CheckOptions(deep=True, max_problems=1))
        if problems:
            raise InputError(f"{prefix}: {len(problems)} problem(s), the first: {problems[0]}; checksums are "
                             "recorded only for a pair every check passes (corpus inspect --check lists them)")
    return [_record(prefix) for prefix in prefixes]


def _record(prefix: str) -> ChecksumResult:
    meta = sidecar.read(prefix)  # sound: the check passed
    missing = unverified_files(meta)
    if not missing:
        return ChecksumResult(prefix, (), False)
    files = {"bin": bin_path(prefix), "idx": idx_path(prefix)}
    recorded = {RECORDED[kind]: file_tree_digest(files[kind]) for kind in missing}
    document = meta if meta is not None else _counts(prefix)
    sidecar.write(prefix, {**document, "checksums": {**(document.get("checksums") or {}), **recorded}})
    return ChecksumResult(prefix, tuple(missing), meta is None)


def _counts(prefix: str) -> dict:
    """What every sidecar records of the files, read from a sound pair's ``.idx`` (a Megatron pair has no sidecar;
    its tokenizer is unknown and left out)."""
    header = read_header(idx_path(prefix))
    num_tokens = bin_path(prefix).stat().st_size // header.dtype.itemsize
    return {"dtype": str(header.dtype), "num_sequences": header.num_sequences,
            "num_documents": header.num_document_indices - 1, "num_tokens": num_tokens}
