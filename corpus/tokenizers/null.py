"""``NullTokenizer``: the text already is token ids, separated by single spaces (Megatron's benchmark tokenizer).

megatron-core's NullTokenizer parses ``[int(x) for x in text.split(' ')]`` and puts EOD at
``vocab_size``, so its vocabulary is ``--vocab-size + 1``. We parse the same way but report a bad id
(not an integer, negative, beyond EOD) as an error on that text instead of writing garbage, and an empty
text encodes to no ids (megatron-core raises on it).
"""

from __future__ import annotations

from corpus.tokenizers.base import TextTokenizer
from corpus.tokenizers.config import TokenizerConfig
from corpus.tokenizers.errors import TokenizeError


class NullTextTokenizer(TextTokenizer):
    """Space-separated integers in, the same integers out."""

    encoder_name = "builtin"

    def __init__(self, config: TokenizerConfig) -> None:
        super().__init__(config, vocab_size=config.vocab_size + 1, eod=config.vocab_size, bos=None)

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self._parse(index, text) for index, text in enumerate(texts)]

    def _parse(self, index: int, text: str) -> list[int]:
        if text == "":
            return []
        try:
            ids = [int(part) for part in text.split(" ")]
        except ValueError:
            raise TokenizeError(index, "NullTokenizer input must be integers separated by single spaces, "
                                       f"got {text[:60]!r}") from None
        bad = next((i for i in ids if not 0 <= i < self.vocab_size), None)
        if bad is not None:
            raise TokenizeError(index, f"NullTokenizer id {bad} is outside 0..{self.vocab_size - 1} "
                                       f"(--vocab-size {self.config.vocab_size} plus EOD)")
        return ids

    def decode(self, ids: list[int]) -> str:
        return " ".join(str(i) for i in ids)

    def files(self) -> list[str]:
        return []

    def id_options(self) -> dict:
        return {"vocab_size": self.config.vocab_size}


def build_null(config: TokenizerConfig, threads: int | None = None) -> NullTextTokenizer:
    """``NullTokenizer`` of ``--vocab-size`` ids plus EOD."""
    return NullTextTokenizer(config)
