"""``TikTokenizer``: megatron-core's tiktoken wrapper, reproduced on the tiktoken library.

megatron-core builds a ``tiktoken.Encoding`` whose ids are the file's ranks shifted up by
``--tiktoken-num-special-tokens`` (default 1000), with its own special tokens below them (``<unk>``
``<s>`` ``</s>`` ``<mask>`` ``<pad>`` ``<cls>`` ``<sep>`` then ``<SPECIAL_i>`` fillers), splits with its
``v1``/``v2`` regex (not the file's), keeps the first ``vocab_size - num_special_tokens`` ranks, and
encodes with ``allowed_special="all"`` (a literal ``</s>`` in the text becomes id 2). EOD is ``</s>``,
BOS ``<s>``. We build the very same Encoding and call it from a thread pool (tiktoken releases the GIL).

Vocabulary files: Megatron's JSON list of ``{"rank", "token_bytes", "token_str"}``, the same list under
``"vocab"`` (Mistral's ``tekken*.json``; megatron-core itself only reads the bare list) and plain
``.tiktoken`` rank files (``base64 rank`` lines, e.g. ``cl100k_base.tiktoken``; megatron-core's loader
refuses those whose first 256 ranks are not the bytes 0..255 in order, as cl100k's are not).
"""

from __future__ import annotations

import base64
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import orjson
import tiktoken

from corpus.tokenizers.base import TextTokenizer, library_version
from corpus.tokenizers.config import TokenizerConfig, existing_file
from corpus.tokenizers.errors import TokenizerConfigError
from corpus.tokenizers.long_texts import REGEX_PRETOKENIZER

# megatron.core.tokenizers.text.libraries.tiktoken_tokenizer, verbatim.
PATTERNS = {
    "v1": r"[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
    "v2": "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}"
          "\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
          "[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
}
DEFAULT_VOCAB_SIZE = 2**17
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>")


def _json_ranks(path: str, data: bytes) -> list[bytes]:
    """Token bytes in rank order from Megatron's JSON list (bare or under ``"vocab"``)."""
    try:
        vocab = orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise TokenizerConfigError(f"{path}: not valid JSON ({error})") from None
    if isinstance(vocab, dict):
        vocab = vocab.get("vocab")
    if not isinstance(vocab, list):
        raise TokenizerConfigError(f"{path}: expected a JSON list of {{rank, token_bytes, token_str}} "
                                   "(or an object with such a list under \"vocab\", like tekken*.json)")
    ranks = []
    for position, entry in enumerate(vocab):
        if not isinstance(entry, dict) or entry.get("rank") != position or "token_bytes" not in entry:
            raise TokenizerConfigError(f"{path}: vocab entry {position} must be {{\"rank\": {position}, "
                                       "\"token_bytes\": base64, ...}} (ranks in order from 0)")
        ranks.append(base64.b64decode(entry["token_bytes"]))
    return ranks


def _tiktoken_ranks(path: str, data: bytes) -> list[bytes]:
    """Token bytes in rank order from a ``.tiktoken`` file (``base64 rank`` per line)."""
    ranks = []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            token_bytes, rank = base64.b64decode(token), int(rank)
        except ValueError:
            raise TokenizerConfigError(f"{path}:{number}: expected 'base64-token rank', got {line[:60]!r}") from None
        if rank != len(ranks):
            raise TokenizerConfigError(f"{path}:{number}: rank {rank} out of order (expected {len(ranks)})")
        ranks.append(token_bytes)
    return ranks


def load_ranks(path: str) -> list[bytes]:
    """The mergeable tokens of a tiktoken vocabulary file, in rank order."""
    with open(path, "rb") as handle:
        data = handle.read()
    ranks = _json_ranks(path, data) if data.lstrip()[:1] in (b"[", b"{") else _tiktoken_ranks(path, data)
    if len(set(ranks)) != len(ranks):
        raise TokenizerConfigError(f"{path}: the same token bytes appear under two ranks")
    return ranks


def resolve_vocab_size(config: TokenizerConfig, num_ranks: int) -> int:
    """Megatron's total vocabulary: ``--vocab-size`` or 131072, or ranks + specials for smaller files."""
    specials = config.tiktoken_num_special_tokens
    if config.vocab_size is None:
        return min(DEFAULT_VOCAB_SIZE, num_ranks + specials)
    if config.vocab_size <= specials:
        raise TokenizerConfigError(f"--vocab-size {config.vocab_size} must exceed --tiktoken-num-special-tokens "
                                   f"{specials}")
    if config.vocab_size > num_ranks + specials:
        raise TokenizerConfigError(
            f"--vocab-size {config.vocab_size} needs {config.vocab_size - specials} ranks but {config.model} has "
            f"{num_ranks}; use --vocab-size {num_ranks + specials} or less")
    return config.vocab_size


class TikTokenTextTokenizer(TextTokenizer):
    """Megatron's shifted tiktoken Encoding, encoded from a thread pool."""

    cut_rule = REGEX_PRETOKENIZER  # Megatron's v1/v2 patterns split like the cl100k family

    def __init__(self, config: TokenizerConfig, path: str, threads: int | None) -> None:
        self.path = path
        ranks = load_ranks(path)
        vocab_size = resolve_vocab_size(config, len(ranks))
        shift = config.tiktoken_num_special_tokens
        fillers = [f"<SPECIAL_{i}>" for i in range(len(SPECIAL_TOKENS), shift)]
        self.special_tokens = [*SPECIAL_TOKENS, *fillers]
        self.encoding = tiktoken.Encoding(
            name=os.path.basename(path),
            pat_str=PATTERNS[config.tiktoken_pattern],
            mergeable_ranks={token: rank + shift for rank, token in enumerate(ranks[:vocab_size - shift])},
            special_tokens={token: i for i, token in enumerate(self.special_tokens)},
        )
        self.allowed_special = frozenset(self.special_tokens)
        self.threads = (os.cpu_count() or 1) if threads is None else threads
        self._pool: ThreadPoolExecutor | None = None
        self.encoder_name = library_version("tiktoken")
        super().__init__(config, vocab_size, eod=SPECIAL_TOKENS.index("</s>"), bos=SPECIAL_TOKENS.index("<s>"))

    def _encode_one(self, text: str) -> list[int]:
        return self.encoding.encode(text, allowed_special=self.allowed_special)

    def _encode_one_array(self, text: str) -> np.ndarray:
        return self.encoding.encode_to_numpy(text, allowed_special=self.allowed_special)

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
        shift = len(self.special_tokens)
        parts = [self.special_tokens[i].encode() if i < shift else self.encoding.decode_single_token_bytes(i)
                 for i in ids]
        return b"".join(parts).decode("utf-8", errors="replace")

    def files(self) -> list[str]:
        return [self.path]

    def id_options(self) -> dict:
        return {"pattern": self.config.tiktoken_pattern, "num_special_tokens": self.config.tiktoken_num_special_tokens,
                "vocab_size": self.vocab_size}


def build_tiktoken(config: TokenizerConfig, threads: int | None = None) -> TikTokenTextTokenizer:
    """``TikTokenizer`` from a tiktoken JSON vocabulary or ``.tiktoken`` rank file."""
    return TikTokenTextTokenizer(config, existing_file(config.model, "--tokenizer-model", config.type), threads)
