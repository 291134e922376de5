"""Very long texts encoded in pieces give the ids of the whole text, for every tokenizer family."""

from __future__ import annotations

import random
from importlib.util import find_spec

import numpy as np
import pytest

from corpus.tokenizers import TokenizerConfig, build_tokenizer, long_texts, select_encoder
from tests.corpus.tokenizers.conftest import HARD_CASES, _documents

CASES = {
    "cl100k tokenizer.json": lambda f: TokenizerConfig("HuggingFaceTokenizer", model=f.cl100k_json),
    "cl100k + BOS template": lambda f: TokenizerConfig("HuggingFaceTokenizer", model=f.cl100k_bos_dir),
    "SentencePiece as tokenizer.json": lambda f: TokenizerConfig("HuggingFaceTokenizer", model=f.spm_json_dir),
    "transformers' Llama tokenizer.json": lambda f: TokenizerConfig("HuggingFaceTokenizer",
                                                                    model=f.spm_transformers_dir),
    "sample byte-level BPE": lambda f: TokenizerConfig("HuggingFaceTokenizer", model=f.sample_json),
    "GPT-2 vocab + merges": lambda f: TokenizerConfig("GPT2BPETokenizer", vocab_file=f.gpt2_vocab,
                                                      merge_file=f.gpt2_merges),
    "tiktoken v2 (cl100k)": lambda f: TokenizerConfig("TikTokenizer", model=f.cl100k_tiktoken),
    "tiktoken v1 (cl100k)": lambda f: TokenizerConfig("TikTokenizer", model=f.cl100k_tiktoken, tiktoken_pattern="v1"),
    "tekken": lambda f: TokenizerConfig("TikTokenizer", model=f.tekken),
    "SentencePiece v1": lambda f: TokenizerConfig("SentencePieceTokenizer", model=f.spm_v1),
    "SentencePiece v3": lambda f: TokenizerConfig("Llama2Tokenizer", model=f.spm_v3),
}


@pytest.fixture()
def small_pieces(monkeypatch):
    """Cut texts above 20,000 characters into ~3,000-character pieces (the real sizes need MBs)."""
    monkeypatch.setattr(long_texts, "LONG_TEXT_CHARS", 20_000)
    monkeypatch.setattr(long_texts, "PIECE_CHARS", 3_000)
    monkeypatch.setattr(long_texts, "WINDOW_CHARS", 200)


@pytest.fixture(scope="module")
def long_documents() -> list[str]:
    """Real prose and code joined into long texts, one with every hard case in between."""
    web, code = _documents("web.jsonl", 60, 10**6), _documents("code.jsonl", 40, 10**6)
    mixed = "\n".join(text for pair in zip(web, HARD_CASES * 3) for text in pair)
    return ["\n".join(web)[:150_000], "\n".join(code)[:120_000], mixed[:150_000]]


def count_pieces(monkeypatch) -> list[int]:
    """Record how many pieces each long text was cut into."""
    counts: list[int] = []
    original = long_texts.pieces

    def counting(text, rule, verify):
        found = list(original(text, rule, verify))
        counts.append(len(found))
        return iter(found)

    monkeypatch.setattr(long_texts, "pieces", counting)
    return counts


def whole_ids(tokenizer, texts: list[str]) -> list[list[int]]:
    return [list(ids) for ids in tokenizer._encode_whole(texts)]


@pytest.mark.parametrize("name", CASES)
def test_pieces_give_the_ids_of_the_whole_text(tokenizer_files, small_pieces, long_documents, monkeypatch, name):
    tokenizer = build_tokenizer(CASES[name](tokenizer_files))
    assert tokenizer.cut_rule is not None, f"{name} should be cut"
    counts = count_pieces(monkeypatch)
    texts = ["short one", *long_documents, ""]
    got = tokenizer.encode_batch(texts)
    assert got == whole_ids(tokenizer, texts)
    assert len(counts) == len(long_documents) and min(counts) > 10, counts
    flat, lengths = tokenizer.encode_batch_flat(texts)
    assert lengths.tolist() == [len(ids) for ids in got] and flat.tolist() == [i for ids in got for i in ids]


@pytest.mark.parametrize("name", ["cl100k + BOS template", "tekken", "SentencePiece v1"])
def test_pieces_give_megatron_ids(tokenizer_files, megatron_tokenizer, small_pieces, long_documents, name):
    config = CASES[name](tokenizer_files)
    if name == "tekken":  # megatron-core reads only the bare JSON list of the same vocabulary
        config = config.replace(model=tokenizer_files.tekken_megatron_list)
    tokenizer = build_tokenizer(config)
    megatron = megatron_tokenizer(config)
    for text, ids in zip(long_documents, tokenizer.encode_batch(long_documents)):
        assert ids == list(megatron.tokenize(text))


@pytest.mark.skipif(find_spec("gigatoken") is None, reason="gigatoken is not installed")
@pytest.mark.parametrize("name", ["cl100k + BOS template", "SentencePiece v1"])
def test_the_fast_path_cuts_like_its_reference(tokenizer_files, small_pieces, long_documents, name):
    fast, reason = select_encoder(CASES[name](tokenizer_files), long_documents[:1])
    assert fast.encoder_name.startswith("gigatoken"), reason
    assert fast.encode_batch(long_documents) == whole_ids(fast.reference, long_documents)


def test_a_rejected_cut_is_not_taken(tokenizer_files, small_pieces, long_documents, monkeypatch):
    """When the window check fails everywhere the text is encoded whole (one piece)."""
    tokenizer = build_tokenizer(CASES["cl100k tokenizer.json"](tokenizer_files))
    counts = count_pieces(monkeypatch)
    monkeypatch.setattr(tokenizer, "_same_ids_when_cut", lambda whole, left, right: False)
    assert tokenizer.encode_batch(long_documents[:1]) == whole_ids(tokenizer, long_documents[:1])
    assert counts == [1]


ALPHABET = ["a", "B", "é", "日", "7", "½", " ", "  ", "\n", "\n\n", "\r\n", "\t", ".", "'s", "'", "-", "/",
            "🚀", "\u00a0", "\u2028", "\x1c", "_", "word", " the", "\u0301"]


@pytest.mark.parametrize("name", ["cl100k tokenizer.json", "GPT-2 vocab + merges", "tiktoken v1 (cl100k)",
                                  "tiktoken v2 (cl100k)", "tekken", "SentencePiece v1",
                                  "transformers' Llama tokenizer.json"])
def test_random_texts_of_awkward_characters(tokenizer_files, small_pieces, monkeypatch, name):
    """The rule alone (no window check) never changes the ids, cutting next to every kind of
    whitespace, punctuation, digit and letter."""
    tokenizer = build_tokenizer(CASES[name](tokenizer_files))
    monkeypatch.setattr(tokenizer, "_same_ids_when_cut", lambda whole, left, right: True)
    counts = count_pieces(monkeypatch)
    rng = random.Random(7)
    texts = ["".join(rng.choice(ALPHABET) for _ in range(30_000)) for _ in range(3)]
    assert tokenizer.encode_batch(texts) == whole_ids(tokenizer, texts)
    assert min(counts) > 10, counts


def test_rules_cut_only_where_allowed():
    regex = long_texts.REGEX_PRETOKENIZER.pattern
    assert [m.start() for m in regex.finditer("ab\ncd\n\nef x\n y")] == [3, 9]
    assert [m.start() for m in regex.finditer("ab cd 12 ef  gh")] == [2]
    space = long_texts.SPACE_PREFIXED.pattern
    assert [(m.start(), m.end()) for m in space.finditer("ab cd  ef\ngh i")] == [(2, 3), (12, 13)]


def test_texts_below_the_threshold_are_never_cut(tokenizer_files, monkeypatch):
    counts = count_pieces(monkeypatch)
    tokenizer = build_tokenizer(CASES["tiktoken v2 (cl100k)"](tokenizer_files))
    flat, lengths = tokenizer.encode_batch_flat(["a text\n" * 1000])
    assert counts == [] and lengths.tolist() == [len(flat)] and flat.dtype in (np.uint32, np.int64)
