"""The gigatoken fast path (the Rust encoder of Megatron's ``preprocess_data_fast.py``).

gigatoken is optional and imported lazily. It reads HuggingFace tokenizer.json files (byte-level BPE and
SentencePiece-style BPE with byte fallback) and ``.tiktoken`` rank files with one of its named split
regexes. What it is built from is a :class:`FastSource`, derived once from the reference tokenizer by the
function its registry entry's ``fast_forms`` names (:func:`huggingface_sources`, ...), together with a
:class:`Profile` of what the pipeline needs from the reference besides its ids; both are cached with the
verdict of the check (:mod:`corpus.tokenizers.verdicts`), so a later run builds gigatoken without loading the
reference library. Differences from Megatron's ids are corrected here:

- gigatoken does not apply a tokenizer.json's post-processor, so the tokens ``tokenizer(text)`` adds around
  every text (e.g. a leading BOS) are the reference adapter's :meth:`affixes`, added here;
- its SentencePiece conversion makes control pieces (``<s>``, ``</s>``, ``[INST]``...) added tokens that
  match whole in the text, where sentencepiece encodes such text as ordinary pieces; we drop them;
- a ``.tiktoken`` file gives rank ids: Megatron's numbering (and a tokenizer.json whose added tokens come
  first) shifts them above the special tokens, which gigatoken is given at ids after the ranks;
  :meth:`GigatokenTextTokenizer._reference_ids` moves both.

Whether it may be used at all is decided by :mod:`corpus.tokenizers.select`, which compares its ids
with the reference on hard cases, on every special string of the tokenizer and on the user's input.

Memory: gigatoken 0.10.0 memoises every pre-token it encodes, without bound (1.1 GB after 150 MB of
never-repeating words, still growing; real text grows much slower). Rebuilding the tokenizer drops its
caches, so when this process's RSS has grown by MEMORY_BUDGET since the first batch we rebuild it
(at most once per REBUILD_MIN_CHARS of input, so a process that stays large does not rebuild on every
batch). The ``gigatoken-cachefix`` fork bounds its caches itself and never reaches the budget.

NOTE: gigatoken's batch calls run on rayon's process-global pool, which is not fork-safe; a worker must never be
forked from a process that has encoded. ``parallel=False`` (threads=1) never touches the pool.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field

import numpy as np
import orjson

from corpus.tokenizers import spellings
from corpus.tokenizers.base import TextTokenizer, build_tokenizer, library_version
from corpus.tokenizers.config import TokenizerConfig
from corpus.tokenizers.errors import TokenizeError
from corpus.tokenizers.flat import around_texts
from corpus.tokenizers.gigatoken_rows import flat_and_counts, without_awkward
from corpus.tokenizers.huggingface import limit_rayon_threads
from corpus.tokenizers.long_texts import CUT_RULES
from corpus.tokenizers.tiktoken_vocab import OPENAI_ENCODINGS, PATTERNS

log = logging.getLogger(__name__)

MEMORY_BUDGET = 512 << 20
REBUILD_MIN_CHARS = 64 << 20

#: gigatoken's named split regexes for the regexes TikTokenizer encodes with (each compared with tiktoken's
#: own on real prose and code, ranks aside; the check compares ids on every run's tokenizer).
TIKTOKEN_SCHEMES = {
    PATTERNS["v2"]: "nemotron",  # also tekken's own regex
    OPENAI_ENCODINGS["cl100k_base"][0]: "gpt4",
    OPENAI_ENCODINGS["r50k_base"][0]: "gpt2",
    OPENAI_ENCODINGS["o200k_base"][0]: "o200k",
}


class FastPathRefused(Exception):
    """The tokenizer has no gigatoken form (the reason is the message). Internal to the tokenizers: the encoder
    choice (``select``) catches it and keeps the reference library, logging the reason."""


@dataclass(frozen=True)
class FastSource:
    """What gigatoken is built from: a tokenizer.json (``kind="json"``) or a ``.tiktoken`` rank file
    (``kind="tiktoken"``) with gigatoken's name of its split regex, special tokens matched in the text (at
    gigatoken ids after the ranks) and the id of rank 0 in the reference's numbering."""

    kind: str
    data: bytes
    scheme: str | None = None
    specials: dict[str, int] = field(default_factory=dict)
    ranks: int = 0
    shift: int = 0
    whole_pieces: list[str] = field(default_factory=list)
    """Strings the reference emits as one piece where gigatoken does not: texts holding one are encoded by
    the reference library instead."""

    def record(self) -> dict:
        """Everything but the data, JSON-ready (the verdict cache keeps the data beside it)."""
        return {key: value for key, value in dataclasses.asdict(self).items() if key != "data"}


@dataclass(frozen=True)
class Profile:
    """What the pipeline needs from the reference tokenizer besides its ids."""

    reference: str
    """The reference library and version (``tokenizers 0.23.3``)."""
    vocab_size: int
    eod: int | None
    bos: int | None
    prefix: list[int]
    suffix: list[int]
    """The ids put around every text (a post-processor's BOS)."""
    cut_rule: str | None
    """The name of the reference's long-text cut rule (:data:`corpus.tokenizers.long_texts.CUT_RULES`)."""
    id_options: dict

    @classmethod
    def of(cls, reference: TextTokenizer) -> "Profile":
        """The profile of a built reference tokenizer (raises its AffixError when its affixes vary)."""
        prefix, suffix = reference.affixes()
        return cls(reference.encoder_name, reference.vocab_size, reference.eod, reference.bos, list(prefix),
                   list(suffix), reference.cut_rule.name if reference.cut_rule else None, reference.id_options())


def huggingface_sources(reference) -> list[FastSource]:
    """The reference's tokenizer.json (the special tokens its configs name already added): as a rank file when
    it is byte-level BPE (gigatoken loads that fastest), and as JSON in a spelling gigatoken reads."""
    text = reference.tokenizer.to_str()
    data = orjson.loads(text)
    ranked = spellings.as_rank_file(data)
    rewritten, whole_pieces = spellings.for_gigatoken(text, data)
    json_form = FastSource("json", rewritten.encode(), whole_pieces=whole_pieces)
    return [FastSource("tiktoken", *ranked), json_form] if ranked else [json_form]


def sentencepiece_sources(reference) -> list[FastSource]:
    """gigatoken's tokenizer.json conversion of the ``.model`` without its control pieces as added tokens."""
    from gigatoken._load.sentencepiece import sentencepiece_to_tokenizer_json

    with open(reference.path, "rb") as handle:
        data = json.loads(sentencepiece_to_tokenizer_json(handle.read()))
    processor = reference.processor
    data["added_tokens"] = [token for token in data.get("added_tokens") or []
                            if not processor.IsControl(token["id"])]
    # NOTE: what is left are user-defined pieces, which gigatoken matches in the raw text (the text after one
    # gets a dummy "▁" of its own) and sentencepiece after normalisation: texts holding one go to sentencepiece.
    whole = [token["content"] for token in data["added_tokens"] if not token.get("special")]
    return [FastSource("json", json.dumps(data).encode(), whole_pieces=whole)]


def tiktoken_sources(reference) -> list[FastSource]:
    """The kept ranks as a ``.tiktoken`` file, read with gigatoken's name of the vocabulary's regex."""
    vocabulary = reference.vocabulary
    scheme = TIKTOKEN_SCHEMES.get(vocabulary.pattern)
    if scheme is None:
        raise FastPathRefused(f"gigatoken has no split regex equal to {vocabulary.options['pattern']}'s")
    lines = b"".join(base64.b64encode(token) + b" %d\n" % rank for rank, token in enumerate(vocabulary.ranks))
    count = len(vocabulary.ranks)
    specials = {token: count + i for token, i in vocabulary.specials.items()} if vocabulary.specials_in_text else {}
    return [FastSource("tiktoken", lines, scheme, specials, count, vocabulary.shift)]


def build_backend(source: FastSource):
    """A ``gigatoken.Tokenizer`` of ``source`` (raises gigatoken's own error when it refuses it)."""
    import gigatoken

    if source.kind == "json":
        return gigatoken.Tokenizer.from_json(source.data)
    with tempfile.NamedTemporaryFile(suffix=".tiktoken") as ranks:  # gigatoken reads rank files by path
        ranks.write(source.data)
        ranks.flush()
        return gigatoken.Tokenizer.from_tiktoken(ranks.name, pretokenizer=source.scheme,
                                                 special_tokens=source.specials)


class GigatokenTextTokenizer(TextTokenizer):
    """gigatoken's Rust BPE behind the TextTokenizer interface; metadata from the reference's profile, which
    is built only to decode."""

    def __init__(self, config: TokenizerConfig, source: FastSource, profile: Profile, files: list[str],
                 threads: int | None, reference: TextTokenizer | None = None) -> None:
        """``reference``: the reference tokenizer when it is already built (else built on first use)."""
        self.source, self.profile, self._files = source, profile, files
        self.prefix, self.suffix = profile.prefix, profile.suffix
        self.cut_rule = CUT_RULES[profile.cut_rule] if profile.cut_rule else None
        self.backend = build_backend(source)
        self.memory_budget, self.rebuild_min_chars = MEMORY_BUDGET, REBUILD_MIN_CHARS
        self.rebuilds, self._chars_since_rebuild, self._baseline_rss = 0, 0, None
        # None: gigatoken's own choice (parallel unless inside a multiprocessing worker).
        self.parallel = None if threads is None else threads > 1
        limit_rayon_threads(threads)
        self.encoder_name = library_version("gigatoken")
        self._reference = reference
        self._whole = (re.compile("|".join(map(re.escape, sorted(source.whole_pieces, key=len, reverse=True))))
                       if source.whole_pieces else None)
        super().__init__(config, profile.vocab_size, profile.eod, profile.bos)

    @property
    def loaded_reference(self) -> TextTokenizer | None:
        """The reference tokenizer if it is built already (None: using it would load it)."""
        return self._reference

    @property
    def reference(self) -> TextTokenizer:
        """The reference tokenizer, built on first use (to decode, or for texts gigatoken must not encode)."""
        if self._reference is None:
            self._reference = build_tokenizer(self.config)
        return self._reference

    def _routed(self, texts: list[str]) -> list[int]:
        """Positions of the texts the reference library encodes (they hold one of the source's whole pieces)."""
        if self._whole is None:
            return []
        return [index for index, text in enumerate(texts) if isinstance(text, str) and self._whole.search(text)]

    def _reference_ids(self, ids: np.ndarray) -> np.ndarray:
        """Rank ids shifted to the reference's numbering, special tokens moved back below them."""
        if not self.source.ranks or not ids.size:
            return ids
        if int(ids.max()) < self.source.ranks:  # no special token: one read instead of three passes
            return ids + np.uint32(self.source.shift) if self.source.shift else ids
        return np.where(ids >= self.source.ranks, ids - self.source.ranks, ids + self.source.shift)

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        ids = self._encode_plain(texts)
        if self.prefix or self.suffix:
            return [[*self.prefix, *row, *self.suffix] for row in ids]
        return ids

    def _encode_plain(self, texts: list[str]) -> list[list[int]]:
        routed = self._routed(texts)
        if routed:
            return _spliced_lists(texts, routed, self._encode_plain, self.reference._encode_plain)
        with without_awkward():
            ids = self.backend.encode_batch_list(texts, parallel=self.parallel)
        self._bound_caches(sum(map(len, texts)))
        if self.source.ranks:
            return [self._reference_ids(np.asarray(row, dtype=np.int64)).tolist() for row in ids]
        return ids

    def affixes(self) -> tuple[list[int], list[int]]:
        return self.prefix, self.suffix

    def _encode_batch_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """gigatoken's own flat result (:mod:`~corpus.tokenizers.gigatoken_rows`): no Python int per token."""
        try:
            ids, counts = self._encode_plain_flat(texts)
        except TokenizeError:
            raise
        except Exception:  # noqa: BLE001 - a text it refuses: the list path names it (TokenizeError)
            return super()._encode_batch_flat(texts)
        return around_texts(ids, counts, self.prefix, self.suffix)

    def _encode_plain_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        routed = self._routed(texts)
        if routed:
            return _spliced_flat(texts, routed, self._encode_plain_flat, self.reference._encode_plain_flat)
        with without_awkward():
            result = self.backend.encode_batch(texts, parallel=self.parallel)
        ids, counts = flat_and_counts(result)  # ids stay uint32: the writer casts them once
        self._bound_caches(sum(map(len, texts)))
        return self._reference_ids(ids), counts

    def _bound_caches(self, chars: int) -> None:
        """Rebuild the backend (dropping its encode caches) once RSS outgrows the budget."""
        self._chars_since_rebuild += chars
        rss = resident_bytes()
        if rss is None:
            return
        if self._baseline_rss is None:
            self._baseline_rss = rss
        elif rss - self._baseline_rss > self.memory_budget and self._chars_since_rebuild >= self.rebuild_min_chars:
            self.backend = None  # free the old caches before the new tokenizer is built
            self.backend = build_backend(self.source)
            self.rebuilds += 1
            self._chars_since_rebuild = 0
            log.info("gigatoken caches reached %d MB above the start; rebuilt the tokenizer (%d times)",
                     (rss - self._baseline_rss) >> 20, self.rebuilds)

    def decode(self, ids: list[int]) -> str:
        return self.reference.decode(ids)

    def files(self) -> list[str]:
        return self._files

    def id_options(self) -> dict:
        return dict(self.profile.id_options)


def _split_call(texts: list[str], routed: list[int], fast, reference) -> list[tuple[list[int], object]]:
    """The results of ``fast`` on the texts not ``routed`` and of ``reference`` on those, with their positions
    (a text either refuses is reported at its position in ``texts``)."""
    chosen = set(routed)
    results = []
    for indices, encode in (([i for i in range(len(texts)) if i not in chosen], fast), (routed, reference)):
        if indices:
            try:
                results.append((indices, encode([texts[i] for i in indices])))
            except TokenizeError as error:
                raise TokenizeError(indices[error.index], error.reason) from None
    return results


def _spliced_lists(texts: list[str], routed: list[int], fast, reference) -> list[list[int]]:
    """:func:`_split_call` of two list encoders, back in input order."""
    ids: list = [None] * len(texts)
    for indices, rows in _split_call(texts, routed, fast, reference):
        for index, row in zip(indices, rows):
            ids[index] = row
    return ids


def _spliced_flat(texts: list[str], routed: list[int], fast, reference) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_split_call` of two flat encoders, back in input order."""
    parts: list = [None] * len(texts)
    for indices, (flat, lengths) in _split_call(texts, routed, fast, reference):
        for index, part in zip(indices, np.split(flat.astype(np.int64, copy=False), np.cumsum(lengths)[:-1])):
            parts[index] = part
    return np.concatenate(parts), np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))


def resident_bytes() -> int | None:
    """This process's resident set size (Linux), or None where /proc is not available."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None
