"""Tokenizers for ``corpus tokenize``: Megatron's ``--tokenizer-type`` names, Megatron's ids, fast batch calls.

Public interface (the pipeline relies on exactly this):

- :class:`TokenizerConfig` (frozen, picklable; workers rebuild tokenizers from it in spawned processes),
  :func:`config_from_dict`, :func:`config_from_record` (from a sidecar's ``tokenizer`` record);
- :func:`build_tokenizer` ``(config) -> TextTokenizer`` (the reference library of the type);
- :func:`select_encoder` ``(config, sample_texts) -> (TextTokenizer, reason)``: the gigatoken fast path
  when it is proven identical on the sample, else the reference library and a one-line reason;
- :class:`TextTokenizer`: ``encode_batch``, ``decode``, ``vocab_size``, ``eod``, ``bos``, ``describe()``,
  ``encoder_name``, ``require_eod()`` (the ``--append-eod`` check);
- :data:`TOKENIZER_TYPES`: the registry (what ``--tokenizer-type`` accepts).

NOTE: HF tokenizers and gigatoken run a rayon thread pool that must not be inherited across ``fork``;
create tokenizers in spawned (or forkserver) workers only.
"""

from __future__ import annotations

from corpus.tokenizers.base import TextTokenizer, build_tokenizer
from corpus.tokenizers.config import TokenizerConfig, config_from_dict, config_from_record
from corpus.tokenizers.errors import TokenizeError
from corpus.tokenizers.registry import TOKENIZER_TYPES
from corpus.tokenizers.select import select_encoder, settled_encoder

__all__ = [
    "TOKENIZER_TYPES",
    "TextTokenizer",
    "TokenizeError",
    "TokenizerConfig",
    "build_tokenizer",
    "config_from_dict",
    "config_from_record",
    "select_encoder",
    "settled_encoder",
]
