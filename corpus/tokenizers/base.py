"""``TextTokenizer``: the one interface the tokenize pipeline uses, whatever the library underneath.

Each adapter turns a batch of texts into exactly the ids megatron-core 0.16.1's tokenizer class for
the same ``--tokenizer-type`` gives per document (``MegatronTokenizer.tokenize(text)``), using the
library's fast batch call and, where needed, post-processing to Megatron's ids.
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from itertools import chain

import numpy as np

from corpus.meta import fingerprint_files
from corpus.tokenizers.config import TokenizeError, TokenizerConfig, TokenizerConfigError

log = logging.getLogger(__name__)


def library_version(distribution: str) -> str:
    """``"<distribution> <version>"`` for the encoder_name of an adapter."""
    try:
        return f"{distribution} {version(distribution)}"
    except PackageNotFoundError:
        return f"{distribution} (unknown version)"


class TextTokenizer(ABC):
    """Batch text → Megatron ids, plus what the sidecar and the writer need to know."""

    config: TokenizerConfig
    encoder_name: str
    """The library and version that actually encodes, e.g. ``tokenizers 0.23.3``, ``gigatoken 0.10.0``."""

    def __init__(self, config: TokenizerConfig, vocab_size: int, eod: int | None, bos: int | None) -> None:
        self.config = config
        self.vocab_size = vocab_size
        self.eod = config.eod_id if config.eod_id is not None else eod
        self.bos = config.bos_id if config.bos_id is not None else bos
        for name, value in (("eod_id", config.eod_id), ("bos_id", config.bos_id)):
            if value is not None and value >= vocab_size:
                raise TokenizerConfigError(f"{name} {value} is outside the vocabulary (size {vocab_size})")

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
        try:
            return self._encode_batch(texts)
        except TokenizeError:
            raise
        except Exception as error:  # noqa: BLE001 - a library error: find the culprit text and name it
            return self._locate_failure(texts, error)

    def encode_batch_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The ids of every text concatenated (an integer array) and each text's count (int64): what the
        pipeline writes.

        Same ids as :meth:`encode_batch`; adapters whose library hands back flat arrays override this
        to avoid building a Python int per token (it dominates the cost at tens of MB/s).
        """
        ids = self.encode_batch(texts)
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        return np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum())), lengths

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
            raise TokenizerConfigError(
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


def absolute_config(config: TokenizerConfig) -> TokenizerConfig:
    """The config with its file paths made absolute (a record must not depend on the working directory)."""
    paths = {name: os.path.abspath(getattr(config, name)) for name in ("model", "vocab_file", "merge_file")
             if getattr(config, name)}
    return replace(config, **paths)
