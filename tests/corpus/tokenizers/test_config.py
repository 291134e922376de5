"""TokenizerConfig: validation with messages for people, dict and record round trips, pickling."""

from __future__ import annotations

import pickle

import pytest

from corpus.core.errors import ConfigError
from corpus.tokenizers import TokenizerConfig, build_tokenizer, config_from_dict, config_from_record
from corpus.tokenizers.registry import TOKENIZER_TYPES


@pytest.mark.parametrize("values, message", [
    ({"type": "BertWordPieceCase"},
     "unknown --tokenizer-type 'BertWordPieceCase'; valid types: HuggingFaceTokenizer, "),
    ({"type": "HuggingFaceTokenizer"}, "HuggingFaceTokenizer needs --tokenizer-model"),
    ({"type": "GPT2BPETokenizer", "vocab_file": "v.json"}, "needs --merge-file"),
    ({"type": "NullTokenizer"}, "NullTokenizer needs --vocab-size"),
    ({"type": "NullTokenizer", "vocab_size": 0}, "--vocab-size 0 must be positive"),
    ({"type": "TikTokenizer", "model": "x", "tiktoken_pattern": "v3"}, "--tiktoken-pattern 'v3' is not one of v1, v2"),
    ({"type": "TikTokenizer", "model": "x", "tiktoken_num_special_tokens": 3}, "reserves ids for"),
    ({"type": "NullTokenizer", "vocab_size": 5, "encoder": "fast"}, "encoder 'fast' is not one of auto, reference"),
    ({"type": "NullTokenizer", "vocab_size": 5, "eod_id": -1}, "eod_id -1 must be a non-negative"),
    ({"type": "NullTokenizer", "vocab_size": 5, "eos": 1}, r"unknown key\(s\) eos; known keys: bos_id, "),
    ({"vocab_size": 5}, "missing required key 'type'"),
])
def test_bad_configs(values, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict(values)


@pytest.mark.parametrize("type_name, field, option", [
    ("SentencePieceTokenizer", "model", "--tokenizer-model"),
    ("TikTokenizer", "model", "--tokenizer-model"),
    ("HuggingFaceTokenizer", "model", "--tokenizer-model"),
    ("GPT2BPETokenizer", "vocab_file", "--vocab-file"),
])
def test_missing_files_are_named(tmp_path, type_name, field, option):
    values = {"vocab_file": str(tmp_path), "merge_file": str(tmp_path / "m.txt")} if field == "vocab_file" else {}
    values[field] = str(tmp_path / "missing.bin")
    with pytest.raises(ConfigError, match=f"{option} .*missing.bin: no such file or directory"):
        build_tokenizer(TokenizerConfig(type_name, **values))


def test_directory_where_a_file_is_needed(tmp_path):
    with pytest.raises(ConfigError, match="is a directory; SentencePieceTokenizer needs a file"):
        build_tokenizer(TokenizerConfig("SentencePieceTokenizer", model=str(tmp_path)))


def test_eod_override_outside_the_vocabulary(tokenizer_files):
    with pytest.raises(ConfigError, match="eod_id 40000 is outside the vocabulary"):
        build_tokenizer(TokenizerConfig("SentencePieceTokenizer", model=tokenizer_files.spm_v1, eod_id=40_000))


def test_unused_file_options_are_warned_about(tokenizer_files, caplog):
    TokenizerConfig("SentencePieceTokenizer", model=tokenizer_files.spm_v1, vocab_file="vocab.json")
    assert "--vocab-file is not used by --tokenizer-type SentencePieceTokenizer" in caplog.text


def test_every_megatron_type_is_registered():
    assert list(TOKENIZER_TYPES) == ["HuggingFaceTokenizer", "GPT2BPETokenizer", "SentencePieceTokenizer",
                                     "GPTSentencePieceTokenizer", "Llama2Tokenizer", "TikTokenizer", "NullTokenizer"]


def test_config_pickles_and_round_trips_through_a_dict(tokenizer_files):
    config = TokenizerConfig("TikTokenizer", model=tokenizer_files.tekken, tiktoken_pattern="v1", eod_id=3)
    assert pickle.loads(pickle.dumps(config)) == config
    assert config_from_dict(config.to_dict()) == config
    assert config.replace(tiktoken_pattern="v2").tiktoken_pattern == "v2"


@pytest.mark.parametrize("config", [
    lambda f: TokenizerConfig("HuggingFaceTokenizer", model=f.cl100k_bos_dir, hf_include_special_tokens=False),
    lambda f: TokenizerConfig("GPT2BPETokenizer", vocab_file=f.gpt2_vocab, merge_file=f.gpt2_merges, eod_id=5),
    lambda f: TokenizerConfig("TikTokenizer", model=f.tekken, tiktoken_num_special_tokens=100),
    lambda f: TokenizerConfig("Llama2Tokenizer", model=f.spm_v3),
    lambda f: TokenizerConfig("NullTokenizer", vocab_size=300),
])
def test_record_rebuilds_the_same_tokenizer(tokenizer_files, config):
    original = build_tokenizer(config(tokenizer_files))
    record = original.describe()
    rebuilt = build_tokenizer(config_from_record(record))
    assert rebuilt.describe() == record
    texts = ["12 7 299"] if original.config.type == "NullTokenizer" else ["rebuilt from the sidecar 日本語"]
    assert rebuilt.encode_batch(texts) == original.encode_batch(texts)


def test_record_without_config():
    with pytest.raises(ConfigError, match="tokenizer record has no 'config'"):
        config_from_record({"type": "HuggingFaceTokenizer"})
