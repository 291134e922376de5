"""What every TextTokenizer promises: the sidecar record, the --append-eod check, failures named by index."""

from __future__ import annotations

import multiprocessing

import pytest
from tokenizers import Tokenizer, models

from corpus.core.errors import ConfigError
from corpus.indexed.sidecar import fingerprint_files
from corpus.tokenizers import TokenizeError, TokenizerConfig, build_tokenizer


def test_describe_records_what_rebuilds_and_identifies_the_tokenizer(tokenizer_files):
    tokenizer = build_tokenizer(TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.cl100k_bos_dir))
    record = tokenizer.describe()
    assert record["type"] == "HuggingFaceTokenizer"
    assert record["model"] == tokenizer_files.cl100k_bos_dir
    assert record["fingerprint"] == fingerprint_files([f"{tokenizer_files.cl100k_bos_dir}/tokenizer.json",
                                                        f"{tokenizer_files.cl100k_bos_dir}/tokenizer_config.json"])
    assert record["options"] == {"include_special_tokens": True, "eod_id": 100257, "bos_id": 100277}
    assert (record["vocab_size"], record["eod"], record["bos"]) == (tokenizer.vocab_size, 100257, 100277)
    assert record["encoder"].startswith("tokenizers ")
    assert "encoder" not in record["config"]


def _no_special_tokens(directory) -> str:
    path = directory / "tokenizer.json"
    Tokenizer(models.BPE(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")])).save(str(path))
    return str(path)


def test_append_eod_without_an_eod_is_a_clear_error(tmp_path):
    tokenizer = build_tokenizer(TokenizerConfig("HuggingFaceTokenizer", model=_no_special_tokens(tmp_path)))
    assert tokenizer.eod is None
    with pytest.raises(ConfigError, match="--append-eod: .* has no end-of-document token.*--eod-id"):
        tokenizer.require_eod()


def test_eod_override(tmp_path):
    config = TokenizerConfig("HuggingFaceTokenizer", model=_no_special_tokens(tmp_path), eod_id=1)
    tokenizer = build_tokenizer(config)
    assert tokenizer.require_eod() == 1
    assert tokenizer.describe()["options"]["eod_id"] == 1


def test_library_failure_names_the_text(tokenizer_files):
    tokenizer = build_tokenizer(TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.sample_json))
    with pytest.raises(TokenizeError, match="could not encode the text") as raised:
        tokenizer.encode_batch(["fine", "lone surrogate \ud800 here", "fine"])
    assert raised.value.index == 1
    with pytest.raises(TokenizeError, match="expected a string to tokenize, got NoneType") as raised:
        tokenizer.encode_batch(["fine", None])
    assert raised.value.index == 1


def _encode_in_worker(config: TokenizerConfig) -> list[list[int]]:
    return build_tokenizer(config, threads=1).encode_batch(["built in a spawned worker 🚀"])


def test_spawned_worker_rebuilds_from_the_config(tokenizer_files):
    config = TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.sample_json)
    expected = build_tokenizer(config).encode_batch(["built in a spawned worker 🚀"])
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_encode_in_worker, (config,)) == expected
