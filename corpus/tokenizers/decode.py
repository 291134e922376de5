"""Turning stored ids back into text for people (``corpus inspect --show``, ``corpus blend --show-samples``): the
tokenizer a sidecar records, built once per distinct configuration, and a decode that falls back to the raw ids
instead of stopping when a corrupt file holds an id the tokenizer refuses."""

from __future__ import annotations

import functools
import logging

from corpus.tokenizers.base import TextTokenizer, build_tokenizer
from corpus.tokenizers.config import TokenizerConfig, config_from_record

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=8)
def cached_tokenizer(config: TokenizerConfig) -> TextTokenizer:
    """``build_tokenizer(config)``, built once per distinct config (loading one can take a second), so showing
    documents of a thousand shards made with one tokenizer loads it once."""
    return build_tokenizer(config)


def recorded_tokenizer(record: dict | None) -> TextTokenizer | None:
    """The tokenizer a sidecar's ``tokenizer`` record describes (None without a record); a record that cannot be
    rebuilt (file moved, other tool) raises :class:`~ConfigError`."""
    if record is None:
        return None
    return cached_tokenizer(config_from_record(record))


def decode_or_none(tokenizer: TextTokenizer, ids: list[int], where: str) -> str | None:
    """The text of ``ids``, or None (and a warning) when the tokenizer refuses them (e.g. an id beyond its
    vocabulary in a corrupt file): showing the raw ids beats stopping."""
    try:
        return tokenizer.decode(ids)
    except Exception as error:  # noqa: BLE001 - each library raises its own types
        log.warning("%s cannot be decoded with %s (%s: %s); showing raw ids (run corpus inspect --check)",
                    where, tokenizer.config.type, type(error).__name__, error)
        return None
