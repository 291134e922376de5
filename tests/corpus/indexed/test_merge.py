"""corpus merge: the merged pair equals writing the concatenation directly; bad mixes are refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import corpus.core.disk
import corpus.indexed.merge
from corpus.core.disk import OutputError
from corpus.core.errors import InputError
from corpus.indexed import IndexedReader, IndexedWriter, sidecar
from corpus.indexed.errors import PrefixNotFound
from corpus.indexed.merge import merge
from tests.conftest import invoke_cli, run_cli

TOKENIZER = {"type": "HuggingFaceTokenizer", "fingerprint": "abc", "options": {}}


def make_shards(folder: Path, count: int, dtype=np.uint16, meta: dict | None = None) -> list[list[np.ndarray]]:
    """Write ``count`` shards of random documents (empty ones included); return all documents in order."""
    rng = np.random.default_rng(11)
    everything = []
    for shard in range(count):
        documents = [rng.integers(0, 500, size=rng.integers(0, 30)).astype(dtype) for _ in range(rng.integers(1, 40))]
        with IndexedWriter(folder / f"part-{shard:03d}_text_document", dtype) as writer:
            for document in documents:
                writer.add_document(document)
            writer.finalize(meta or {"tokenizer": TOKENIZER})
        everything.extend(documents)
    return everything


def assert_same_pair(a: Path | str, b: Path | str) -> None:
    for suffix in (".bin", ".idx"):
        assert Path(f"{a}{suffix}").read_bytes() == Path(f"{b}{suffix}").read_bytes()


def test_merge_equals_direct_write(tmp_path: Path) -> None:
    documents = make_shards(tmp_path, 12)
    with IndexedWriter(tmp_path / "direct", np.uint16) as writer:
        for document in documents:
            writer.add_document(document)
        writer.finalize()
    result = merge([str(tmp_path / "part-*_text_document")], str(tmp_path / "merged"))
    assert result.num_documents == len(documents)
    assert_same_pair(tmp_path / "merged", tmp_path / "direct")
    assert sidecar.read(tmp_path / "merged")["tokenizer"] == TOKENIZER


def test_merge_keeps_given_order_and_accepts_directories(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    make_shards(shards, 3)
    forward = merge([str(shards)], str(tmp_path / "forward"))
    backward = merge([str(shards / f"part-{i:03d}_text_document.idx") for i in (2, 1, 0)], str(tmp_path / "backward"))
    assert forward.inputs == sorted(forward.inputs)
    assert backward.inputs == list(reversed(forward.inputs))
    first_of_backward = IndexedReader(tmp_path / "backward").document(0)
    first_of_shard2 = IndexedReader(shards / "part-002_text_document").document(0)
    assert [list(s) for s in first_of_backward] == [list(s) for s in first_of_shard2]


def test_mixed_dtypes_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    make_shards(tmp_path / "a", 1, np.uint16)
    make_shards(tmp_path / "b", 1, np.int32)
    with pytest.raises(InputError, match="different token dtypes"):
        merge([str(tmp_path / "a"), str(tmp_path / "b")], str(tmp_path / "out"))
    assert not (tmp_path / "out.idx").exists()


def test_mixed_tokenizers_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    make_shards(tmp_path / "a", 1)
    make_shards(tmp_path / "b", 1, meta={"tokenizer": {**TOKENIZER, "fingerprint": "other"}})
    with pytest.raises(InputError, match="tokenized differently"):
        merge([str(tmp_path / "a"), str(tmp_path / "b")], str(tmp_path / "out"))


def test_output_among_inputs_refused(tmp_path: Path) -> None:
    make_shards(tmp_path, 2)
    with pytest.raises(InputError, match="also an input"):
        merge([str(tmp_path / "part-*_text_document")], str(tmp_path / "part-000_text_document"))


def test_nothing_matched(tmp_path: Path) -> None:
    with pytest.raises(PrefixNotFound, match="matched no .idx"):
        merge([str(tmp_path / "nothing-*")], str(tmp_path / "out"))


def test_cli_merge(tmp_path: Path) -> None:
    make_shards(tmp_path, 4)
    result = run_cli("corpus", "merge", "--input", str(tmp_path / "part-*_text_document"), "--output-prefix",
                     str(tmp_path / "all"))
    assert "merged 4 inputs" in result.stdout
    assert IndexedReader(tmp_path / "all").num_documents > 0
    failed = invoke_cli("corpus", "merge", "--input", str(tmp_path / "missing"), "--output-prefix", str(tmp_path / "x"))
    assert failed.returncode == 1
    assert "missing.idx: no such file" in failed.stderr and "Traceback" not in failed.stderr


def test_a_merge_the_disk_cannot_hold_is_refused_before_writing(tmp_path: Path, monkeypatch) -> None:
    make_shards(tmp_path, 3)
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    with pytest.raises(OutputError, match=f"{blocker} is a file, not a folder; choose another --output-prefix"):
        merge([str(tmp_path / "part-*_text_document")], str(blocker / "merged"))
    for module in (corpus.indexed.merge, corpus.core.disk):  # the check, and the message's figure
        monkeypatch.setattr(module, "free_bytes", lambda path: 100)
    with pytest.raises(OutputError) as raised:
        merge([str(tmp_path / "part-*_text_document")], str(tmp_path / "merged"))
    assert "No space left on device (100 bytes free, about" in str(raised.value)
    assert "free space and run the merge again" in str(raised.value)
    assert not list(tmp_path.glob("merged*"))
