"""A blend source as one low-level dataset: one ``.bin/.idx`` pair, or many shard pairs (a glob)
that act as the single file ``corpus merge`` would make of them, in sorted order.

What megatron-core needs of a low-level dataset is its sequence lengths; for a glob source they
are the shards' lengths concatenated. Building that table reads every shard's lengths once (cost
grows with documents, not shards); the result (lengths, shard boundaries, counts, a sha256 of the
lengths, which is all the index maps depend on, and the sidecar facts) is cached, keyed by each
``.idx``'s path, size, mtime and inode (an object's size and ETag, from one listing per folder), so a warm start
only lists and stats the shards. Reading tokens opens shards lazily, a bounded number at a time, so 100,000 shards
never exhaust file descriptors. Remote sources (``s3://…``) read their ``.idx`` files once into the node-local
object cache and their ``.bin`` files through its chunk cache (:mod:`corpus.storage`).
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from corpus import storage
from corpus.blending.index_maps import prepare_kernels
from corpus.blending.map_cache import Entry, MapCache, cache_key
from corpus.core.errors import ConfigError
from corpus.indexed import HEADER_SIZE, IndexedReader, idx_path, read_header, sidecar, strip_suffix
from corpus.indexed.errors import PrefixNotFound
from corpus.indexed.prefixes import expand
from corpus.inspect.checks import CheckOptions, check_prefix

log = logging.getLogger(__name__)

#: Sidecar keys that may hold the EOD id (top level first, then inside ``tokenizer``).
EOD_KEYS = ("eod_id", "eod")
#: Sidecar keys that may hold the pad id, looked up the same way.
PAD_KEYS = ("pad_id", "pad")
_OPEN_SHARDS = 64


def eod_of(meta: dict | None, keys: tuple[str, ...] = EOD_KEYS) -> int | None:
    """The EOD id (or, with ``keys=PAD_KEYS``, the pad id) a sidecar records, if any."""
    for mapping in (meta or {}, (meta or {}).get("tokenizer") or {}):
        for key in keys:
            if isinstance(mapping.get(key), int):
                return mapping[key]
    return None


def find_shards(spec: str) -> tuple[list[str], set[str]]:
    """The sorted shard prefixes ``spec`` names (a prefix, ``.idx``/``.bin`` path, glob or folder)
    and the subset that has a ``.meta.json``; every shard must have both ``.bin`` and ``.idx``."""
    try:
        prefixes = expand(spec)
    except PrefixNotFound as error:
        raise ConfigError(f"{error} (did `corpus tokenize --output-prefix` write it?)", "prefix") from None
    folder = not storage.has_magic(spec) and storage.isdir(spec)
    if storage.has_magic(spec) or folder:
        pattern = storage.join(storage.escape(spec), "*") if folder else strip_suffix(spec)
        bins = {p[: -len(".bin")] for p in storage.glob(pattern + ".bin")}
        metas = {p[: -len(sidecar.SIDE_SUFFIX)] for p in storage.glob(pattern + sidecar.SIDE_SUFFIX)}
    else:
        bins = {p for p in prefixes if storage.isfile(p + ".bin")}
        metas = {p for p in prefixes if storage.isfile(p + sidecar.SIDE_SUFFIX)}
    missing = [p for p in prefixes if p not in bins]
    if missing:
        raise ConfigError(f"{missing[0]}.bin: no such file ({len(missing)} of {len(prefixes)} shards lack their "
                          ".bin); copy it next to its .idx or re-run corpus tokenize", "prefix")
    return prefixes, metas & set(prefixes)


def table_key(prefixes: list[str], metas: set[str]) -> str:
    """Cache key of a source table: every ``.idx``, ``.bin`` (and sidecar) by path, size, mtime and inode (an
    object's size and ETag). The ``.bin`` is part of it because the table vouches for its tokens
    (:func:`validate_pair`)."""
    with_meta = [p for p in prefixes if p in metas]
    idx_rows = storage.identities([p + ".idx" for p in prefixes])
    bin_rows = storage.identities([p + ".bin" for p in prefixes])
    meta_rows = dict(zip(with_meta, storage.identities([p + sidecar.SIDE_SUFFIX for p in with_meta])))
    rows = []
    for prefix, identity, bin_identity in zip(prefixes, idx_rows, bin_rows):
        row = [storage.absolute(prefix), *identity, *bin_identity]
        if prefix in metas:
            row += meta_rows[prefix]
        rows.append(row)
    return cache_key({"kind": "source-table", "version": 3, "shards": rows})


def validate_pair(prefix: str) -> None:
    """Refuse a pair ``corpus inspect --check`` rejects, with its first finding and the fix: the index, the sizes,
    the sidecar (its schema, its counts, its contradictions) and, for a local pair, every token id against the
    sidecar's vocabulary and the EOD endings. A damaged pair read anyway trains on other tokens than it was written
    with, and nothing downstream can tell. Runs once per pair identity: the source table that follows is cached."""
    remote = storage.is_remote(prefix)
    problems = check_prefix(prefix, CheckOptions(max_problems=1, read_tokens=not remote))
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise ConfigError(f"{problems[0]}{more}: this pair is damaged and is not read; list every problem with "
                          f"corpus inspect --check {prefix}, then re-run corpus tokenize for it (or restore it)",
                          "prefix")
    if remote:
        log.info("%s: token ids not checked against the vocabulary (a remote pair: every token would be downloaded); "
                 "corpus inspect --check on a local copy checks them", prefix)


def _sidecar_facts(prefixes: list[str], metas: set[str]) -> dict:
    """Tokenizer agreement inside one source, and what the trainer needs from the sidecars."""
    first, first_prefix, identity = None, None, None
    for prefix in sorted(metas):
        try:
            meta = sidecar.read(prefix)
        except ValueError as error:
            raise ConfigError(str(error), "prefix") from None
        this = sidecar.tokenizer_identity(meta)
        if first is None:
            first, first_prefix, identity = meta, prefix, this
        elif this is not None and identity is not None and this != identity:
            raise ConfigError(f"shards were tokenized differently: {first_prefix} used {identity[:2]}, {prefix} used "
                              f"{this[:2]}; re-tokenize them with one tokenizer", "prefix")
        identity = identity or this
    missing = [p for p in prefixes if p not in metas]
    record = (first or {}).get("tokenizer") or {}
    return {"tokenizer": record or None, "tokenizer_identity": list(identity) if identity else None,
            "vocab_size": (first or {}).get("vocab_size", record.get("vocab_size")), "eod_id": eod_of(first),
            "pad_id": eod_of(first, PAD_KEYS),
            "missing_sidecars": len(missing), "missing_example": missing[0] if missing else None}


def _read_shard(prefix: str) -> tuple[np.dtype, np.ndarray, int]:
    """dtype, sequence lengths and document count of one validated shard, read straight from its ``.idx`` (no
    memory maps: 100,000 shards must not hold 100,000 of them)."""
    header = read_header(idx_path(prefix))
    lengths = np.fromfile(storage.local_file(idx_path(prefix)), dtype=np.int32, count=header.num_sequences,
                          offset=HEADER_SIZE)
    return header.dtype, lengths, header.num_document_indices - 1


def _build_table(prefixes: list[str], metas: set[str]) -> tuple[dict[str, np.ndarray], dict]:
    lengths, starts, digest = [], [0], hashlib.sha256()
    dtype, dtype_prefix, documents = None, None, 0
    for prefix in prefixes:
        validate_pair(prefix)
        shard_dtype, shard_lengths, shard_documents = _read_shard(prefix)
        if dtype is not None and shard_dtype != dtype:
            raise ConfigError(f"{prefix}.idx has token dtype {shard_dtype} but {dtype_prefix}.idx has {dtype}; "
                              "all shards of a source must come from one tokenizer", "prefix")
        dtype, dtype_prefix = shard_dtype, dtype_prefix or prefix
        lengths.append(shard_lengths)
        starts.append(starts[-1] + len(shard_lengths))
        documents += shard_documents
        digest.update(shard_lengths.tobytes())
    all_lengths = np.concatenate(lengths) if lengths else np.empty(0, np.int32)
    meta = {"dtype": str(dtype), "num_shards": len(prefixes), "num_documents": documents,
            "num_sequences": int(all_lengths.size), "num_tokens": int(all_lengths.sum(dtype=np.int64)),
            "digest": digest.hexdigest(), **_sidecar_facts(prefixes, metas)}
    return {"lengths": all_lengths, "shard_starts": np.asarray(starts, dtype=np.int64)}, meta


@dataclass(frozen=True)
class SourceInfo:
    """The facts of a source table (what dry runs print and resolution checks)."""

    dtype: np.dtype
    num_shards: int
    num_documents: int
    num_sequences: int
    num_tokens: int
    digest: str
    tokenizer: dict | None
    tokenizer_identity: tuple | None
    vocab_size: int | None
    eod_id: int | None
    pad_id: int | None
    missing_sidecars: int
    missing_example: str | None

    @classmethod
    def from_meta(cls, meta: dict) -> "SourceInfo":
        """The facts saved in a source table's manifest."""
        identity = meta["tokenizer_identity"]
        return cls(np.dtype(meta["dtype"]), meta["num_shards"], meta["num_documents"], meta["num_sequences"],
                   meta["num_tokens"], meta["digest"], meta["tokenizer"], tuple(identity) if identity else None,
                   meta["vocab_size"], meta["eod_id"], meta["pad_id"], meta["missing_sidecars"],
                   meta["missing_example"])


class Source:
    """One resolved source: its sequence lengths (concatenated over shards) and token reads."""

    def __init__(self, name: str, spec: str, prefixes: list[str], table: Entry) -> None:
        self.name, self.spec, self.prefixes = name, spec, prefixes
        self.lengths: np.ndarray = table.arrays["lengths"]
        self.shard_starts: np.ndarray = table.arrays["shard_starts"]
        self.info = SourceInfo.from_meta(table.meta)
        self.built = table.built
        """Whether this process indexed the source (False: its table came from the cache)."""
        self._readers: OrderedDict[int, IndexedReader] = OrderedDict()

    @property
    def digest(self) -> str:
        """sha256 of the concatenated sequence lengths: all the index maps depend on."""
        return self.info.digest

    def _reader(self, shard: int) -> IndexedReader:
        reader = self._readers.get(shard)
        if reader is None:
            reader = IndexedReader(self.prefixes[shard], validate="header")
            self._readers[shard] = reader
            if len(self._readers) > _OPEN_SHARDS:
                self._readers.popitem(last=False)[1].close()
        else:
            self._readers.move_to_end(shard)
        return reader

    def _shard(self, sequence: int) -> int:
        """The shard holding global sequence ``sequence``."""
        return 0 if len(self.prefixes) == 1 else int(np.searchsorted(self.shard_starts, sequence, side="right")) - 1

    def shard_of(self, sequence: int) -> str:
        """The prefix of the shard holding global sequence ``sequence`` (the source's own prefix when it has one)."""
        return self.prefixes[self._shard(sequence)]

    def read(self, sequence: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Tokens ``[offset, offset + length)`` of global sequence ``sequence`` (zero-copy view)."""
        shard = self._shard(sequence)
        return self._reader(shard).get(int(sequence - self.shard_starts[shard]), offset, length)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_readers": OrderedDict()}  # open maps do not travel to workers


def load_source(name: str, spec: str, cache: MapCache) -> Source:
    """Find the shards of ``spec`` and load (or build) its table. Raises :class:`ConfigError`."""
    prefixes, metas = find_shards(spec)
    key = table_key(prefixes, metas)
    def build() -> tuple[dict[str, np.ndarray], dict]:
        prepare_kernels()  # a new source table means new maps: load the compiled loops meanwhile
        return _build_table(prefixes, metas)

    entry = cache.get_or_build("source", key, build, {"spec": spec, "shards": len(prefixes)})
    if entry.built:
        log.info("indexed source %s: %d shard(s), %d sequences", name, len(prefixes), entry.meta["num_sequences"])
    return Source(name, spec, prefixes, entry)
