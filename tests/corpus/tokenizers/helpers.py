"""Assertions shared by the tokenizer tests."""

from __future__ import annotations


def assert_megatron_ids(ours, megatron, texts: list[str]) -> None:
    """``ours.encode_batch(texts)`` equals megatron-core's ``tokenize`` of each text; names the first difference."""
    got = ours.encode_batch(texts)
    assert len(got) == len(texts)
    for index, (text, ids) in enumerate(zip(texts, got)):
        want = megatron.tokenize(text)
        if ids != list(want):
            position = next((i for i, (a, b) in enumerate(zip(ids, want)) if a != b), min(len(ids), len(want)))
            raise AssertionError(f"text {index} {text[:50]!r}: ids differ at token {position}: "
                                 f"ours {ids[position:position + 8]} megatron {list(want[position:position + 8])}")


def assert_same_metadata(ours, megatron) -> None:
    """Vocabulary size, EOD and BOS as megatron-core reports them."""
    assert ours.vocab_size == megatron.vocab_size
    assert ours.eod == megatron.eod
    assert ours.bos == megatron.bos
