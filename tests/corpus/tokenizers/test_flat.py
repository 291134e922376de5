"""``encode_batch_flat``: the pipeline's flat ids equal ``encode_batch``'s lists, affixes included."""

from __future__ import annotations

import numpy as np
import pytest

from corpus.tokenizers import TokenizerConfig, build_tokenizer
from corpus.tokenizers.gigatoken import with_affixes
from tests.conftest import REPO


@pytest.mark.parametrize("prefix, suffix", [([], []), ([7], []), ([], [8, 9]), ([1, 2], [3])])
def test_with_affixes_matches_the_list_construction(prefix, suffix):
    rng = np.random.default_rng(0)
    rows = [list(rng.integers(10, 100, size=n)) for n in (3, 0, 1, 5, 0)]
    flat, lengths = np.array([i for row in rows for i in row], dtype=np.uint32), np.array([len(r) for r in rows])
    out, out_lengths = with_affixes(flat, lengths, prefix, suffix)
    expected = [[*prefix, *row, *suffix] for row in rows]
    assert out.tolist() == [i for row in expected for i in row]
    assert out_lengths.tolist() == [len(row) for row in expected]


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
