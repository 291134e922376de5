"""``TokenizerConfig``: everything needed to rebuild a tokenizer, in a frozen, picklable dataclass.

Workers of the tokenize pipeline are other processes: they receive this config (not a tokenizer
object) and build their own tokenizer from it. The field names follow Megatron's command-line options
(``--tokenizer-type``, ``--tokenizer-model``, ``--vocab-file``, ...) so a Megatron user recognises them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass

from corpus.core.errors import ConfigError
from corpus.core.typed_config import build
from corpus.tokenizers.registry import OPTION_NAMES, TOKENIZER_TYPES, TokenizerType, family_of, lookup

log = logging.getLogger(__name__)

ENCODERS = ("auto", "reference", "gigatoken")
#: ``--tiktoken-pattern``: Megatron's split regexes and numbering, or the vocabulary file's own encoding.
TIKTOKEN_PATTERNS = ("v1", "v2", "file")
# Megatron's TikTokenizer always defines <unk> <s> </s> <mask> <pad> <cls> <sep> below the shifted ranks.
MIN_TIKTOKEN_SPECIAL_TOKENS = 7


@dataclass(frozen=True)
class TokenizerConfig:
    """How to build one tokenizer. Picklable and JSON-friendly (strings, ints, bools, None)."""

    type: str
    """Megatron's ``--tokenizer-type`` name, e.g. ``HuggingFaceTokenizer`` (see TOKENIZER_TYPES)."""
    model: str | None = None
    """``--tokenizer-model``: tokenizer.json (file or directory), SentencePiece ``.model``,
    tiktoken JSON vocabulary (Megatron's list format or Mistral's ``tekken*.json``) or ``.tiktoken`` file."""
    vocab_file: str | None = None
    """``--vocab-file``: GPT-2 ``vocab.json`` (GPT2BPETokenizer)."""
    merge_file: str | None = None
    """``--merge-file``: GPT-2 ``merges.txt`` (GPT2BPETokenizer)."""
    vocab_size: int | None = None
    """``--vocab-size``: NullTokenizer's vocabulary (required there); TikTokenizer's total size
    (ranks are cut to ``vocab_size - tiktoken_num_special_tokens``; default: Megatron's 131072, or
    ranks + special tokens when the file has fewer ranks)."""
    tiktoken_pattern: str = "v2"
    """``--tiktoken-pattern`` (TikTokenizer): Megatron's split regex ``v1`` or ``v2`` with Megatron's shifted ids,
    or ``file``: the vocabulary file's own encoding (regex, special tokens and ids, e.g. cl100k_base's)."""
    tiktoken_num_special_tokens: int = 1000
    """``--tiktoken-num-special-tokens``: ids below this are Megatron's special tokens; ranks shift by it."""
    hf_include_special_tokens: bool = True
    """Megatron's default; ``--tokenizer-hf-no-include-special-tokens`` sets False (no post-processor
    tokens such as a leading BOS)."""
    eod_id: int | None = None
    """Override of the end-of-document id appended by ``--append-eod``."""
    bos_id: int | None = None
    """Override of the beginning-of-sequence id (recorded in the sidecar)."""
    encoder: str = "auto"
    """``auto``: gigatoken when it is installed and proven identical on a sample, else the reference
    library; ``reference``: always the reference library; ``gigatoken``: require the fast path."""

    def __post_init__(self) -> None:
        spec = lookup(self.type)
        if self.encoder not in ENCODERS:
            raise ConfigError(f"encoder {self.encoder!r} is not one of {', '.join(ENCODERS)}")
        if self.tiktoken_pattern not in TIKTOKEN_PATTERNS:
            raise ConfigError(
                f"--tiktoken-pattern {self.tiktoken_pattern!r} is not one of {', '.join(TIKTOKEN_PATTERNS)} "
                "(Megatron's split regexes, or the file's own encoding)")
        if self.tiktoken_num_special_tokens < MIN_TIKTOKEN_SPECIAL_TOKENS:
            raise ConfigError(
                f"--tiktoken-num-special-tokens {self.tiktoken_num_special_tokens} is below "
                f"{MIN_TIKTOKEN_SPECIAL_TOKENS}: Megatron's TikTokenizer reserves ids for "
                "<unk> <s> </s> <mask> <pad> <cls> <sep>")
        if self.vocab_size is not None and self.vocab_size <= 0:
            raise ConfigError(f"--vocab-size {self.vocab_size} must be positive")
        for name in ("eod_id", "bos_id"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"{name} {value} must be a non-negative token id")
        _check_type_options(spec, self)

    def replace(self, **changes) -> "TokenizerConfig":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """All fields as a plain dict (the inverse of :func:`config_from_dict`)."""
        return dataclasses.asdict(self)


def _check_type_options(spec: TokenizerType, config: TokenizerConfig) -> None:
    """Refuse a config missing what its type needs; warn about file options the type ignores."""
    missing = [OPTION_NAMES[name] for name in spec.needs if getattr(config, name) in (None, "")]
    if missing:
        raise ConfigError(f"--tokenizer-type {spec.name} needs {' and '.join(missing)} ({spec.files})")
    for name in ("model", "vocab_file", "merge_file"):
        if getattr(config, name) and name not in spec.needs:
            log.warning("%s is not used by --tokenizer-type %s; ignoring it", OPTION_NAMES[name], spec.name)


def config_from_dict(values: dict, where: str = "tokenizer config") -> TokenizerConfig:
    """Build a config from a dict (the project's validator: unknown keys and wrong types named with ``where``)."""
    return build(TokenizerConfig, values, where=where)


def config_from_record(record: dict) -> TokenizerConfig:
    """Rebuild the config of a sidecar's ``tokenizer`` record (what :meth:`TextTokenizer.describe` wrote).

    The record keeps absolute paths; a file that moved since is reported with the record's path.
    """
    if not isinstance(record, dict) or "config" not in record:
        raise ConfigError("tokenizer record has no 'config' (written by another tool or version?)")
    return config_from_dict({**record["config"], "encoder": "auto"}, where="sidecar tokenizer.config")


def config_from_kind(kind: str, path: str | None) -> TokenizerConfig:
    """The config a blend file's ``tokenizer: {kind, path}`` names: ``kind`` a ``--tokenizer-type`` or a family
    (its first type taking one file), ``path`` that file. Kinds needing more than one file (GPT-2's vocab and
    merges) or none (NullTokenizer's size) cannot be named so: a ConfigError says what to give instead."""
    family = family_of(kind)
    exact = next((spec for spec in TOKENIZER_TYPES.values() if spec.name.lower() == kind.lower()), None)
    spec = exact or next((spec for spec in TOKENIZER_TYPES.values() if spec.family == family), None)
    if spec is None:
        raise ConfigError(f"unknown tokenizer kind {kind!r}; valid types: {', '.join(TOKENIZER_TYPES)}")
    if spec.needs != ("model",):
        raise ConfigError(f"tokenizer kind {kind!r} needs {spec.files}, not one path; give the trainer "
                          "--vocab-size, or --tokenizer-type with its files")
    return TokenizerConfig(type=spec.name, model=path)


def existing_file(path: str | None, option: str, type_name: str, *, allow_dir: bool = False) -> str:
    """``path`` made absolute, or a ConfigError saying which option is missing or wrong."""
    if not path:
        raise ConfigError(f"{type_name} needs {option} (the tokenizer file)")
    absolute = os.path.abspath(os.path.expanduser(path))
    if os.path.isdir(absolute) and not allow_dir:
        raise ConfigError(f"{option} {path}: is a directory; {type_name} needs a file")
    if not os.path.exists(absolute):
        raise ConfigError(f"{option} {path}: no such file or directory")
    return absolute
