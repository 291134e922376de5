"""corpus merge: the merged pair equals writing the concatenation directly; bad mixes are refused."""

from __future__ import annotations

import shutil
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


RECORD = {"tokenizer": TOKENIZER, "encoder": "tokenizers", "vocab_size": 500, "eod_id": 0, "bos_id": 1,
          "json_key": "text", "append_eod": True}


def _shard_folders(tmp_path: Path, *metas: dict) -> list[str]:
    """One folder of one shard for each sidecar record in ``metas``; the shards' prefixes."""
    prefixes = []
    for number, meta in enumerate(metas):
        folder = tmp_path / f"in-{number}"
        folder.mkdir()
        make_shards(folder, 1, meta=meta)
        prefixes.append(str(folder / "part-000_text_document"))
    return prefixes


def test_the_merged_sidecar_carries_the_tokenizer_record_and_names_the_inputs(tmp_path: Path) -> None:
    prefixes = _shard_folders(tmp_path, {**RECORD, "input_files": ["a.jsonl"]}, RECORD)
    result = merge(prefixes, str(tmp_path / "merged"))
    reader = IndexedReader(tmp_path / "merged")
    assert (result.output_prefix, result.inputs) == (str(tmp_path / "merged"), prefixes)
    assert (result.num_documents, result.num_sequences, result.num_tokens) == (
        reader.num_documents, reader.num_sequences, (tmp_path / "merged.bin").stat().st_size // 2)
    merged = sidecar.read(tmp_path / "merged")
    assert merged["merged_from"] == prefixes and "input_files" not in merged
    assert {key: merged[key] for key in RECORD} == RECORD


def test_mixed_tokenizers_and_dtypes_are_named_in_the_refusal(tmp_path: Path) -> None:
    other = {**TOKENIZER, "fingerprint": "other"}
    first, second, third = _shard_folders(tmp_path, RECORD, RECORD, {**RECORD, "tokenizer": other})
    with pytest.raises(InputError) as mixed:
        merge([first, second, third], str(tmp_path / "out"))
    assert str(mixed.value) == (f"inputs were tokenized differently: {first} used ('HuggingFaceTokenizer', 'abc'), "
                                f"{third} used ('HuggingFaceTokenizer', 'other'); merge only files made with the same "
                                "tokenizer and options")
    (tmp_path / "wide").mkdir()
    make_shards(tmp_path / "wide", 1, np.int32)
    wide = str(tmp_path / "wide" / "part-000_text_document")
    with pytest.raises(InputError) as dtypes:
        merge([first, wide], str(tmp_path / "out"))
    assert str(dtypes.value) == (f"inputs have different token dtypes: {first} (uint16), {wide} (int32); "
                                 "re-tokenize them with one tokenizer")


def test_inputs_without_a_tokenizer_record_are_counted_in_a_warning(tmp_path: Path, caplog) -> None:
    unrecorded = {"json_key": "text"}
    prefixes = _shard_folders(tmp_path, RECORD, unrecorded, unrecorded)
    with caplog.at_level("WARNING", logger=corpus.indexed.merge.__name__):
        merge(prefixes, str(tmp_path / "merged"))
    assert caplog.messages == [f"2 input(s) have no tokenizer record (e.g. {prefixes[1]}); assuming they match the "
                               "others"]
    assert sidecar.read(tmp_path / "merged")["tokenizer"] == TOKENIZER


def test_a_merge_that_just_fits_the_free_space_runs_and_one_byte_less_is_refused(tmp_path: Path,
                                                                                 monkeypatch) -> None:
    make_shards(tmp_path, 3)
    needed = sum(path.stat().st_size for path in tmp_path.glob("part-*_text_document.*") if path.suffix != ".json")
    monkeypatch.setattr(corpus.indexed.merge, "free_bytes", lambda path: needed - 1)
    with pytest.raises(OutputError) as refused:
        merge([str(tmp_path / "part-*_text_document")], str(tmp_path / "merged"))
    assert str(refused.value).startswith(f"cannot write {tmp_path / 'merged'}.bin: No space left on device (")
    assert str(refused.value).endswith("free space and run the merge again, or choose another --output-prefix")
    monkeypatch.setattr(corpus.indexed.merge, "free_bytes", lambda path: needed)
    assert merge([str(tmp_path / "part-*_text_document")], str(tmp_path / "merged")).num_documents > 0


def test_pairs_without_sidecars_merge_into_a_pair_that_names_them(tmp_path: Path) -> None:
    """Megatron writes no sidecar: nothing to compare, nothing to copy but the inputs' names."""
    make_shards(tmp_path, 2)
    for meta in tmp_path.glob("*.meta.json"):
        meta.unlink()
    result = merge([str(tmp_path / "part-*_text_document")], str(tmp_path / "merged"))
    assert sidecar.read(tmp_path / "merged")["merged_from"] == result.inputs and len(result.inputs) == 2


def test_a_disk_that_fills_during_the_merge_is_one_line_with_the_size_needed(tmp_path: Path, small_disk: Path,
                                                                              monkeypatch) -> None:
    """The free space could not be known beforehand (or another writer took it meanwhile): the write fails, the
    partial files go, and the line says how much the whole merge needs."""
    make_shards(tmp_path, 3)
    monkeypatch.setattr(corpus.indexed.merge, "free_bytes", lambda path: None)
    (small_disk / "filler").write_bytes(b"\0" * (shutil.disk_usage(small_disk).free - 512))
    with pytest.raises(OutputError) as full:
        merge([str(tmp_path / "part-*_text_document")], str(small_disk / "merged"))
    message = str(full.value)
    assert message.startswith(f"cannot write {small_disk / 'merged'}") and "No space left on device" in message
    assert message.endswith(" needed); free space and run the merge again, or choose another --output-prefix")
    assert sorted(path.name for path in small_disk.iterdir()) == ["filler"]
