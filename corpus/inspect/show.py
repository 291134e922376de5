"""``corpus inspect --show``: print documents of a pair, decoded with the tokenizer recorded in its
sidecar (or one given explicitly, see :mod:`corpus.tokenizers.decode`), and their raw ids on request.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from corpus.core.errors import ConfigError, UserError
from corpus.indexed import IndexedReader
from corpus.tokenizers.decode import cached_tokenizer, decode_or_none, recorded_tokenizer

if TYPE_CHECKING:
    from corpus.tokenizers import TextTokenizer, TokenizerConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DocumentRange:
    """Documents ``[start, stop)`` to show; ``stop`` None means to the last document."""

    start: int
    stop: int | None

    @classmethod
    def parse(cls, text: str) -> "DocumentRange":
        """``"N"`` is document N alone, ``"A:B"`` documents A to B-1; ``"A:"`` and ``":B"`` are open."""
        head, colon, tail = text.partition(":")
        try:
            start = int(head) if head.strip() or not colon else 0
            stop = start + 1 if not colon else int(tail) if tail.strip() else None
        except ValueError:
            raise ConfigError(f"--show {text!r}: expected N (one document) or A:B (documents A to B-1), "
                              "e.g. 0:5") from None
        if start < 0 or (stop is not None and stop <= start):
            raise ConfigError(f"--show {text!r}: give document numbers from 0 with B greater than A, e.g. 0:5")
        return cls(start, stop)

    def resolve(self, num_documents: int, prefix: str) -> range:
        """The document numbers to show in a file of ``num_documents``; out of range is an error."""
        stop = num_documents if self.stop is None else self.stop
        if self.start >= num_documents or stop > num_documents:
            raise ConfigError(f"{prefix}: --show asks for documents up to {max(self.start, stop - 1)} "
                              f"but the file has {num_documents} (0..{num_documents - 1})")
        return range(self.start, stop)


@dataclass(frozen=True)
class ShownDocument:
    """One document as shown."""

    index: int
    num_tokens: int
    #: Token ids, one list per sequence; None unless ids were asked for.
    ids: list[list[int]] | None
    #: The decoded text; None when no tokenizer is known.
    text: str | None


def resolve_tokenizer(prefix: str, config: "TokenizerConfig | None", meta: dict | None) -> "TextTokenizer | None":
    """The tokenizer to decode with: ``config`` when given, else the one the sidecar of ``prefix``
    records, else None. A record that cannot be rebuilt (file moved, other tool) is a :class:`ConfigError`."""
    if config is not None:
        return cached_tokenizer(config)
    try:
        return recorded_tokenizer((meta or {}).get("tokenizer"))
    except UserError as error:
        raise ConfigError(f"{prefix}: cannot rebuild the tokenizer its sidecar records ({error}); "
                          "give --tokenizer-type/--tokenizer-model to decode") from None


def show_documents(prefix: str, selection: DocumentRange, config: "TokenizerConfig | None",
                   meta: dict | None, ids: bool = False) -> list[ShownDocument]:
    """Documents ``selection`` of ``prefix``, decoded when a tokenizer is known, with ids when asked
    (or when nothing can decode them)."""
    tokenizer = resolve_tokenizer(prefix, config, meta)
    if tokenizer is None and not ids:
        log.warning("%s: no tokenizer recorded in its sidecar; showing raw ids "
                    "(give --tokenizer-type/--tokenizer-model to decode)", prefix)
        ids = True
    shown = []
    with IndexedReader(prefix) as reader:
        for index in selection.resolve(reader.num_documents, prefix):
            sequences = reader.document(index)
            flat = np.concatenate(sequences) if sequences else np.empty(0, dtype=reader.dtype)
            text = (decode_or_none(tokenizer, flat.tolist(), f"{prefix}: document {index}") if tokenizer is not None
                    else None)
            keep_ids = ids or (tokenizer is not None and text is None)
            shown.append(ShownDocument(index, len(flat), [s.tolist() for s in sequences] if keep_ids else None, text))
    return shown
