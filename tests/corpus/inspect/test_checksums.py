"""``corpus add-checksums`` from Python: what it records and reports for a pair with none, with one, or with both;
a damaged pair refused with the count of its problems and the first; a remote pair refused with what to do."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from corpus import storage
from corpus.core.errors import InputError
from corpus.indexed import IndexedWriter
from corpus.inspect.checksums import ChecksumResult, add_checksums

VOCAB = 500


def _pair(folder: Path, keep: tuple[str, ...] = ()) -> tuple[str, dict]:
    """A sound pair whose sidecar keeps only the checksums named in ``keep`` (``"bin"``, ``"idx"``); its prefix and
    the checksums it was written with."""
    rng = np.random.default_rng(5)
    prefix = folder / "p_text_document"
    with IndexedWriter(prefix, np.uint16) as writer:
        for _ in range(20):
            writer.add_document(rng.integers(1, VOCAB, rng.integers(1, 50)).astype(np.uint16))
        writer.finalize({"vocab_size": VOCAB})
    meta_path = Path(f"{prefix}.meta.json")
    meta = json.loads(meta_path.read_text())
    written = meta["checksums"]
    meta["checksums"] = {key: value for key, value in written.items() if key.split("_")[0] in keep}
    meta_path.write_text(json.dumps(meta))
    return str(prefix), written


def _checksums(prefix: str) -> dict:
    return json.loads(Path(f"{prefix}.meta.json").read_text())["checksums"]


def test_checksums_are_recorded_once_and_then_reported_as_there(tmp_path):
    prefix, written = _pair(tmp_path)
    assert add_checksums([prefix]) == [ChecksumResult(prefix, ("bin", "idx"), False)]
    assert _checksums(prefix) == written
    assert add_checksums([prefix]) == [ChecksumResult(prefix, (), False)]


def test_a_recorded_checksum_is_kept_and_the_missing_one_added(tmp_path):
    prefix, written = _pair(tmp_path, keep=("bin",))
    assert add_checksums([prefix]) == [ChecksumResult(prefix, ("idx",), False)]
    assert _checksums(prefix) == written


def test_a_damaged_pair_is_refused_with_its_count_of_problems_and_the_first(tmp_path):
    prefix, _ = _pair(tmp_path)
    meta_path = Path(f"{prefix}.meta.json")
    meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "vocab_size": 2}))  # most ids too large
    with pytest.raises(InputError) as refused:
        add_checksums([prefix])
    message = str(refused.value)
    assert message.startswith(f"{prefix}: 2 problem(s), the first: ")  # one listed, the rest summed up in one
    assert message.endswith("; checksums are recorded only for a pair every check passes (corpus inspect --check "
                            "lists them)")


def test_a_remote_pair_is_refused_with_what_to_do(tmp_path, bucket):
    prefix, _ = _pair(tmp_path)
    for suffix in (".bin", ".idx", ".meta.json"):
        storage.upload(f"{prefix}{suffix}", f"{bucket}/p_text_document{suffix}")
    with pytest.raises(InputError) as refused:
        add_checksums([f"{bucket}/p_text_document"])
    assert str(refused.value) == (f"{bucket}/p_text_document: checksums are recorded for pairs on a local disk; copy "
                                  "the pair here, run corpus add-checksums, and copy its .meta.json back")
