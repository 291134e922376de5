"""NullTokenizer: megatron-core's ids for integer text, clear errors where megatron-core writes garbage."""

from __future__ import annotations

import pytest

from corpus.tokenizers import TokenizeError, TokenizerConfig, build_tokenizer
from tests.corpus.tokenizers.helpers import assert_megatron_ids


def test_null_ids_equal_megatron(megatron_tokenizer):
    config = TokenizerConfig("NullTokenizer", vocab_size=50_000)
    ours, megatron = build_tokenizer(config), megatron_tokenizer(config)
    assert_megatron_ids(ours, megatron, ["1 2 3", "49999", "0 0 0 7", "50000", "12\n 34"])
    assert (ours.vocab_size, ours.eod) == (megatron.vocab_size, megatron.eod) == (50_001, 50_000)
    assert ours.bos is None


def test_empty_text_is_no_ids():
    assert build_tokenizer(TokenizerConfig("NullTokenizer", vocab_size=10)).encode_batch(["", "1"]) == [[], [1]]


@pytest.mark.parametrize("text, message", [
    ("1 two 3", "must be integers separated by single spaces"),
    ("1  2", "must be integers separated by single spaces"),
    ("11", r"id 11 is outside 0\.\.10"),
    ("-1", r"id -1 is outside"),
])
def test_bad_null_text_names_its_index(text, message):
    tokenizer = build_tokenizer(TokenizerConfig("NullTokenizer", vocab_size=10))
    with pytest.raises(TokenizeError, match=message) as raised:
        tokenizer.encode_batch(["1 2", text])
    assert raised.value.index == 1


def test_decode():
    tokenizer = build_tokenizer(TokenizerConfig("NullTokenizer", vocab_size=10))
    assert tokenizer.decode(tokenizer.encode_batch(["3 1 4"])[0]) == "3 1 4"
