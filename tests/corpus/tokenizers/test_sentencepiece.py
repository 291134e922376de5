"""The three SentencePiece types give megatron-core 0.16.1's ids (one class there: no BOS added)."""

from __future__ import annotations

import pytest

from corpus.core.errors import ConfigError
from corpus.tokenizers import TokenizerConfig, build_tokenizer
from tests.corpus.tokenizers.helpers import assert_megatron_ids, assert_same_metadata

SP_TYPES = ["SentencePieceTokenizer", "GPTSentencePieceTokenizer", "Llama2Tokenizer"]


@pytest.mark.parametrize("model", ["spm_v1", "spm_v3"])
@pytest.mark.parametrize("type_name", SP_TYPES)
def test_sentencepiece_ids_equal_megatron(tokenizer_files, megatron_tokenizer, conformance_texts, type_name, model):
    config = TokenizerConfig(type_name, model=getattr(tokenizer_files, model))
    ours, megatron = build_tokenizer(config, threads=2), megatron_tokenizer(config)
    assert_megatron_ids(ours, megatron, conformance_texts)
    assert_same_metadata(ours, megatron)
    assert (ours.bos, ours.eod) == (1, 2)


def test_no_bos_is_added(tokenizer_files):
    tokenizer = build_tokenizer(TokenizerConfig("Llama2Tokenizer", model=tokenizer_files.spm_v1))
    assert tokenizer.encode_batch(["", "Hello"]) == [[], tokenizer.processor.encode("Hello")]
    assert tokenizer.bos not in tokenizer.encode_batch(["Hello"])[0]


def test_decode_round_trip(tokenizer_files):
    tokenizer = build_tokenizer(TokenizerConfig("SentencePieceTokenizer", model=tokenizer_files.spm_v3))
    texts = ["Hello, world!", "日本語の文章です。", "emoji 🚀 and byte fallback ℌ𝔢𝔩𝔩𝔬", "def f(x):\n    return x"]
    assert [tokenizer.decode(ids) for ids in tokenizer.encode_batch(texts)] == texts


def test_not_a_sentencepiece_model(tokenizer_files):
    with pytest.raises(ConfigError, match="not a SentencePiece model"):
        build_tokenizer(TokenizerConfig("SentencePieceTokenizer", model=tokenizer_files.sample_json))
