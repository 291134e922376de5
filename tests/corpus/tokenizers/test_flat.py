"""Flat batches (``corpus.tokenizers.flat``: ids put around texts) and ``encode_batch_flat``: the pipeline's flat
ids equal ``encode_batch``'s lists, affixes included."""

from __future__ import annotations

import numpy as np
import pytest

from corpus.tokenizers import TokenizerConfig, build_tokenizer
from corpus.tokenizers.flat import around_texts
from tests.conftest import REPO

ROWS = [[], [11, 12, 13], [], [14], [15, 16, 17, 18, 19], []]


def _flat(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([i for row in rows for i in row], dtype=np.uint32),
            np.array([len(row) for row in rows], dtype=np.int64))


@pytest.mark.parametrize("before, after", [([], []), ([7], []), ([], [8, 9]), ([1, 2], [3])])
@pytest.mark.parametrize("only_nonempty", [False, True])
def test_around_texts_matches_the_list_construction(before, after, only_nonempty):
    flat, lengths = _flat(ROWS)
    chosen = lengths > 0 if only_nonempty else None
    out, out_lengths = around_texts(flat, lengths, before, after, chosen)
    expected = [[*before, *row, *after] if row or not only_nonempty else row for row in ROWS]
    assert out.tolist() == [i for row in expected for i in row]
    assert out_lengths.tolist() == [len(row) for row in expected]
    assert out.dtype == flat.dtype and lengths.tolist() == [len(row) for row in ROWS]  # the input is kept


def test_around_texts_of_an_empty_batch():
    out, lengths = around_texts(np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.int64), [1], [2])
    assert out.size == 0 and lengths.size == 0


@pytest.mark.parametrize("encoder", ["reference", "gigatoken"])
def test_flat_equals_lists(encoder):
    from corpus.tokenizers import select_encoder

    config = TokenizerConfig(type="HuggingFaceTokenizer", model=str(REPO / "examples" / "tokenizer.json"),
                             encoder=encoder)
    tokenizer = select_encoder(config, [])[0] if encoder == "gigatoken" else build_tokenizer(config)
    texts = ["", "hello world", "日本語 🚀", "def f(x):\n    return x", " " * 40]
    flat, lengths = tokenizer.encode_batch_flat(texts)
    lists = tokenizer.encode_batch(texts)
    assert flat.tolist() == [i for row in lists for i in row] and lengths.tolist() == [len(r) for r in lists]
