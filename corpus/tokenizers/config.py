"""``TokenizerConfig``: everything needed to rebuild a tokenizer, in a frozen, picklable dataclass.

Workers of the tokenize pipeline are other processes: they receive this config (not a tokenizer
object) and build their own tokenizer from it. The field names follow Megatron's command-line options
(``--tokenizer-type``, ``--tokenizer-model``, ``--vocab-file``, ...) so a Megatron user recognises them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import MISSING, dataclass, fields
from typing import Any, Mapping

from corpus.core.errors import ConfigError
from corpus.core.typed_config import build, knob
from corpus.tokenizers.registry import TOKENIZER_TYPES, TokenizerType, lookup, types_named

log = logging.getLogger(__name__)

ENCODERS = ("auto", "reference", "gigatoken")
#: ``--tiktoken-pattern``: Megatron's split regexes and numbering, or the vocabulary file's own encoding.
TIKTOKEN_PATTERNS = ("v1", "v2", "file")
# Megatron's TikTokenizer always defines <unk> <s> </s> <mask> <pad> <cls> <sep> below the shifted ranks.
MIN_TIKTOKEN_SPECIAL_TOKENS = 7


@dataclass(frozen=True)
class TokenizerConfig:
    """How to build one tokenizer: the one description of a tokenizer, which the tokenize, inspect and autotune
    commands take their tokenizer flags from and the trainer's tokenizer flags build (:func:`config_from_flags`).
    Picklable and JSON-friendly (strings, ints, bools, None)."""

    type: str = knob(MISSING, "Megatron's tokenizer type.", "--tokenizer-type", choices=TOKENIZER_TYPES)
    model: str | None = knob(
        None, "tokenizer.json (or its directory), SentencePiece .model, tiktoken JSON (Megatron's list or Mistral's "
        "tekken*.json) or .tiktoken file.", "--tokenizer-model")
    vocab_file: str | None = knob(None, "GPT-2 vocab.json (GPT2BPETokenizer).", "--vocab-file")
    merge_file: str | None = knob(None, "GPT-2 merges.txt (GPT2BPETokenizer).", "--merge-file")
    vocab_size: int | None = knob(
        None, "Vocabulary size: NullTokenizer's (required there); TikTokenizer's total size (ranks are cut to "
        "vocab size - special tokens; default: Megatron's 131072, or ranks + special tokens when the file has fewer "
        "ranks).", "--vocab-size")
    tiktoken_pattern: str = knob(
        "v2", "TikTokenizer: Megatron's split regex (v1, v2) and shifted ids, or 'file': the vocabulary's own "
        "encoding (e.g. cl100k_base's regex and ids).", "--tiktoken-pattern", choices=TIKTOKEN_PATTERNS)
    tiktoken_num_special_tokens: int = knob(
        1000, "TikTokenizer: ids below this are Megatron's special tokens; ranks shift by it.",
        "--tiktoken-num-special-tokens")
    hf_include_special_tokens: bool = knob(
        True, "HuggingFaceTokenizer: do not add the post-processor's special tokens (e.g. a leading BOS).",
        switches={"--tokenizer-hf-no-include-special-tokens": False})
    eod_id: int | None = knob(None, "Override the end-of-document id that --append-eod adds.", "--eod-id")
    bos_id: int | None = knob(None, "Override the beginning-of-sequence id (recorded in the sidecar).", "--bos-id")
    encoder: str = knob(
        "auto", "auto: gigatoken when proven identical on a sample of the input, else the reference library; "
        "reference: always the reference library; gigatoken: require the fast path.", "--encoder", choices=ENCODERS)

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


#: The command-line spelling of each field (``model`` -> ``--tokenizer-model``), for messages.
OPTION_NAMES = {field.name: field.metadata["flag"] for field in fields(TokenizerConfig) if field.metadata["flag"]}
#: Each field's key where a config names a tokenizer among other settings, spelt as its flag (``model`` ->
#: ``tokenizer_model``): the trainer's ``data.tokenizer_type``, ``data.tokenizer_model``, ``data.vocab_file``, ...
FLAG_KEYS = {name: flag[2:].replace("-", "_") for name, flag in OPTION_NAMES.items()}


def tokenizer_knob(name: str, help: str | None = None) -> Any:
    """A field of another config holding this config's field ``name`` under its :data:`FLAG_KEYS` key: the same flag
    and choices, and this field's help unless the owner says what the field means to it."""
    field = next(field for field in fields(TokenizerConfig) if field.name == name)
    return knob(None, help or field.metadata["help"], field.metadata["flag"], choices=field.metadata["choices"])


def config_from_flags(values: Mapping[str, Any]) -> TokenizerConfig | None:
    """The tokenizer that flag-keyed ``values`` name (``tokenizer_type``, ``tokenizer_model``, ... as in
    :data:`FLAG_KEYS`; other keys ignored), or None when they name no ``tokenizer_type``."""
    given = {name: values[key] for name, key in FLAG_KEYS.items() if values.get(key) is not None}
    return TokenizerConfig(**given) if "type" in given else None


def _check_type_options(spec: TokenizerType, config: TokenizerConfig) -> None:
    """Refuse a config missing what its type needs; warn about a file option the type ignores, and drop it from the
    config: the configs made from this one (the encoder chosen, a worker's copy) then neither say it again nor carry
    a file that is not the tokenizer's into its identity."""
    missing = [OPTION_NAMES[name] for name in spec.needs if getattr(config, name) in (None, "")]
    if missing:
        raise ConfigError(f"--tokenizer-type {spec.name} needs {' and '.join(missing)} ({spec.files})")
    for name in ("model", "vocab_file", "merge_file"):
        if getattr(config, name) and name not in spec.needs:
            log.warning("%s is not used by --tokenizer-type %s; ignoring it", OPTION_NAMES[name], spec.name)
            object.__setattr__(config, name, None)  # frozen: set once, while the config is being made


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


def config_from_kind(kind: str, **files: Any) -> TokenizerConfig:
    """The config a blend file's ``tokenizer:`` names: ``kind`` a ``--tokenizer-type``, or a family (then its first
    type whose files are all given, else its first type); ``files`` its ``model``, ``vocab_file``, ``merge_file`` or
    ``vocab_size``. A type missing what it needs is a ConfigError naming it."""
    candidates = types_named(kind)
    if not candidates:
        raise ConfigError(f"unknown tokenizer kind {kind!r}; valid types: {', '.join(TOKENIZER_TYPES)}")
    given = {name: value for name, value in files.items() if value is not None}
    spec = next((spec for spec in candidates if all(name in given for name in spec.needs)), candidates[0])
    return TokenizerConfig(type=spec.name, **given)


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
