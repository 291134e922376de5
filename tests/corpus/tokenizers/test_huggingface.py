"""HuggingFaceTokenizer and GPT2BPETokenizer give megatron-core 0.16.1's ids on real tokenizer files."""

from __future__ import annotations

import json

import pytest

from corpus.core.errors import ConfigError
from corpus.tokenizers import TokenizerConfig, build_tokenizer
from tests.corpus.tokenizers.helpers import assert_megatron_ids, assert_same_metadata

# (fixture attribute, include special tokens, whether the directory names eos/bos for megatron-core)
HF_CASES = [
    ("cl100k_json", True, False),
    ("cl100k_json", False, False),
    ("cl100k_bos_dir", True, True),
    ("cl100k_bos_dir", False, True),
    ("spm_json_dir", True, True),
    ("spm_json_dir", False, True),
    ("spm_transformers_dir", True, True),
    ("sample_json", True, False),
]


@pytest.mark.parametrize("name, include, named", HF_CASES)
def test_huggingface_ids_equal_megatron(tokenizer_files, megatron_tokenizer, conformance_texts, name, include, named):
    config = TokenizerConfig("HuggingFaceTokenizer", model=getattr(tokenizer_files, name),
                             hf_include_special_tokens=include)
    ours, megatron = build_tokenizer(config), megatron_tokenizer(config)
    assert_megatron_ids(ours, megatron, conformance_texts)
    assert ours.vocab_size == megatron.vocab_size
    if named:
        assert_same_metadata(ours, megatron)
    else:  # megatron-core has no EOD for a bare tokenizer.json; we take its <|endoftext|>
        assert megatron.eod is None
        assert ours.eod == ours.tokenizer.token_to_id("<|endoftext|>")


def test_truncation_and_padding_in_the_file_are_ignored(tokenizer_files, megatron_tokenizer, conformance_texts,
                                                        tmp_path):
    data = json.loads(open(tokenizer_files.sample_json, encoding="utf-8").read())
    data["truncation"] = {"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0}
    data["padding"] = {"strategy": {"Fixed": 64}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0,
                       "pad_type_id": 0, "pad_token": "<|endoftext|>"}
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    config = TokenizerConfig("HuggingFaceTokenizer", model=str(tmp_path))
    ours = build_tokenizer(config)
    assert_megatron_ids(ours, megatron_tokenizer(config), conformance_texts)
    assert max(len(ids) for ids in ours.encode_batch(conformance_texts)) > 1000


def test_bos_template_adds_bos_only_with_special_tokens(tokenizer_files):
    with_bos = build_tokenizer(TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.cl100k_bos_dir))
    without = build_tokenizer(TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.cl100k_bos_dir,
                                              hf_include_special_tokens=False))
    assert with_bos.bos == 100277
    assert with_bos.encode_batch(["", "hi"]) == [[100277], [100277, *without.encode_batch(["hi"])[0]]]
    assert with_bos.describe()["options"]["include_special_tokens"] is True
    assert without.describe()["options"]["include_special_tokens"] is False


def test_gpt2_bpe_ids_equal_megatron(tokenizer_files, megatron_tokenizer, conformance_texts):
    config = TokenizerConfig("GPT2BPETokenizer", vocab_file=tokenizer_files.gpt2_vocab,
                             merge_file=tokenizer_files.gpt2_merges)
    ours, megatron = build_tokenizer(config), megatron_tokenizer(config)
    assert_megatron_ids(ours, megatron, conformance_texts)
    assert_same_metadata(ours, megatron)
    assert ours.eod == 0  # <|endoftext|>


@pytest.mark.parametrize("name", ["cl100k_json", "sample_json"])
def test_byte_level_decode_round_trip(tokenizer_files, conformance_texts, name):
    tokenizer = build_tokenizer(TokenizerConfig("HuggingFaceTokenizer", model=getattr(tokenizer_files, name)))
    texts = [text for text in conformance_texts if "<|" not in text]
    assert [tokenizer.decode(ids) for ids in tokenizer.encode_batch(texts)] == texts


def test_file_and_directory_are_the_same_tokenizer(tokenizer_files):
    directory = build_tokenizer(TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.cl100k_json))
    file = build_tokenizer(TokenizerConfig("HuggingFaceTokenizer",
                                           model=tokenizer_files.cl100k_json + "/tokenizer.json"))
    assert directory.describe()["fingerprint"] == file.describe()["fingerprint"]
    assert directory.encode_batch(["same ids"]) == file.encode_batch(["same ids"])


def test_config_files_are_part_of_the_fingerprint(tokenizer_files, tmp_path):
    original = build_tokenizer(TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.cl100k_bos_dir))
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (copy / name).write_bytes(open(f"{tokenizer_files.cl100k_bos_dir}/{name}", "rb").read())
    assert build_tokenizer(TokenizerConfig("HuggingFaceTokenizer", model=str(copy))).describe()["fingerprint"] == \
        original.describe()["fingerprint"]
    (copy / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endofprompt|>"}))
    changed = build_tokenizer(TokenizerConfig("HuggingFaceTokenizer", model=str(copy)))
    assert changed.eod == 100276
    assert changed.describe()["fingerprint"] != original.describe()["fingerprint"]


@pytest.mark.parametrize("setup, message", [
    (lambda d: None, "the directory has no tokenizer.json"),
    (lambda d: (d / "tokenizer.json").write_text("{not json"), "not a valid HuggingFace tokenizer.json"),
])
def test_bad_huggingface_files(tmp_path, setup, message):
    setup(tmp_path)
    with pytest.raises(ConfigError, match=message):
        build_tokenizer(TokenizerConfig("HuggingFaceTokenizer", model=str(tmp_path)))


def test_config_naming_a_token_missing_from_the_vocabulary(tokenizer_files, tmp_path):
    (tmp_path / "tokenizer.json").write_bytes(open(tokenizer_files.sample_json, "rb").read())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|not-there|>"}))
    with pytest.raises(ConfigError, match=r"<\|not-there\|> named in its config are not in"):
        build_tokenizer(TokenizerConfig("HuggingFaceTokenizer", model=str(tmp_path)))


def test_gpt2_files_that_are_not_bpe(tmp_path):
    (tmp_path / "vocab.json").write_text("[1, 2]")
    (tmp_path / "merges.txt").write_text("#version: 0.2\n")
    with pytest.raises(ConfigError, match="cannot load them as GPT-2 BPE files"):
        build_tokenizer(TokenizerConfig("GPT2BPETokenizer", vocab_file=str(tmp_path / "vocab.json"),
                                        merge_file=str(tmp_path / "merges.txt")))


class _TextDependentPostProcessor:
    """A real tokenizer.json behind a post-processor whose added token depends on the text (it repeats
    the text's first token before it): no constant affixes exist for such a tokenizer."""

    def __init__(self, tokenizer) -> None:
        self.inner = tokenizer

    def _wrap(self, encoding, add_special_tokens: bool):
        ids = list(encoding.ids)
        return type("Encoding", (), {"ids": ids[:1] + ids if add_special_tokens else ids})()

    def encode(self, text: str, add_special_tokens: bool = True):
        return self._wrap(self.inner.encode(text, add_special_tokens=False), add_special_tokens)

    def encode_batch_fast(self, texts: list[str], add_special_tokens: bool = True):
        return [self._wrap(e, add_special_tokens) for e in self.inner.encode_batch_fast(texts,
                                                                                        add_special_tokens=False)]

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def test_text_dependent_post_processor_encodes_whole_and_refuses_the_fast_path(tokenizer_files, monkeypatch):
    from tokenizers import Tokenizer

    from corpus.tokenizers import huggingface, long_texts
    from corpus.tokenizers.select import _check

    config = TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.cl100k_json)
    json_file = f"{tokenizer_files.cl100k_json}/tokenizer.json"
    wrapped = _TextDependentPostProcessor(Tokenizer.from_file(json_file))
    ours = huggingface.HuggingFaceTextTokenizer(config, wrapped, [json_file], {})
    with pytest.raises(huggingface.AffixError, match="different tokens to different texts"):
        ours.affixes()
    assert ours.cut_rule is None
    monkeypatch.setattr(long_texts, "LONG_TEXT_CHARS", 64)  # every text below is "very long"
    texts = ["hello world " * 20, "下一个 " * 30]
    assert ours.encode_batch(texts) == [wrapped.encode(text).ids for text in texts]  # whole: the rule kept
    pytest.importorskip("gigatoken")
    verdict, _, fast = _check(ours, threads=1)
    reason = verdict["reason"]
    assert fast is None and "different tokens to different texts" in reason
