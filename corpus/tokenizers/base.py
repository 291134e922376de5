"""``TextTokenizer``: the one interface the tokenize pipeline uses, whatever the library underneath.

Each adapter turns a batch of texts into exactly the ids megatron-core 0.16.1's tokenizer class for
the same ``--tokenizer-type`` gives per document (``MegatronTokenizer.tokenize(text)``), using the
library's fast batch call and, where needed, post-processing to Megatron's ids.
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from importlib.metadata import PackageNotFoundError, version
from itertools import chain, islice
from typing import TYPE_CHECKING

import numpy as np

from corpus.core.errors import ConfigError
from corpus.indexed.sidecar import fingerprint_files
from corpus.tokenizers import long_texts
from corpus.tokenizers.config import OPTION_NAMES, TokenizerConfig, existing_file
from corpus.tokenizers.errors import TokenizeError
from corpus.tokenizers.long_texts import CutRule
from corpus.tokenizers.registry import fingerprinted_files, lookup

if TYPE_CHECKING:
    from tokenizers import Tokenizer

log = logging.getLogger(__name__)


def library_version(distribution: str) -> str:
    """``"<distribution> <version>"`` for the encoder_name of an adapter."""
    try:
        return f"{distribution} {version(distribution)}"
    except PackageNotFoundError:
        return f"{distribution} (unknown version)"


def _flattened(ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Lists of ids as one flat int64 array and each list's count."""
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    return np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum())), lengths


class TextTokenizer(ABC):
    """Batch text → Megatron ids, plus what the sidecar and the writer need to know."""

    config: TokenizerConfig
    encoder_name: str
    """The library and version that actually encodes, e.g. ``tokenizers 0.23.3``, ``gigatoken 0.10.0``."""
    cut_rule: CutRule | None = None
    """Where this tokenizer's very long texts may be cut into pieces; None: always encoded whole."""

    def __init__(self, config: TokenizerConfig, vocab_size: int, eod: int | None, bos: int | None) -> None:
        self.config = config
        self.vocab_size = vocab_size
        self.eod = config.eod_id if config.eod_id is not None else eod
        self.bos = config.bos_id if config.bos_id is not None else bos
        for name, value in (("eod_id", config.eod_id), ("bos_id", config.bos_id)):
            if value is not None and value >= vocab_size:
                raise ConfigError(f"{name} {value} is outside the vocabulary (size {vocab_size})")

    @abstractmethod
    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        """The library's batch encode, post-processed to Megatron's ids."""

    @abstractmethod
    def decode(self, ids: list[int]) -> str:
        """Text of ``ids`` (what Megatron's ``detokenize`` gives; special tokens may be dropped)."""

    @abstractmethod
    def files(self) -> list[str]:
        """The tokenizer's files, in a fixed order (their bytes make the fingerprint)."""

    def id_options(self) -> dict:
        """Options besides the files that change ids (recorded in the sidecar and its identity)."""
        return {}

    def special_strings(self) -> list[str]:
        """Strings the tokenizer treats specially when they occur in text (checked by the fast path)."""
        return []

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Ids of each text, exactly as Megatron's ``tokenize(text)`` (EOD is the caller's job).

        A text the library cannot encode raises :class:`TokenizeError` with its index in ``texts``.
        """
        long = self._long_indices(texts)
        if not long:
            return self._encode_whole(texts)
        flat, lengths = self._encode_with_long_texts(texts, long)
        return [part.tolist() for part in np.split(flat, np.cumsum(lengths)[:-1])]

    def _encode_whole(self, texts: list[str]) -> list[list[int]]:
        """:meth:`_encode_batch` on every text as it is, naming the text the library refuses."""
        try:
            return self._encode_batch(texts)
        except TokenizeError:
            raise
        except Exception as error:  # noqa: BLE001 - a library error: find the culprit text and name it
            return self._locate_failure(texts, error)

    def encode_batch_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The ids of every text concatenated (an integer array) and each text's count (int64): what the
        pipeline writes. Same ids as :meth:`encode_batch`; very long texts are encoded in pieces
        (:mod:`corpus.tokenizers.long_texts`)."""
        long = self._long_indices(texts)
        if not long:
            return self._encode_batch_flat(texts)
        return self._encode_with_long_texts(texts, long)

    def _encode_batch_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`encode_batch_flat` of texts encoded whole. Adapters whose library hands back arrays
        override this to avoid building a Python int per token (it dominates the cost at tens of MB/s)."""
        return _flattened(self._encode_whole(texts))

    def _encode_plain(self, texts: list[str]) -> list[list[int]]:
        """Ids of pieces of a text, without the tokens the tokenizer adds around every text
        (:meth:`affixes`). Adapters that add such tokens override both."""
        return self._encode_batch(texts)

    def _encode_plain_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_encode_plain` as one flat array and each text's count; adapters whose library hands back arrays
        override it (a very long text's pieces then never become Python ints)."""
        return _flattened(self._encode_plain(texts))

    def affixes(self) -> tuple[list[int], list[int]]:
        """The ids put before and after every text's own ids (e.g. a post-processor's BOS)."""
        return [], []

    def _long_indices(self, texts: list[str]) -> list[int]:
        """Positions of the texts to encode in pieces (none unless this tokenizer has a cut rule)."""
        if self.cut_rule is None:
            return []
        return [index for index, text in enumerate(texts) if isinstance(text,
                                                                        str) and len(text) > long_texts.LONG_TEXT_CHARS]

    def _encode_with_long_texts(self, texts: list[str], long: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """The flat ids of a batch holding very long texts: the short ones in one library call, each
        long one in pieces, put back in order by slices of the short ones' ids (no array per text)."""
        chosen = set(long)
        short = [index for index in range(len(texts)) if index not in chosen]
        flat, short_lengths = np.empty(0, np.int64), np.empty(0, np.int64)
        if short:
            try:
                flat, short_lengths = self._encode_batch_flat([texts[index] for index in short])
            except TokenizeError as error:
                raise TokenizeError(short[error.index], error.reason) from None
        lengths = np.zeros(len(texts), dtype=np.int64)
        lengths[short] = short_lengths
        ends = np.cumsum(short_lengths)
        pieces, taken = [], 0
        for position, index in enumerate(long):  # the short texts before it, then it
            before = ends[index - position - 1] if index > position else 0
            pieces.append(flat[taken:before])
            taken = before
            try:
                ids = self._encode_long(texts[index])
            except Exception as error:  # noqa: BLE001 - a library error on a piece names the whole text
                raise TokenizeError(index, f"{self.config.type} could not encode the text: {error}") from None
            pieces.append(ids.astype(flat.dtype, copy=False))  # ids of the vocabulary: they fit the library's type
            lengths[index] = len(ids)
        pieces.append(flat[taken:])
        return np.concatenate(pieces), lengths

    def _encode_long(self, text: str) -> np.ndarray:
        """One very long text's ids: its pieces encoded a few per library call, the affixes added once."""
        prefix, suffix = self.affixes()
        arrays = [np.asarray(prefix, dtype=np.int64)]
        pieces = long_texts.pieces(text, self.cut_rule, self._same_ids_when_cut)
        while group := list(islice(pieces, long_texts.PIECES_PER_CALL)):
            arrays.append(self._encode_plain_flat(group)[0].astype(np.int64, copy=False))
        arrays.append(np.asarray(suffix, dtype=np.int64))
        return np.concatenate(arrays)

    def _same_ids_when_cut(self, whole: str, left: str, right: str) -> bool:
        """The check of a cut on a window around it (see :mod:`corpus.tokenizers.long_texts`)."""
        whole_ids, left_ids, right_ids = self._encode_plain([whole, left, right])
        return list(whole_ids) == [*left_ids, *right_ids]

    def _locate_failure(self, texts: list[str], error: Exception) -> list[list[int]]:
        """Re-encode one text at a time to say which one the library refused, and why."""
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise TokenizeError(index, f"expected a string to tokenize, got {type(text).__name__}") from None
            try:
                self._encode_batch([text])
            except TokenizeError as failure:
                raise TokenizeError(index, failure.reason) from None
            except Exception as single:  # noqa: BLE001
                raise TokenizeError(index, f"{self.config.type} could not encode the text: {single}") from None
        raise error

    def require_eod(self) -> int:
        """The EOD id for ``--append-eod``, or a clear error when this tokenizer has none."""
        if self.eod is None:
            raise ConfigError(
                f"--append-eod: {self.config.type} tokenizer {self.config.model or ''} has no end-of-document "
                "token (no eos_token in tokenizer_config.json and no known end-of-text special token); "
                "pass --eod-id ID or drop --append-eod")
        return self.eod

    def describe(self) -> dict:
        """The sidecar's ``tokenizer`` record: enough to rebuild this tokenizer and to compare token spaces."""
        rebuild = {key: value for key, value in absolute_config(self.config).to_dict().items() if key != "encoder"}
        return {
            "type": self.config.type,
            "model": rebuild["model"],
            "vocab_file": rebuild["vocab_file"],
            "merge_file": rebuild["merge_file"],
            "options": {**self.id_options(), "eod_id": self.eod, "bos_id": self.bos},
            "fingerprint": fingerprint_files(self.files()) if self.files() else None,
            "vocab_size": self.vocab_size,
            "eod": self.eod,
            "bos": self.bos,
            "encoder": self.encoder_name,
            "config": rebuild,
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config.type}, vocab_size={self.vocab_size}, encoder={self.encoder_name!r})"


@dataclass(frozen=True)
class HuggingFaceForm:
    """A tokenizer as a ``tokenizers.Tokenizer`` (what a registry entry's ``huggingface_form`` returns), and whether
    special-token strings in a text are plain text (as sentencepiece and tiktoken's own numbering encode them)
    rather than their ids."""

    tokenizer: Tokenizer
    specials_as_text: bool = False


def build_tokenizer(config: TokenizerConfig, threads: int | None = None) -> TextTokenizer:
    """The reference tokenizer of ``config.type`` (the library megatron-core wraps, never megatron-core).

    ``threads`` bounds the threads the library may use inside one batch call (None: its default, all
    cores); the pipeline passes its ``--threads-per-worker``.
    """
    spec = lookup(config.type)
    return spec.load(spec.adapter)(config, threads)


def tokenizer_files(config: TokenizerConfig) -> list[str]:
    """The files ``config``'s tokenizer reads, absolute and in the order of its ``files()``, without building it
    (their bytes are its identity)."""
    spec = lookup(config.type)
    if spec.needs == ("model",):
        if spec.fingerprinted:
            return fingerprinted_files(config.type, config.model)
        return [existing_file(config.model, OPTION_NAMES["model"], config.type)]
    return [existing_file(getattr(config, name), OPTION_NAMES[name], config.type)
            for name in spec.needs if name in ("vocab_file", "merge_file")]


def absolute_config(config: TokenizerConfig) -> TokenizerConfig:
    """The config with its file paths made absolute (a record must not depend on the working directory)."""
    paths = {name: os.path.abspath(getattr(config, name)) for name in ("model", "vocab_file", "merge_file")
             if getattr(config, name)}
    return replace(config, **paths)
