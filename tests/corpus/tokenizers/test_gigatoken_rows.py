"""gigatoken's batch results without awkward: the same ids and counts as its awkward arrays, and awkward left
unimported (and importable) by the pipeline's encoder."""

from __future__ import annotations

import sys
import threading
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest

from corpus.tokenizers import TokenizerConfig, select_encoder
from corpus.tokenizers.gigatoken_rows import STAND_IN, FlatRows, flat_and_counts, without_awkward

pytestmark = pytest.mark.skipif(find_spec("gigatoken") is None, reason="gigatoken is not installed")


@pytest.fixture
def no_awkward(monkeypatch):
    """A process where nothing has imported awkward yet (restored afterwards). Gives a function returning the real
    package: the one imported before the test, else a fresh import (awkward can be imported only once a process:
    it registers a pyarrow extension type)."""
    imported = {name: module for name, module in sys.modules.items()
                if name == "awkward" or name.startswith("awkward.")}
    for name in imported:
        monkeypatch.delitem(sys.modules, name)

    def real_awkward():
        sys.modules.update(imported)
        import awkward

        return awkward

    return real_awkward


def test_stand_in_rows_equal_awkwards(tokenizer_files, conformance_texts, no_awkward):
    import gigatoken

    backend = gigatoken.Tokenizer.from_json(Path(tokenizer_files.sample_json).read_bytes()).backend
    texts = [*conformance_texts, "", "x"]
    with without_awkward():
        rows = backend.encode_batch(texts)
    assert isinstance(rows, FlatRows) and "awkward" not in sys.modules
    no_awkward()  # the real package, now that the encoder is done
    real = backend.encode_batch(texts)
    assert type(real).__module__.startswith("awkward")
    expected = flat_and_counts(real)
    got = flat_and_counts(rows)
    assert got.flat.dtype == expected.flat.dtype == np.uint32 and got.counts.dtype == expected.counts.dtype == np.int64
    assert np.array_equal(got.flat, expected.flat) and np.array_equal(got.counts, expected.counts)
    assert got.counts.tolist() == [len(ids) for ids in backend.encode_batch_list(texts)]


def test_a_process_with_awkward_keeps_it(monkeypatch):
    import awkward

    monkeypatch.setitem(sys.modules, "awkward", awkward)
    with without_awkward():
        assert sys.modules["awkward"] is awkward
    assert sys.modules["awkward"] is awkward


def test_overlapping_encoders_leave_awkward_importable(no_awkward):
    """The stand-in stays while any encoder call is inside, and goes with the last."""
    inside, release = threading.Barrier(3), threading.Event()

    def encode() -> None:
        with without_awkward():
            inside.wait()
            release.wait()

    threads = [threading.Thread(target=encode) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait()
    assert sys.modules["awkward"] is STAND_IN
    with without_awkward():
        pass
    assert sys.modules["awkward"] is STAND_IN  # the two others are still encoding
    release.set()
    for thread in threads:
        thread.join()
    assert "awkward" not in sys.modules


def test_the_pipelines_encoder_never_imports_awkward(tokenizer_files, conformance_texts, no_awkward):
    tokenizer, reason = select_encoder(TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.cl100k_bos_dir),
                                       conformance_texts[:20], threads=1)
    assert tokenizer.encoder_name.startswith("gigatoken "), reason
    flat, lengths = tokenizer.encode_batch_flat(conformance_texts)
    assert flat.tolist() == [i for ids in tokenizer.encode_batch(conformance_texts) for i in ids]
    assert lengths.tolist() == [len(ids) for ids in tokenizer.encode_batch(conformance_texts)]
    assert "awkward" not in sys.modules
