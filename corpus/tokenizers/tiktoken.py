"""``TikTokenizer``: megatron-core's tiktoken wrapper (or the vocabulary file's own encoding), on the tiktoken library.

:mod:`corpus.tokenizers.tiktoken_vocab` reads the vocabulary file and numbers its ranks (Megatron's shifted
ids by default, the file's own with ``--tiktoken-pattern file``); we build the very same ``tiktoken.Encoding``
and call it from a thread pool (tiktoken releases the GIL).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tiktoken

from corpus.core.cores import available_cores
from corpus.tokenizers.base import TextTokenizer, library_version
from corpus.tokenizers.config import TokenizerConfig, existing_file
from corpus.tokenizers.long_texts import REGEX_PRETOKENIZER
from corpus.tokenizers.tiktoken_vocab import Vocabulary, read_vocabulary


class TikTokenTextTokenizer(TextTokenizer):
    """The tiktoken Encoding of a :class:`Vocabulary`, encoded from a thread pool."""

    cut_rule = REGEX_PRETOKENIZER  # Megatron's v1/v2 and the files' own patterns split like the cl100k family

    def __init__(self, config: TokenizerConfig, path: str, threads: int | None) -> None:
        self.path = path
        self.vocabulary: Vocabulary = read_vocabulary(config, path)
        vocabulary = self.vocabulary
        self.encoding = tiktoken.Encoding(
            name=vocabulary.name, pat_str=vocabulary.pattern,
            mergeable_ranks={token: rank + vocabulary.shift for rank, token in enumerate(vocabulary.ranks)},
            special_tokens=vocabulary.specials)
        # NOTE: with no special token allowed and none disallowed, tiktoken encodes their strings as plain text.
        self.allowed_special = frozenset(vocabulary.specials) if vocabulary.specials_in_text else frozenset()
        self.threads = available_cores() if threads is None else threads
        self._pool: ThreadPoolExecutor | None = None
        self.encoder_name = library_version("tiktoken")
        super().__init__(config, vocabulary.vocab_size, eod=vocabulary.eod, bos=vocabulary.bos)

    def _encode_one(self, text: str) -> list[int]:
        return self.encoding.encode(text, allowed_special=self.allowed_special, disallowed_special=())

    def _encode_one_array(self, text: str) -> np.ndarray:
        return self.encoding.encode_to_numpy(text, allowed_special=self.allowed_special, disallowed_special=())

    def _map(self, function, texts: list[str]) -> list:
        """``function`` over the texts, on the thread pool when it can help (tiktoken releases the GIL)."""
        if self.threads <= 1 or len(texts) < 2:
            return [function(text) for text in texts]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="tiktoken")
        return list(self._pool.map(function, texts))

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._map(self._encode_one, texts)

    def _encode_batch_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """tiktoken's uint32 buffers, concatenated: no Python int per token."""
        try:
            arrays = self._map(self._encode_one_array, texts)
        except Exception:  # noqa: BLE001 - a text it refuses: the list path names it (TokenizeError)
            return super()._encode_batch_flat(texts)
        lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
        return (np.concatenate(arrays) if arrays else np.empty(0, np.uint32)), lengths

    def decode(self, ids: list[int]) -> str:
        return self.encoding.decode_bytes(list(ids)).decode("utf-8", errors="replace")

    def files(self) -> list[str]:
        return [self.path]

    def id_options(self) -> dict:
        return dict(self.vocabulary.options)

    def special_strings(self) -> list[str]:
        """The special tokens: matched in the text with Megatron's numbering, plain text with the file's."""
        return list(self.vocabulary.specials)


def build_tiktoken(config: TokenizerConfig, threads: int | None = None) -> TikTokenTextTokenizer:
    """``TikTokenizer`` from a tiktoken JSON vocabulary or ``.tiktoken`` rank file."""
    return TikTokenTextTokenizer(config, existing_file(config.model, "--tokenizer-model", config.type), threads)
