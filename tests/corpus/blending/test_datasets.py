"""Every sample knows its source: ``source_ids`` index the blend's sources in file order (per-split lists
included), batches carry them, and a glob source tells which shard a sample starts in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from corpus.blending.datasets import SampleCounts, build_split_datasets
from corpus.blending.schema import blend_from_dict
from corpus.indexed import IndexedWriter
from tests.corpus.blending.blend_data import EOD, VOCAB, tokenizer_record, write_random


def write_constant(prefix: Path, token: int, num_docs: int, seed: int) -> None:
    """Documents of random length whose every token is ``token`` (then EOD): a sample's first token tells which
    file it starts in."""
    lengths = np.random.default_rng(seed).integers(2, 30, num_docs)
    tokens = np.full(int(lengths.sum()), token, dtype=np.uint16)
    tokens[np.cumsum(lengths) - 1] = EOD
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with IndexedWriter(prefix, np.dtype(np.uint16)) as writer:
        writer.add_documents(tokens, lengths)
        writer.finalize({"tokenizer": tokenizer_record(), "vocab_size": VOCAB, "eod_id": EOD})


def test_source_ids_follow_the_blend_order_also_with_per_split_lists(tmp_path):
    for name, seed in (("a", 1), ("b", 2), ("c", 3)):
        write_random(tmp_path / name, 200, seed=seed)
    blend = blend_from_dict({"seq_length": 16, "cache_dir": "cache", "sources": {
        "train": [{"name": "a", "prefix": "a", "weight": 1}, {"name": "b", "prefix": "b", "weight": 3}],
        "valid": [{"name": "c", "prefix": "c", "weight": 1}, {"name": "a", "prefix": "a", "weight": 1}]}},
        base_dir=tmp_path)
    assert blend.source_names() == ("a", "b", "c")
    built = build_split_datasets(blend, SampleCounts(train=64, valid=32))
    for dataset in (built.train, built.valid):
        assert dataset.source_names == ("a", "b", "c")
        ids = dataset.source_ids(np.arange(len(dataset)))
        assert ids.dtype == np.int64
        assert [dataset.source_names[i] for i in ids] == [dataset.source_name(i) for i in range(len(dataset))]
        batch = dataset.batch([3, 1, 4])
        assert batch["source_ids"].tolist() == ids[[3, 1, 4]].tolist()
        assert dataset[5]["source_ids"].shape == () and int(dataset[5]["source_ids"]) == ids[5]
    assert set(built.train.source_ids(np.arange(64)).tolist()) == {0, 1}
    assert set(built.valid.source_ids(np.arange(32)).tolist()) == {0, 2}
    with pytest.raises(IndexError, match="out of range"):
        built.train.source_ids([0, len(built.train)])


def test_a_glob_source_names_the_shard_each_sample_starts_in(tmp_path):
    write_constant(tmp_path / "code" / "part_0", 7, 80, seed=1)
    write_constant(tmp_path / "code" / "part_1", 9, 80, seed=2)
    write_random(tmp_path / "web", 200, seed=3)
    blend = blend_from_dict({"seq_length": 16, "split": "1", "cache_dir": "cache", "sources": [
        {"name": "web", "prefix": "web", "weight": 1}, {"name": "code", "prefix": "code/part_*", "weight": 1}]},
        base_dir=tmp_path)
    train = build_split_datasets(blend, SampleCounts(train=200)).train
    shards = {7: str(tmp_path / "code" / "part_0"), 9: str(tmp_path / "code" / "part_1")}
    seen = set()
    for index in range(len(train)):
        if train.source_name(index) == "web":
            assert train.shard_of(index) == str(tmp_path / "web")
            continue
        first = int(train.tokens_of(index)[0])
        if first != EOD:  # a sample starting on a document's EOD could be either file's
            assert train.shard_of(index) == shards[first]
            seen.add(first)
    assert seen == {7, 9}


def test_two_entries_of_one_file_are_two_sources(tmp_path):
    """Listing one prefix under two names makes two sources (the file is opened once)."""
    write_random(tmp_path / "web", 200, seed=1)
    blend = blend_from_dict({"seq_length": 16, "split": "1", "cache_dir": "cache", "sources": [
        {"name": "first", "prefix": "web", "weight": 1}, {"name": "second", "prefix": "web", "weight": 3}]},
        base_dir=tmp_path)
    train = build_split_datasets(blend, SampleCounts(train=80)).train
    ids = train.source_ids(np.arange(80))
    assert train.source_names == ("first", "second") and np.bincount(ids).tolist() == [20, 60]
    assert {train.source_name(i) for i in range(80)} == {"first", "second"}
