"""``corpus inspect --check``: every check a ``.bin/.idx`` pair and its sidecar allow, reporting all
the problems found (prefix, document, byte offset) instead of stopping at the first.

:class:`~corpus.indexed.IndexedReader` raises at the first inconsistency. Here the header is read with
``read_header`` (the one gate: without a sound header no array can be located), the arrays are mapped
raw (``index_arrays``) and each check scans them with vectorised numpy in bounded chunks. Structure
checks run first; the EOD check needs a sound structure and is skipped (with a log line) without one.
Each problem names its document only when that attribution is verifiable, never a guess.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from corpus import storage
from corpus.core.errors import UserError
from corpus.indexed import HEADER_SIZE, bin_path, idx_path, index_arrays, read_header, sidecar, strip_suffix
from corpus.indexed.append import file_tree_digest
from corpus.indexed.errors import IndexFormatError, SidecarError
from corpus.inspect.stats import DOCUMENT_CHUNK, iter_document_bounds, iter_token_chunks
from corpus.tokenizers.registry import family_of, fingerprinted_files

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Problem:
    """One defect found by a check.

    ``offset`` is a byte offset in ``file``. ``count`` > 1 marks a summary entry that stands for that
    many further occurrences beyond the listed ones; its document and offset are those of the first.
    """

    prefix: str
    check: str
    file: str
    message: str
    document: int | None = None
    offset: int | None = None
    count: int = 1

    def __str__(self) -> str:
        where = [f"document {self.document}"] if self.document is not None else []
        where.append(self.file if self.offset is None else f"{self.file} byte {self.offset}")
        return f"{self.prefix}: {self.check}: {self.message} ({', '.join(where)})"


@dataclass(frozen=True)
class CheckOptions:
    """How to check."""

    #: Ids must be below this; overrides the sidecar's ``vocab_size`` (e.g. from --tokenizer-model).
    vocab_size: int | None = None
    #: At most this many problems of each check are listed per file; the rest become one summary entry.
    max_problems: int = 10
    #: Also hash both files and compare with the checksums the sidecar records (reads every byte).
    deep: bool = False
    #: Read the tokens (ids against the vocabulary, EOD endings); False checks the index and the sidecar alone (for
    #: a remote pair, whose tokens would all be downloaded).
    read_tokens: bool = True


@dataclass(frozen=True)
class _Pair:
    """A pair mapped without validation: what every check reads."""

    prefix: str
    idx_file: Path
    bin_file: Path
    dtype: np.dtype
    sequence_lengths: np.ndarray
    sequence_pointers: np.ndarray
    document_indices: np.ndarray
    tokens: np.ndarray | None  # None when the .bin is missing
    meta: dict | None  # only the values that passed the sidecar's schema
    meta_problems: tuple[str, ...]
    vocab_size: int | None
    eod_id: int | None
    max_problems: int
    deep: bool = False
    structure_ok: bool = False

    @property
    def num_tokens(self) -> int:
        """Whole tokens in the .bin (what document bounds end at once the structure checks pass)."""
        return 0 if self.tokens is None else len(self.tokens)

    @functools.cached_property
    def index_tokens(self) -> int:
        """Tokens the index describes: the sum of the (non-negative) sequence lengths."""
        lengths = self.sequence_lengths
        return sum(int(np.maximum(lengths[s : s + DOCUMENT_CHUNK], 0).sum(dtype=np.int64))
                   for s in range(0, len(lengths), DOCUMENT_CHUNK))

    @functools.cached_property
    def empty_documents(self) -> int:
        """Documents that hold no sequence (equal consecutive document indices)."""
        docs = self.document_indices
        return sum(int(np.count_nonzero(np.diff(np.asarray(docs[s : s + DOCUMENT_CHUNK + 1])) == 0))
                   for s in range(0, len(docs) - 1, DOCUMENT_CHUNK))

    def length_offset(self, sequence: int) -> int:
        return HEADER_SIZE + 4 * sequence

    def pointer_offset(self, sequence: int) -> int:
        return HEADER_SIZE + 4 * len(self.sequence_lengths) + 8 * sequence

    def document_offset(self, document: int) -> int:
        return HEADER_SIZE + 12 * len(self.sequence_lengths) + 8 * document

    def document_of_sequence(self, sequence: int) -> int | None:
        """The document holding ``sequence``, or None when the document index cannot tell."""
        docs = self.document_indices
        document = int(np.searchsorted(docs, sequence, side="right")) - 1
        if 0 <= document < len(docs) - 1 and docs[document] <= sequence < docs[document + 1]:
            return document
        return None

    def locate_token(self, position: int) -> tuple[int | None, int | None]:
        """(document, position inside it) of the token at ``position`` in the .bin, when verifiable."""
        pointers, lengths, itemsize = self.sequence_pointers, self.sequence_lengths, self.dtype.itemsize
        sequence = int(np.searchsorted(pointers, position * itemsize, side="right")) - 1
        inside = position * itemsize - int(pointers[sequence]) if 0 <= sequence < len(pointers) else -1
        if not 0 <= inside < int(lengths[sequence]) * itemsize:
            return None, None
        document = self.document_of_sequence(sequence)
        if document is None:
            return None, None
        first = int(pointers[self.document_indices[document]]) // itemsize
        return document, position - first


class _Findings:
    """Counts every hit of one check, keeps the first ``max_problems`` as problems, summarises the rest."""

    def __init__(self, pair: _Pair, check: str, file: Path) -> None:
        self.pair, self.check, self.file = pair, check, str(file)
        self.listed: list[Problem] = []
        self.more: list[Problem] = []  # the first unlisted hit, once
        self.more_count = 0

    def _problem(self, message: str, document: int | None, offset: int | None) -> Problem:
        return Problem(self.pair.prefix, self.check, self.file, message, document, offset)

    def add(self, hits: np.ndarray, describe: Callable[[int], tuple[str, int | None, int | None]]) -> None:
        """Record ``hits`` (ascending indices); ``describe(i)`` gives (message, document, offset)."""
        room = max(0, self.pair.max_problems - len(self.listed))
        self.listed.extend(self._problem(*describe(int(hit))) for hit in hits[:room])
        rest = hits[room:]
        if len(rest) and not self.more:
            self.more.append(self._problem(*describe(int(rest[0]))))
        self.more_count += len(rest)

    def add_one(self, message: str, document: int | None = None, offset: int | None = None) -> None:
        self.add(np.zeros(1, dtype=np.int64), lambda _: (message, document, offset))

    def problems(self) -> list[Problem]:
        if not self.more_count:
            return self.listed
        first = self.more[0]
        summary = f"{self.more_count} more {self.check} problem(s) not listed; the first: {first.message}"
        return [*self.listed, dataclasses.replace(first, message=summary, count=self.more_count)]


def _check_document_index(pair: _Pair) -> list[Problem]:
    """Document indices start at 0, never decrease, and end at the sequence count; when the sidecar says every
    document is one sequence (``corpus tokenize``'s files), no document holds more than one."""
    docs, count = pair.document_indices, len(pair.sequence_lengths)
    found = _Findings(pair, "document-index", pair.idx_file)
    single = (pair.meta or {}).get("one_sequence_per_document") is True
    if docs[0] != 0:
        found.add_one(f"document index starts at sequence {docs[0]}, not 0", 0, pair.document_offset(0))
    for start in range(0, len(docs) - 1, DOCUMENT_CHUNK):
        steps = np.diff(np.asarray(docs[start : start + DOCUMENT_CHUNK + 1]))
        found.add(np.flatnonzero(steps < 0) + start, lambda d: (
            f"not monotonic: document {d} starts at sequence {docs[d]}, document {d + 1} at {docs[d + 1]}",
            d, pair.document_offset(d + 1)))
        if single:
            found.add(np.flatnonzero(steps > 1) + start, lambda d: (
                f"document {d} holds sequences {docs[d]} to {int(docs[d + 1]) - 1}, but the sidecar says every "
                "document is one sequence (one_sequence_per_document): the document index was changed",
                d, pair.document_offset(d + 1)))
    if docs[-1] != count:
        found.add_one(f"document index ends at sequence {docs[-1]}, not at the sequence count {count}",
                      None, pair.document_offset(len(docs) - 1))
    return found.problems()


def _check_lengths(pair: _Pair) -> list[Problem]:
    """No sequence has a negative length."""
    lengths = pair.sequence_lengths
    found = _Findings(pair, "lengths", pair.idx_file)
    for start in range(0, len(lengths), DOCUMENT_CHUNK):
        found.add(np.flatnonzero(lengths[start : start + DOCUMENT_CHUNK] < 0) + start, lambda s: (
            f"sequence {s} has negative length {lengths[s]}", pair.document_of_sequence(s), pair.length_offset(s)))
    return found.problems()


def _check_pointers(pair: _Pair) -> list[Problem]:
    """The first sequence starts at byte 0 and each next one where the previous ends."""
    lengths, pointers, itemsize = pair.sequence_lengths, pair.sequence_pointers, pair.dtype.itemsize
    found = _Findings(pair, "pointers", pair.idx_file)
    if len(pointers) and pointers[0] != 0:
        found.add_one(f"sequence 0 starts at byte {pointers[0]}, not 0", pair.document_of_sequence(0),
                      pair.pointer_offset(0))

    def describe(s: int) -> tuple[str, int | None, int | None]:
        expected = int(pointers[s - 1]) + int(lengths[s - 1]) * itemsize
        return (f"sequence {s} starts at byte {pointers[s]}, expected {expected} (sequence {s - 1} starts at "
                f"byte {pointers[s - 1]} with {lengths[s - 1]} tokens of {itemsize} bytes)",
                pair.document_of_sequence(s), pair.pointer_offset(s))

    for start in range(0, len(pointers) - 1, DOCUMENT_CHUNK):
        window = pointers[start : start + DOCUMENT_CHUNK + 1].astype(np.int64)
        ends = window[:-1] + lengths[start : start + len(window) - 1].astype(np.int64) * itemsize
        found.add(np.flatnonzero(window[1:] != ends) + start + 1, describe)
    return found.problems()


def _check_bin_size(pair: _Pair) -> list[Problem]:
    """The .bin exists and holds exactly the tokens the lengths add up to."""
    found = _Findings(pair, "bin-size", pair.bin_file)
    if pair.tokens is None:
        found.add_one("missing: the .idx exists but its .bin does not")
        return found.problems()
    itemsize, total = pair.dtype.itemsize, pair.index_tokens
    size = pair.bin_file.stat().st_size
    if size != total * itemsize:
        cut = pair.locate_token(size // itemsize)[0] if size < total * itemsize else None
        found.add_one(f"size {size} bytes disagrees with the index: {total} tokens x {itemsize} bytes = "
                      f"{total * itemsize} (truncated, padded or mismatched pair)", cut, min(size, total * itemsize))
    return found.problems()


def _check_sidecar(pair: _Pair) -> list[Problem]:
    """The sidecar parses, agrees with the files it describes, and its special ids fit the vocabulary."""
    found = _Findings(pair, "sidecar", sidecar.path_for(pair.prefix))
    for problem in pair.meta_problems:
        found.add_one(problem)
    meta = pair.meta or {}
    actual = {"dtype": lambda: str(pair.dtype), "num_sequences": lambda: len(pair.sequence_lengths),
              "num_documents": lambda: len(pair.document_indices) - 1, "num_tokens": lambda: pair.index_tokens,
              "num_empty_documents": lambda: pair.empty_documents}
    for key, value in actual.items():
        if key in meta and meta[key] != value():
            found.add_one(f"records {key}={meta[key]!r} but the files hold {value()!r}")
    vocab = pair.vocab_size
    for key in ("eod_id", "bos_id"):
        if vocab is not None and meta.get(key) is not None and not 0 <= meta[key] < vocab:
            found.add_one(f"{key}={meta[key]} is outside the vocabulary [0, {vocab})")
    if meta.get("append_eod") and pair.eod_id is None:
        found.add_one("append_eod is true but no EOD id is recorded (eod_id)")
    for contradiction in sidecar.contradictions(meta):
        found.add_one(contradiction)
    changed = _tokenizer_file_changed(meta.get("tokenizer"))
    if changed:
        found.add_one(changed)
    if vocab is not None and pair.dtype.kind in "iu" and vocab - 1 > np.iinfo(pair.dtype).max:
        found.add_one(f"dtype {pair.dtype} cannot hold the ids of a {vocab}-token vocabulary")
    return found.problems()


def _tokenizer_file_changed(record: object) -> str | None:
    """Why the tokenizer file the record names no longer has the fingerprint it records (the record or the file was
    changed: ids would be decoded and compared with another tokenizer); None when they agree or the file is not
    here to compare (data moved to another machine)."""
    if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("type", "model",
                                                                                            "fingerprint")):
        return None
    if family_of(record["type"]) is None or not os.path.isfile(record["model"]):
        return None
    try:
        files = tuple(fingerprinted_files(record["type"], record["model"]))
        actual = _fingerprint(files, tuple(os.stat(file).st_mtime_ns for file in files))
    except (OSError, UserError):
        return None
    if actual == record["fingerprint"]:
        return None
    return (f"tokenizer.fingerprint is {record['fingerprint'][:12]}… but {record['model']} is {actual[:12]}…: the "
            "tokenizer file or the record changed since the pair was written; restore the tokenizer file (or the "
            "sidecar), or re-run corpus tokenize")


@functools.lru_cache(maxsize=64)
def _fingerprint(files: tuple[str, ...], mtimes: tuple[int, ...]) -> str:
    """A tokenizer's fingerprint, hashed once per process for the thousands of shards that share it (the files'
    modification times are part of the key so that a changed file is hashed again)."""
    return sidecar.fingerprint_files(files)


def id_space(vocab_size: int | None, special_ids: list) -> int | None:
    """The ids a tokenizer can give: its vocabulary size, or one past a special id (EOD, BOS) that lies beyond. A
    ``tokenizer.json`` whose added tokens leave gaps in the ids counts tokens, not ids (as Megatron's
    ``vocab_size`` does): cl100k with Llama-3's BOS at 100277 has 100,262 tokens."""
    if vocab_size is None:
        return None
    return max([vocab_size] + [special + 1 for special in special_ids if isinstance(special, int) and special >= 0])


def _check_token_ids(pair: _Pair) -> list[Problem]:
    """Every token id is in ``[0, vocab_size)``."""
    if pair.vocab_size is None or pair.tokens is None:
        if pair.tokens is not None:
            log.info("%s: token ids not checked: no vocabulary size known (no sidecar record; "
                     "give --tokenizer-type/--tokenizer-model)", pair.prefix)
        return []
    vocab, tokens = pair.vocab_size, pair.tokens
    found = _Findings(pair, "token-ids", pair.bin_file)

    def describe(position: int) -> tuple[str, int | None, int | None]:
        document, inside = pair.locate_token(position)
        where = f" at token {inside} of the document" if inside is not None else f" at token {position} of the file"
        return (f"id {tokens[position]} outside the vocabulary [0, {vocab}){where}", document,
                position * pair.dtype.itemsize)

    for start, chunk in iter_token_chunks(tokens):
        if chunk.min() < 0 or chunk.max() >= vocab:
            found.add(np.flatnonzero((chunk < 0) | (chunk >= vocab)) + start, describe)
    return found.problems()


def _check_eod(pair: _Pair) -> list[Problem]:
    """Every non-empty document ends with the EOD id when the sidecar says EOD was appended; and when it says EOD
    was not appended, not every document ends with it (``append_eod`` turned off by an edit turns this check off)."""
    meta = pair.meta or {}
    if "append_eod" not in meta or pair.eod_id is None:
        return []
    if not pair.structure_ok:
        log.info("%s: EOD not checked: the index structure is broken (see the problems above)", pair.prefix)
        return []
    eod, itemsize = pair.eod_id, pair.dtype.itemsize
    found = _Findings(pair, "eod", pair.bin_file)
    nonempty_count = ending_in_eod = 0
    for first, starts, ends in iter_document_bounds(pair):
        nonempty = np.flatnonzero(ends > starts)
        last = np.asarray(pair.tokens[ends[nonempty] - 1])
        nonempty_count, ending_in_eod = nonempty_count + len(nonempty), ending_in_eod + int(np.sum(last == eod))
        if meta["append_eod"]:
            found.add(nonempty[last != eod] + first, lambda d: (
                f"document {d} ends with id {pair.tokens[ends[d - first] - 1]}, not EOD ({eod})",
                d, int(ends[d - first] - 1) * itemsize))
    # NOTE: one document may end in EOD by itself (its text ends with the EOD string); all of several do not
    if not meta["append_eod"] and nonempty_count > 1 and ending_in_eod == nonempty_count:
        found.add_one(f"append_eod is false but all {nonempty_count} non-empty documents end with EOD ({eod}): the "
                      "sidecar was edited; set append_eod back to true (or re-run corpus tokenize)")
    return found.problems()


#: The checksums a sidecar may record, each with what computes it: the tree checksum every pair is written with now,
#: and the plain sha256 of pairs written before it.
CHECKSUMS: dict[str, Callable[[Path], str]] = {
    "bin_sha256_tree": file_tree_digest, "idx_sha256_tree": file_tree_digest,
    "bin_sha256": lambda path: sidecar.fingerprint_files([path]),
    "idx_sha256": lambda path: sidecar.fingerprint_files([path]),
}


def unverified_files(meta: dict | None) -> list[str]:
    """The files of a pair (``"bin"``, ``"idx"``) whose contents ``--deep`` cannot verify: the sidecar (its sound
    values, or None when there is none) records no checksum of them."""
    recorded = (meta or {}).get("checksums") or {}
    return [kind for kind in ("bin", "idx") if not any(key.startswith(kind) for key in recorded)]


def contents_unverified(prefix: str) -> list[str]:
    """:func:`unverified_files` of the pair ``prefix``, reading its sidecar (a broken one verifies nothing)."""
    return unverified_files(_read_meta(strip_suffix(prefix))[0])


def _check_checksums(pair: _Pair) -> list[Problem]:
    """With ``deep``: each file's checksum is the one the sidecar recorded when the pair was written (a pair
    without them is reported by :func:`contents_unverified`, not as a problem: nothing is known to be wrong)."""
    recorded = (pair.meta or {}).get("checksums") or {}
    if not pair.deep or not recorded:
        return []
    problems = []
    for key, compute in CHECKSUMS.items():
        path = pair.bin_file if key.startswith("bin") else pair.idx_file
        found = _Findings(pair, "checksum", path)
        if key in recorded and path.exists() and compute(path) != recorded[key]:
            found.add_one(f"sha256 differs from the one the sidecar records ({key}): the file changed after it was "
                          "written; re-run corpus tokenize (or restore the file)")
        problems += found.problems()
    return problems


#: Checks of the index arrays and file sizes, in order; later checks trust the structure only if these pass.
STRUCTURE_CHECKS: dict[str, Callable[[_Pair], list[Problem]]] = {
    "document-index": _check_document_index,
    "lengths": _check_lengths,
    "pointers": _check_pointers,
    "bin-size": _check_bin_size,
}
#: Checks of the sidecar and the token contents.
CONTENT_CHECKS: dict[str, Callable[[_Pair], list[Problem]]] = {
    "sidecar": _check_sidecar,
    "token-ids": _check_token_ids,
    "eod": _check_eod,
    "checksum": _check_checksums,
}

#: The content checks that read every token (left out with ``read_tokens=False``).
TOKEN_CHECKS = ("token-ids", "eod")


def _map_tokens(path: Path | storage.ObjectPath, dtype: np.dtype) -> np.ndarray | storage.ChunkedArray | None:
    """The .bin as a flat token array (whole tokens only), None when it does not exist."""
    try:
        return storage.map_array(path, dtype)
    except FileNotFoundError:  # storage.ObjectNotFound for an object
        return None


def _read_meta(prefix: str) -> tuple[dict | None, tuple[str, ...]]:
    """The sidecar's sound values and every problem with it (each one reported, none raised)."""
    try:
        raw = sidecar.parse(prefix)
    except SidecarError as error:
        return None, (error.problem,)
    if raw is None:
        return None, ()
    found = sidecar.problems(raw)
    return sidecar.usable(raw, found), tuple(problem for _, problem in found)


def _recorded(meta: dict | None, key: str, tokenizer_key: str) -> int | None:
    """A value of the sidecar: top level first, else inside its ``tokenizer`` record."""
    meta = meta or {}
    if meta.get(key) is not None:
        return meta[key]
    record = meta.get("tokenizer")
    return record.get(tokenizer_key) if isinstance(record, dict) else None


def check_prefix(prefix: str, options: CheckOptions = CheckOptions()) -> list[Problem]:
    """Run every check on the pair ``prefix`` and return all problems found (empty when clean).

    Checks: header; document index monotonic from 0 to the sequence count (one sequence per document when the
    sidecar says so); no negative length; pointers consistent; ``.bin`` size = sum of lengths x itemsize;
    sidecar well-formed and consistent; every id below the vocabulary size (the sidecar's, or
    ``options.vocab_size``); EOD ending every document when the sidecar says EOD was appended; with
    ``options.deep``, both files' sha256 against the sidecar's checksums.
    """
    prefix = strip_suffix(prefix)
    try:
        header = read_header(idx_path(prefix))
    except IndexFormatError as error:
        return [Problem(prefix, "header", error.path, error.problem)]
    lengths, pointers, documents = index_arrays(np.memmap(storage.local_file(idx_path(prefix)), dtype=np.uint8,
                                                          mode="r"), header)
    meta, meta_problems = _read_meta(prefix)
    vocab = options.vocab_size if options.vocab_size is not None else id_space(
        _recorded(meta, "vocab_size", "vocab_size"), [meta.get(key) for key in ("eod_id", "bos_id")] if meta else [])
    pair = _Pair(prefix, idx_path(prefix), bin_path(prefix), header.dtype, lengths, pointers, documents,
                 _map_tokens(bin_path(prefix), header.dtype), meta, meta_problems, vocab,
                 _recorded(meta, "eod_id", "eod"), options.max_problems, options.deep)
    problems = [problem for check in STRUCTURE_CHECKS.values() for problem in check(pair)]
    pair = dataclasses.replace(pair, structure_ok=not problems)
    problems += [problem for name, check in CONTENT_CHECKS.items() if options.read_tokens or name not in TOKEN_CHECKS
                 for problem in check(pair)]
    return problems
