"""The gigatoken fast path (the Rust encoder of Megatron's ``preprocess_data_fast.py``).

gigatoken is optional and imported lazily. It takes HuggingFace tokenizer.json files (byte-level BPE and
SentencePiece-style BPE with byte fallback) and SentencePiece ``.model`` files, which it converts to a
tokenizer.json itself. Two differences from Megatron's ids are corrected here:

- it does not apply a tokenizer.json's post-processor, so the tokens ``tokenizer(text)`` adds around
  every text (e.g. a leading BOS) are the reference adapter's :meth:`affixes`, added here;
- its SentencePiece conversion makes control pieces (``<s>``, ``</s>``, ``[INST]``...) added tokens that
  match whole in the text, where sentencepiece encodes such text as ordinary pieces; we drop them.

Whether it may be used at all is decided by :mod:`corpus.tokenizers.select`, which compares its ids
with the reference on real input and on every special string of the tokenizer.

Memory: gigatoken 0.10.0 memoises every pre-token it encodes, without bound (1.1 GB after 150 MB of
never-repeating words, still growing; real text grows much slower). Rebuilding the tokenizer drops its
caches, so when this process's RSS has grown by MEMORY_BUDGET since the first batch we rebuild it
(at most once per REBUILD_MIN_CHARS of input, so a process that stays large does not rebuild on every
batch). The ``gigatoken-cachefix`` fork bounds its caches itself and never reaches the budget.

NOTE: gigatoken's batch calls run on rayon's process-global pool, which is not fork-safe; workers must be
spawned. ``parallel=False`` (threads=1) never touches the pool.
"""

from __future__ import annotations

import json
import logging
import os

import numpy as np

from corpus.tokenizers.base import TextTokenizer, library_version
from corpus.tokenizers.huggingface import HuggingFaceTextTokenizer, limit_rayon_threads
from corpus.tokenizers.sentencepiece import SentencePieceTextTokenizer

log = logging.getLogger(__name__)

MEMORY_BUDGET = 512 << 20
REBUILD_MIN_CHARS = 64 << 20


def huggingface_json(reference: HuggingFaceTextTokenizer) -> str:
    """The reference's tokenizer.json, with the special tokens its configs name already added."""
    return reference.tokenizer.to_str()


def sentencepiece_json(reference: SentencePieceTextTokenizer) -> str:
    """gigatoken's tokenizer.json conversion of the ``.model`` without its control pieces as added tokens."""
    from gigatoken._load.sentencepiece import sentencepiece_to_tokenizer_json

    with open(reference.path, "rb") as handle:
        data = json.loads(sentencepiece_to_tokenizer_json(handle.read()))
    processor = reference.processor
    data["added_tokens"] = [token for token in data.get("added_tokens") or []
                            if not processor.IsControl(token["id"])]
    return json.dumps(data)


# The reference adapters gigatoken can stand in for, and how to give it their tokenizer.
SOURCES = {
    "HuggingFaceTokenizer": huggingface_json,
    "GPT2BPETokenizer": huggingface_json,
    "SentencePieceTokenizer": sentencepiece_json,
    "GPTSentencePieceTokenizer": sentencepiece_json,
    "Llama2Tokenizer": sentencepiece_json,
}


def with_affixes(flat: np.ndarray, lengths: np.ndarray, prefix: list[int], suffix: list[int]) -> tuple[np.ndarray,
                                                                                                       np.ndarray]:
    """Put ``prefix`` before and ``suffix`` after every text of a flat batch (the post-processor's tokens)."""
    if not prefix and not suffix:
        return flat, lengths
    extra = len(prefix) + len(suffix)
    new_lengths = lengths + extra
    starts = np.concatenate(([0], np.cumsum(new_lengths)[:-1]))
    out = np.empty(int(new_lengths.sum()), dtype=flat.dtype)
    out[np.arange(len(flat)) + np.repeat(starts + len(prefix) - np.concatenate(([0], np.cumsum(lengths)[:-1])),
                                         lengths)] = flat
    if prefix:
        out[(starts[:, None] + np.arange(len(prefix))).ravel()] = np.tile(prefix, len(lengths))
    if suffix:
        ends = starts + new_lengths
        out[(ends[:, None] - len(suffix) + np.arange(len(suffix))).ravel()] = np.tile(suffix, len(lengths))
    return out, new_lengths


class GigatokenTextTokenizer(TextTokenizer):
    """gigatoken's Rust BPE behind the TextTokenizer interface; decode and metadata from the reference."""

    def __init__(self, reference: TextTokenizer, threads: int | None) -> None:
        import gigatoken

        self.reference = reference
        self.prefix, self.suffix = reference.affixes()
        self.cut_rule = reference.cut_rule
        self.source = SOURCES[reference.config.type](reference)
        self.backend = gigatoken.Tokenizer.from_json(self.source)
        self.memory_budget, self.rebuild_min_chars = MEMORY_BUDGET, REBUILD_MIN_CHARS
        self.rebuilds, self._chars_since_rebuild, self._baseline_rss = 0, 0, None
        # None: gigatoken's own choice (parallel unless inside a multiprocessing worker).
        self.parallel = None if threads is None else threads > 1
        limit_rayon_threads(threads)
        self.encoder_name = library_version("gigatoken")
        super().__init__(reference.config, reference.vocab_size, reference.eod, reference.bos)

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        ids = self._encode_plain(texts)
        if self.prefix or self.suffix:
            return [[*self.prefix, *row, *self.suffix] for row in ids]
        return ids

    def _encode_plain(self, texts: list[str]) -> list[list[int]]:
        ids = self.backend.encode_batch_list(texts, parallel=self.parallel)
        self._bound_caches(sum(map(len, texts)))
        return ids

    def affixes(self) -> tuple[list[int], list[int]]:
        return self.prefix, self.suffix

    def _encode_batch_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """gigatoken's own flat result (an awkward array): no Python int per token."""
        try:
            ids = self.backend.encode_batch(texts, parallel=self.parallel)
        except Exception:  # noqa: BLE001 - a text it refuses: the list path names it (TokenizeError)
            return super()._encode_batch_flat(texts)
        import awkward

        self._bound_caches(sum(map(len, texts)))
        flat = awkward.to_numpy(awkward.flatten(ids))  # uint32: the writer casts to the output dtype once
        return with_affixes(flat, awkward.to_numpy(awkward.num(ids)).astype(np.int64), self.prefix, self.suffix)

    def _bound_caches(self, chars: int) -> None:
        """Rebuild the backend (dropping its encode caches) once RSS outgrows the budget."""
        self._chars_since_rebuild += chars
        rss = resident_bytes()
        if rss is None:
            return
        if self._baseline_rss is None:
            self._baseline_rss = rss
        elif rss - self._baseline_rss > self.memory_budget and self._chars_since_rebuild >= self.rebuild_min_chars:
            import gigatoken

            self.backend = None  # free the old caches before the new tokenizer is built
            self.backend = gigatoken.Tokenizer.from_json(self.source)
            self.rebuilds += 1
            self._chars_since_rebuild = 0
            log.info("gigatoken caches reached %d MB above the start; rebuilt the tokenizer (%d times)",
                     (rss - self._baseline_rss) >> 20, self.rebuilds)

    def decode(self, ids: list[int]) -> str:
        return self.reference.decode(ids)

    def files(self) -> list[str]:
        return self.reference.files()

    def id_options(self) -> dict:
        return self.reference.id_options()

    def special_strings(self) -> list[str]:
        return self.reference.special_strings()


def resident_bytes() -> int | None:
    """This process's resident set size (Linux), or None where /proc is not available."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None
