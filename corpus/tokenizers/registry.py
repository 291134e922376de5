"""The table of tokenizer types, keyed by Megatron's ``--tokenizer-type`` names.

Adding a type is adding an entry. Adapters are imported only when built, so listing the table (for
``--help``) or validating a config costs no library import.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from corpus.tokenizers.base import TextTokenizer
    from corpus.tokenizers.config import TokenizerConfig

log = logging.getLogger(__name__)

OPTION_NAMES = {"model": "--tokenizer-model", "vocab_file": "--vocab-file", "merge_file": "--merge-file",
                "vocab_size": "--vocab-size"}


@dataclass(frozen=True)
class TokenizerType:
    """One ``--tokenizer-type``: what it needs and which adapter builds it."""

    name: str
    files: str
    """What the user passes, for help texts and errors."""
    needs: tuple[str, ...]
    """Config fields that must be set."""
    adapter: str
    """``module:function(config, threads)`` building the reference TextTokenizer."""

    def check(self, config: TokenizerConfig) -> None:
        """Refuse a config missing what this type needs; warn about file options it ignores."""
        from corpus.tokenizers.config import TokenizerConfigError

        missing = [OPTION_NAMES[name] for name in self.needs if getattr(config, name) in (None, "")]
        if missing:
            raise TokenizerConfigError(f"--tokenizer-type {self.name} needs {' and '.join(missing)} ({self.files})")
        for name in ("model", "vocab_file", "merge_file"):
            if getattr(config, name) and name not in self.needs:
                log.warning("%s is not used by --tokenizer-type %s; ignoring it", OPTION_NAMES[name], self.name)

    def build(self, config: TokenizerConfig, threads: int | None) -> TextTokenizer:
        """Import the adapter and build the reference tokenizer (``threads``: see build_tokenizer)."""
        module, function = self.adapter.split(":")
        return getattr(importlib.import_module(module), function)(config, threads)


TOKENIZER_TYPES: dict[str, TokenizerType] = {
    spec.name: spec
    for spec in (
        TokenizerType("HuggingFaceTokenizer", "a tokenizer.json file or a directory holding one", ("model",),
                      "corpus.tokenizers.huggingface:build_huggingface"),
        TokenizerType("GPT2BPETokenizer", "GPT-2 vocab.json and merges.txt", ("vocab_file", "merge_file"),
                      "corpus.tokenizers.huggingface:build_gpt2_bpe"),
        TokenizerType("SentencePieceTokenizer", "a SentencePiece .model file", ("model",),
                      "corpus.tokenizers.sentencepiece:build_sentencepiece"),
        TokenizerType("GPTSentencePieceTokenizer", "a SentencePiece .model file", ("model",),
                      "corpus.tokenizers.sentencepiece:build_sentencepiece"),
        TokenizerType("Llama2Tokenizer", "a SentencePiece .model file", ("model",),
                      "corpus.tokenizers.sentencepiece:build_sentencepiece"),
        TokenizerType("TikTokenizer", "a tiktoken JSON vocabulary (Megatron's list, Mistral's tekken*.json) "
                      "or a .tiktoken rank file", ("model",), "corpus.tokenizers.tiktoken:build_tiktoken"),
        TokenizerType("NullTokenizer", "no file: text is space-separated integer ids", ("vocab_size",),
                      "corpus.tokenizers.null:build_null"),
    )
}


def lookup(name: str) -> TokenizerType:
    """The entry for ``name``, or an error listing the valid ``--tokenizer-type`` names."""
    try:
        return TOKENIZER_TYPES[name]
    except KeyError:
        from corpus.tokenizers.config import TokenizerConfigError

        raise TokenizerConfigError(
            f"unknown --tokenizer-type {name!r}; valid types: {', '.join(TOKENIZER_TYPES)}") from None

