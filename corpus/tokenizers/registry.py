"""The one table of tokenizer types, keyed by Megatron's ``--tokenizer-type`` names.

Each entry says what the type needs, which family it belongs to (what a blend file's ``tokenizer.kind``
names), which adapter builds it and which files make its fingerprint. Adding a type is adding an entry.
Adapters are imported only when built, so listing the table (for ``--help``), validating a config or
checking a blend costs no tokenizer library import.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from corpus.core.errors import ConfigError


@dataclass(frozen=True)
class TokenizerType:
    """One ``--tokenizer-type``: what it needs, its family, and which adapter builds it."""

    name: str
    family: str
    """The kind a blend file may name for every type of the family (``huggingface``, ``sentencepiece``…)."""
    files: str
    """What the user passes, for help texts and errors."""
    needs: tuple[str, ...]
    """Config fields that must be set."""
    adapter: str
    """``module:function(config, threads)`` building the reference TextTokenizer."""
    library: str | None = None
    """The distribution of the reference library (its version keys cached encoder checks)."""
    fingerprinted: str | None = None
    """``module:function(path) -> [files]`` naming the files whose bytes make the fingerprint of a tokenizer
    given by one path (None: that one file)."""
    huggingface_form: str | None = None
    """``module:function(tokenizer) -> HuggingFaceForm``: the type's tokenizer as a ``tokenizers.Tokenizer`` giving
    its ids (what ``trainer export --hf`` writes; :mod:`corpus.tokenizers.export`). None: it has no text form."""
    fast_forms: str | None = None
    """``module:function(reference) -> [FastSource]``: the forms of the built reference tokenizer the gigatoken
    fast path reads, the fastest to load first (:mod:`corpus.tokenizers.gigatoken`). None: no fast path."""

    def load(self, target: str) -> Callable:
        """The function a ``module:function`` field of this entry names (imported now)."""
        module, function = target.split(":")
        return getattr(importlib.import_module(module), function)


#: The `huggingface_form` and `fast_forms` entries (module:function) shared by several types.
HF_FORM = "corpus.tokenizers.huggingface:huggingface_form"
SPM_FORM = "corpus.tokenizers.sentencepiece:huggingface_form"
HF_FAST = "corpus.tokenizers.gigatoken:huggingface_sources"
SPM_FAST = "corpus.tokenizers.gigatoken:sentencepiece_sources"

TOKENIZER_TYPES: dict[str, TokenizerType] = {
    spec.name: spec
    for spec in (
        TokenizerType("HuggingFaceTokenizer", "huggingface", "a tokenizer.json file or a directory holding one",
                      ("model",), "corpus.tokenizers.huggingface:build_huggingface", "tokenizers",
                      "corpus.tokenizers.huggingface:fingerprinted_files", HF_FORM, HF_FAST),
        TokenizerType("GPT2BPETokenizer", "gpt2", "GPT-2 vocab.json and merges.txt", ("vocab_file", "merge_file"),
                      "corpus.tokenizers.huggingface:build_gpt2_bpe", "tokenizers", huggingface_form=HF_FORM,
                      fast_forms=HF_FAST),
        TokenizerType("SentencePieceTokenizer", "sentencepiece", "a SentencePiece .model file", ("model",),
                      "corpus.tokenizers.sentencepiece:build_sentencepiece", "sentencepiece",
                      huggingface_form=SPM_FORM, fast_forms=SPM_FAST),
        TokenizerType("GPTSentencePieceTokenizer", "sentencepiece", "a SentencePiece .model file", ("model",),
                      "corpus.tokenizers.sentencepiece:build_sentencepiece", "sentencepiece",
                      huggingface_form=SPM_FORM, fast_forms=SPM_FAST),
        TokenizerType("Llama2Tokenizer", "sentencepiece", "a SentencePiece .model file", ("model",),
                      "corpus.tokenizers.sentencepiece:build_sentencepiece", "sentencepiece",
                      huggingface_form=SPM_FORM, fast_forms=SPM_FAST),
        TokenizerType("TikTokenizer", "tiktoken", "a tiktoken JSON vocabulary (Megatron's list, Mistral's "
                      "tekken*.json) or a .tiktoken rank file", ("model",),
                      "corpus.tokenizers.tiktoken:build_tiktoken", "tiktoken",
                      huggingface_form="corpus.tokenizers.tiktoken_hf:huggingface_form",
                      fast_forms="corpus.tokenizers.gigatoken:tiktoken_sources"),
        TokenizerType("NullTokenizer", "null", "no file: text is space-separated integer ids", ("vocab_size",),
                      "corpus.tokenizers.null:build_null"),
    )
}


def families() -> tuple[str, ...]:
    """Every family, in table order (read from the table each time: an entry added later is listed)."""
    return tuple(dict.fromkeys(spec.family for spec in TOKENIZER_TYPES.values()))


def lookup(name: str) -> TokenizerType:
    """The entry for ``name``, or an error listing the valid ``--tokenizer-type`` names."""
    try:
        return TOKENIZER_TYPES[name]
    except KeyError:
        raise ConfigError(
            f"unknown --tokenizer-type {name!r}; valid types: {', '.join(TOKENIZER_TYPES)}") from None


def family_of(name: str | None) -> str | None:
    """The family a type name or a family name (any case) belongs to, or None if it is neither."""
    if name is None:
        return None
    lowered = name.lower()
    for spec in TOKENIZER_TYPES.values():
        if lowered in (spec.family, spec.name.lower()):
            return spec.family
    return None


def types_named(name: str) -> list[TokenizerType]:
    """The type ``name`` names (any case), else every type of the family ``name``, in table order; [] for neither.
    A blend's ``tokenizer: {type: …}`` may name either."""
    exact = [spec for spec in TOKENIZER_TYPES.values() if spec.name.lower() == name.lower()]
    return exact or [spec for spec in TOKENIZER_TYPES.values() if spec.family == name.lower()]


def fingerprinted_files(kind: str, path: str) -> list[str]:
    """The files whose bytes ``corpus tokenize`` fingerprints for a tokenizer of ``kind`` (a type or family
    name) given as ``path``, in the order it reads them."""
    family = family_of(kind)
    spec = next(spec for spec in TOKENIZER_TYPES.values() if spec.family == family)
    return spec.load(spec.fingerprinted)(path) if spec.fingerprinted else [path]
