"""The pair most inspect tests plant their defects in (helpers in :mod:`tests.corpus.inspect.pairs`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.corpus.inspect.pairs import EOD, VOCAB, random_documents, write_pair


@pytest.fixture
def documents() -> list[list[np.ndarray]]:
    return random_documents(np.random.default_rng(7))


@pytest.fixture
def pair(tmp_path: Path, documents) -> Path:
    """A clean pair whose sidecar says EOD was appended."""
    prefix = tmp_path / "web_text_document"
    write_pair(prefix, documents, {"vocab_size": VOCAB, "eod_id": EOD, "append_eod": True})
    return prefix
