"""``packing: best_fit``: whole documents in samples, every token once per epoch, padding that is never a
target, document boundaries in every batch, deterministic maps cached apart from the concatenating ones,
and everything a blend does (splits, epochs, weights, exhaustive blends, globs, resume) still working."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from corpus.blending import index_maps as maps_module
from corpus.blending import packing
from corpus.blending.build import build_split_maps
from corpus.blending.datasets import SampleCounts, SplitDataset, build_split_datasets
from corpus.blending.loader import BlendLoader, TorchSplitDataset
from corpus.blending.plan import plan_split
from corpus.blending.report import dry_run
from corpus.blending.resolve import resolve_blend
from corpus.blending.samples import PAD_ID
from corpus.blending.schema import blend_from_dict
from corpus.core.errors import ConfigError
from corpus.indexed import IndexedReader
from tests.cache_keys import assert_each_field_changes_the_key
from tests.conftest import REPO, run_cli
from tests.corpus.blending.blend_data import VOCAB, write_random

SEQ = 32
CAPACITY = SEQ + 1


def _blend(folder: Path, **changes: object) -> dict:
    data = {"seq_length": SEQ, "seed": 7, "split": "90,10,0", "cache_dir": "cache", "packing": "best_fit",
            "packing_window": 64, "sources": [{"name": "web", "prefix": "web"}]}
    return {**data, **changes}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write_random(tmp_path / "web", 600, seed=1, max_len=3 * CAPACITY)  # a third of them longer than a sample
    write_random(tmp_path / "code", 200, seed=2, max_len=CAPACITY)
    return tmp_path


def _documents(folder: Path, name: str, begin: int, end: int) -> list[np.ndarray]:
    reader = IndexedReader(folder / name)
    return [np.asarray(reader.get(i), dtype=np.int64) for i in range(begin, end)]


def _one_epoch(data: dict, folder: Path) -> SplitDataset:
    """The train split of one epoch of each source (no sample count, as ``corpus blend`` plans it)."""
    resolved = resolve_blend(blend_from_dict(data, base_dir=folder))
    return SplitDataset(resolved, build_split_maps(resolved, plan_split(resolved, "train", None)))


def _pieces(dataset) -> list[list[tuple[int, int, int, int]]]:
    return [dataset.view(i)[1] for i in range(len(dataset))]


def test_every_short_document_whole_in_one_sample_per_epoch(folder) -> None:
    train = build_split_datasets(blend_from_dict(_blend(folder), base_dir=folder), SampleCounts(3000)).train
    epochs = train.plan.members[0].epochs.num_epochs
    assert epochs >= 3  # several passes, each document once per pass
    lengths = train.plan.members[0].source.lengths
    seen = collections.Counter()
    for pieces in _pieces(train):
        for _, sequence, offset, count in pieces:
            seen[sequence, offset] += 1
            if lengths[sequence] <= CAPACITY:
                assert offset == 0 and count == lengths[sequence]  # whole, never cut
    begin, end = train.plan.members[0].begin, train.plan.members[0].end
    short = [s for s in range(begin, end) if 0 < lengths[s] <= CAPACITY]
    assert short and all(seen[s, 0] == epochs for s in short)
    assert all(count == epochs for count in seen.values())


def test_non_padding_tokens_of_an_epoch_are_the_source_tokens(folder) -> None:
    """One epoch (no sample count): the multiset of tokens in the samples is exactly the split's documents'."""
    train = _one_epoch(_blend(folder, split="100,0,0"), folder)
    rows = np.stack([train.tokens_of(i) for i in range(len(train))])
    assert train.plan.members[0].epochs.num_epochs == 1
    ours = np.sort(rows[rows != PAD_ID])
    theirs = np.sort(np.concatenate(_documents(folder, "web", 0, len(IndexedReader(folder / "web")))))
    np.testing.assert_array_equal(ours, theirs)
    padded_rows = (rows == PAD_ID).any(axis=1)
    assert padded_rows.any() and not (rows[:, 0] == PAD_ID).any()  # padding only after the documents


def test_padding_is_never_a_target_and_is_fed_as_the_pad_id(folder) -> None:
    blend = blend_from_dict(_blend(folder, samples={"pad_id": 5}), base_dir=folder)
    train = build_split_datasets(blend, SampleCounts(400)).train
    rows = np.stack([train.tokens_of(i) for i in range(64)])
    batch = train.batch(np.arange(64))
    padded_labels, padded_inputs = rows[:, 1:] == PAD_ID, rows[:, :-1] == PAD_ID
    assert padded_labels.any()
    assert (batch["loss_mask"][padded_labels] == 0).all() and (batch["loss_mask"][~padded_labels] == 1).all()
    assert (batch["tokens"][padded_inputs] == 5).all() and (batch["labels"] >= 0).all()


def test_batches_carry_document_boundaries(folder) -> None:
    """cu_seqlens and positions restart at every document piece and at the padding, with no reset flag set."""
    train = build_split_datasets(blend_from_dict(_blend(folder), base_dir=folder), SampleCounts(400)).train
    indices = np.arange(8)
    batch = train.batch(indices)
    expected = []
    for row, index in enumerate(indices):
        tokens, pieces = train.view(int(index))
        starts = [at for at, _, _, _ in pieces]
        filled = sum(count for _, _, _, count in pieces)
        starts += [filled] if filled < SEQ else []  # the padding is a segment of its own
        expected += [row * SEQ + at for at in starts if at < SEQ]
        for at, end in zip(starts, starts[1:] + [SEQ]):
            np.testing.assert_array_equal(batch["position_ids"][row, at:end], np.arange(min(end, SEQ) - at))
    np.testing.assert_array_equal(batch["cu_seqlens"], expected + [len(indices) * SEQ])


def test_maps_are_deterministic_across_processes_and_workers(folder) -> None:
    blend = blend_from_dict(_blend(folder, cache_dir="cache-here"), base_dir=folder)
    here = build_split_datasets(blend, SampleCounts(500)).train
    script = ("import sys, json; from corpus.blending.datasets import SampleCounts, build_split_datasets; "
              "from corpus.blending.schema import blend_from_dict; "
              "data = json.loads(sys.argv[1]); "
              "train = build_split_datasets(blend_from_dict(data, base_dir=sys.argv[2]), SampleCounts(500)).train; "
              "print(json.dumps([train.tokens_of(i).tolist() for i in range(len(train))]))")
    done = subprocess.run([sys.executable, "-c", script, json.dumps(_blend(folder, cache_dir="cache-there")),
                           str(folder)], capture_output=True, text=True, check=True, cwd=REPO,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert json.loads(done.stdout) == [here.tokens_of(i).tolist() for i in range(len(here))]
    workers = torch.utils.data.DataLoader(TorchSplitDataset(here), batch_size=None, num_workers=2)
    for index, sample in enumerate(workers):
        np.testing.assert_array_equal(sample["tokens"].numpy(), here[index]["tokens"])


def test_data_parallel_ranks_get_disjoint_samples(folder) -> None:
    train = build_split_datasets(blend_from_dict(_blend(folder), base_dir=folder), SampleCounts(240)).train
    single = [b["tokens"] for b in BlendLoader(train, micro_batch_size=4)]
    ranks = [[b["tokens"] for b in BlendLoader(train, micro_batch_size=2, dp_rank=r, dp_size=2)] for r in (0, 1)]
    for step, whole in enumerate(single):  # rank r holds rows [2r, 2r + 2) of each global micro-step
        assert torch.equal(torch.cat([ranks[0][step], ranks[1][step]]), whole)
    resumed = BlendLoader(train, micro_batch_size=2, dp_rank=1, dp_size=2, consumed_samples=40)
    assert all(torch.equal(a["tokens"], b) for a, b in zip(resumed, ranks[1][10:]))


def test_concat_and_best_fit_build_distinct_cache_entries(folder) -> None:
    counts = SampleCounts(300, 20)
    concat = build_split_datasets(blend_from_dict(_blend(folder, packing="concat"), base_dir=folder), counts)
    packed = build_split_datasets(blend_from_dict(_blend(folder), base_dir=folder), counts)
    other_window = build_split_datasets(blend_from_dict(_blend(folder, packing_window=7), base_dir=folder), counts)
    assert concat.train.maps_built and packed.train.maps_built and other_window.train.maps_built
    entries = sorted(p.name.split("-")[0] for p in (folder / "cache").iterdir() if p.is_dir() and
                     not p.name.startswith(("source", "kernels", ".")))
    assert entries == ["gpt"] * 2 + ["packed"] * 4  # train and valid of each: none shared
    assert concat.fingerprint != packed.fingerprint != other_window.fingerprint
    again = build_split_datasets(blend_from_dict(_blend(folder), base_dir=folder), counts)
    assert again.train.maps_built == 0 and again.train.tokens_of(3).tolist() == packed.train.tokens_of(3).tolist()


def test_weighted_glob_blend_with_epoch_caps(folder) -> None:
    for shard in range(3):
        write_random(folder / "shards" / f"part-{shard}", 80, seed=10 + shard, max_len=2 * CAPACITY)
    sources = [{"name": "web", "prefix": "web", "weight": 0.5},
               {"name": "shards", "prefix": "shards/part-*", "weight": 0.5, "max_epochs": 9}]
    data = build_split_datasets(blend_from_dict(_blend(folder, sources=sources), base_dir=folder),
                                SampleCounts(900, 30))
    assert len(data.train) == 900 and len(data.valid) == 30
    taken = collections.Counter(data.train.source_name(i) for i in range(900))
    assert taken == {"web": 450, "shards": 450}
    capped = [{**sources[0]}, {**sources[1], "max_epochs": 1}]
    with pytest.raises(ConfigError, match=r"sources\[1\]\.max_epochs.*read \d+ times over"):
        build_split_datasets(blend_from_dict(_blend(folder, sources=capped), base_dir=folder), SampleCounts(900))


def test_exhaustive_blend_takes_one_packed_epoch_of_each(folder) -> None:
    sources = [{"name": "web", "prefix": "web"}, {"name": "code", "prefix": "code"}]
    train = _one_epoch(_blend(folder, sources=sources), folder)
    members = train.plan.members
    assert train.plan.mode == "unweighted" and [m.epochs.num_epochs for m in members] == [1, 1]
    assert len(train) == sum(m.length for m in members)
    seen = {(train.source_name(i), s) for i in range(len(train)) for _, s, o, _ in train.view(i)[1] if o == 0}
    lengths = {m.name: m.source.lengths for m in members}
    expected = {(m.name, s) for m in members for s in range(m.begin, m.end) if lengths[m.name][s] > 0}
    assert seen == expected


def test_dry_run_reports_padding_and_cuts(folder) -> None:
    reports = dry_run(blend_from_dict(_blend(folder), base_dir=folder), SampleCounts(500, 20))
    row = reports[0].rows[0]  # train: the first sequences
    lengths = IndexedReader(folder / "web").sequence_lengths[: row.sequences]
    assert row.documents_cut == int(np.count_nonzero(lengths > CAPACITY)) > 0 and row.short_documents_cut == 0
    assert 0 < row.padding < 0.2 and row.per_epoch > 0


def test_packing_kernels_keep_every_piece_within_a_sample() -> None:
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 5 * CAPACITY, 5000).astype(np.int32)
    maps = packing.build_packed_maps(lengths, 0, 5000, 9000, CAPACITY, 11, 100)
    sizes = packing.piece_lengths(lengths, maps.piece_sequence, maps.piece_offset, CAPACITY)
    filled = np.add.reduceat(sizes, maps.sample_index[:-1])
    assert filled.max() <= CAPACITY and filled.min() > 0
    covered = np.zeros(5000, dtype=np.int64)
    np.add.at(covered, maps.piece_sequence, sizes)
    np.testing.assert_array_equal(covered, lengths.astype(np.int64) * len(maps.epoch_samples))
    assert sorted(maps.shuffle_index.tolist()) == list(range(sum(maps.epoch_samples)))


@pytest.mark.parametrize("change, key, fix", [
    ("packing: bestfit", "packing", "packing: best_fit"),
    ("packing_window: 0", "packing_window", "at least 1"),
    ("samples: {pad_id: -3}", "samples.pad_id", "token id of the vocabulary"),
    (f"samples: {{pad_id: {VOCAB}}}", "samples.pad_id", f"below {VOCAB}"),
])
def test_bad_packing_keys_name_file_line_and_fix(folder, change: str, key: str, fix: str) -> None:
    lines = [f"seq_length: {SEQ}", "split: '90,10,0'", "cache_dir: cache", "packing: best_fit", "sources:",
             "  - {name: web, prefix: web}"]
    if change.startswith("packing:"):
        lines[3] = change
    else:
        lines.insert(4, change)
    path = folder / "bad.yaml"
    path.write_text("\n".join(lines) + "\n")
    result = run_cli("corpus", "blend", str(path), "--num-samples", "10", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"bad.yaml:{lines.index(change) + 1}" in result.stderr, result.stderr
    assert key in result.stderr and fix in result.stderr


def test_show_samples_lists_where_each_document_starts(folder) -> None:
    path = folder / "packed.yaml"
    path.write_text(json.dumps(_blend(folder)))
    result = run_cli("corpus", "blend", str(path), "--num-samples", "100", "--show-samples", "0:100", "--json")
    samples = [json.loads(line) for line in result.stdout.splitlines()]
    for sample in samples:
        at = [piece[0] for piece in sample["documents"]]
        assert at[0] == 0 and at == sorted(at)
        assert sum(piece[3] for piece in sample["documents"]) + sample["padding"] == CAPACITY
        assert sample["tokens"].count(PAD_ID) == sample["padding"]
    assert any(s["padding"] for s in samples) and any(len(s["documents"]) > 1 for s in samples)
    text = run_cli("corpus", "blend", str(path), "--num-samples", "100", "--show-samples", "0:3").stdout
    assert "[documents at 0" in text


def test_every_field_of_a_packed_split_changes_its_key(folder) -> None:
    resolved = resolve_blend(blend_from_dict(_blend(folder, sources=[{"name": "web", "prefix": "web"},
                                                                     {"name": "code", "prefix": "code"}]),
                                             base_dir=folder))
    web, code = (source for _, source in resolved.all_sources())

    def key_of(source, begin, end, num_samples, seq_length, extra_token, seed, window) -> str:
        config = blend_from_dict(_blend(folder, seq_length=seq_length, seed=seed, packing_window=window,
                                        samples={"add_extra_token_to_sequence": extra_token}), base_dir=folder)
        return packing.packed_key(config, source, begin, end, num_samples)

    base = {"source": web, "begin": 0, "end": 500, "num_samples": 300, "seq_length": SEQ, "extra_token": True,
            "seed": 7, "window": 64}
    assert_each_field_changes_the_key(key_of, base, {
        "source": code, "begin": 1, "end": 499, "num_samples": 301, "seq_length": SEQ + 2, "extra_token": False,
        "seed": 8, "window": 63})
    # What decides the maps is the sample's capacity, S + extra token: two ways to the same one share an entry.
    assert key_of(**{**base, "seq_length": SEQ + 1, "extra_token": False}) == key_of(**base)


def _packed(lengths: list[int], window: int = 64, capacity: int = 10) -> list[list[tuple[int, int]]]:
    """Each sample of one epoch packed in document order: its pieces as (document, token offset)."""
    lengths_array = np.asarray(lengths, dtype=np.int32)
    documents = np.arange(len(lengths), dtype=np.int32)
    sequence, offset, starts = packing.pack_epoch(lengths_array, documents, capacity, window,
                                                  packing.count_pieces(lengths_array, capacity))
    return [[(int(sequence[p]), int(offset[p])) for p in range(starts[s], starts[s + 1])]
            for s in range(len(starts) - 1)]


@pytest.mark.parametrize("lengths, window, samples", [
    # 8 opens A (2 free), 6 opens B (4 free), 3 fits only B (1 free), then 1 fits both: best fit takes B, the
    # fuller one (first fit would take A: [[3, 0], [2, 1]]).
    ([1, 3, 6, 8], 64, [[3], [2, 1, 0]]),
    # 6 → A (4 free), 5 → B (5 free), 4 fills A exactly (first fit too), the last 4 goes to B.
    ([6, 5, 4, 4], 64, [[0, 2], [1, 3]]),
    # A window of two documents closes its samples before the next window packs: 4 free in each is padding.
    ([6, 5, 4, 4], 2, [[0], [1], [2, 3]]),
    # Equal lengths go in epoch order; an empty document is no piece at all.
    ([3, 3, 0, 3, 3], 64, [[0, 1, 3], [4]]),
])
def test_best_fit_decisions_on_hand_checked_cases(lengths, window, samples) -> None:
    assert [[document for document, _ in sample] for sample in _packed(lengths, window)] == samples


def test_a_long_document_is_cut_into_full_samples_and_its_rest_packed_like_a_short_one() -> None:
    # 23 tokens at capacity 10: pieces at offsets 0 and 10 fill a sample each, the 3 left share one with the 7.
    assert _packed([23, 7]) == [[(0, 0)], [(0, 10)], [(1, 0), (0, 20)]]


def _epoch_orders(maps: packing.PackedMaps, documents: int) -> list[list[int]]:
    """The document order of each epoch (a window of one document packs each alone, in epoch order)."""
    return [maps.piece_sequence[e * documents:(e + 1) * documents].tolist() for e in range(len(maps.epoch_samples))]


def test_each_epoch_has_its_own_order_and_a_seed_repeats_them() -> None:
    lengths = np.full(40, 5, dtype=np.int32)  # 40 documents of 5 tokens, one sample each with a window of one
    maps = packing.build_packed_maps(lengths, 0, 40, 100, 10, 11, 1)
    orders = _epoch_orders(maps, 40)
    assert len(orders) == 3 and all(sorted(order) == list(range(40)) for order in orders)
    assert len({tuple(order) for order in orders}) == 3, "an epoch repeated another's order"
    rng = np.random.RandomState(11)  # NOTE: one shuffle per epoch, in order, then the shuffle index
    for order in orders:
        expected = np.arange(40, dtype=np.int32)
        rng.shuffle(expected)
        assert order == expected.tolist()
    again = packing.build_packed_maps(lengths, 0, 40, 100, 10, 11, 1)
    for name, array in maps.arrays().items():
        np.testing.assert_array_equal(again.arrays()[name], array, err_msg=name)
    other = packing.build_packed_maps(lengths, 0, 40, 100, 10, 12, 1)
    assert _epoch_orders(other, 40) != orders
    assert other.shuffle_index.tolist() != maps.shuffle_index.tolist()


def test_pieces_are_counted_as_packing_cuts_them() -> None:
    # 0 tokens: no piece; up to 10: one; 11-20: two; 21: three (capacity 10)
    assert packing.count_pieces(np.array([0, 1, 10, 11, 20, 21], dtype=np.int32), 10) == 9
    assert packing.min_epochs(100, 30, 10) == 3 and packing.min_epochs(100, 31, 10) == 4  # 300 and 310 tokens
    assert packing.min_epochs(100, None, 10) == 1


@pytest.mark.parametrize("epoch_samples, num_samples, separate, before", [
    ((10,), 5, False, 0),  # one epoch is never separate, however few of its samples are asked
    ((10, 10), 12, True, 10),  # 2 of the last epoch's 10: under 80% of it
    ((10, 10, 10), 25, True, 20),
    ((10, 10, 10), 28, False, 20),  # 8 of 10: 80% exactly is not under it
    ((10, 10, 20), 35, True, 20),  # 15 of the last epoch's 20 (of an earlier one's 10 it would be over 80%)
    ((10, 10), None, False, 10),  # no count: every epoch whole
])
def test_the_last_packed_epoch_is_separate_below_80_percent_of_its_samples(epoch_samples, num_samples, separate,
                                                                            before) -> None:
    assert packing.epoch_plan(1000, epoch_samples, num_samples) == maps_module.EpochPlan(
        1000, len(epoch_samples), separate, before)


def test_a_split_packs_its_own_documents_in_just_enough_epochs_and_shuffles_a_short_last_one_apart() -> None:
    lengths = np.full(60, 5, dtype=np.int32)  # a window of one document: one sample per document
    valid = packing.build_packed_maps(lengths, 40, 60, 40, 10, 3, 1)  # 20 documents, 40 samples: two epochs
    assert valid.epoch_samples == (20, 20)
    assert sorted(valid.piece_sequence.tolist()) == sorted(list(range(40, 60)) * 2)
    assert max(valid.shuffle_index[:20]) >= 20  # both whole epochs shuffled together
    shorter = packing.build_packed_maps(lengths, 40, 60, 43, 10, 3, 1)  # 3 of a third epoch: apart
    assert shorter.epoch_samples == (20, 20, 20)
    assert sorted(shorter.shuffle_index[:40].tolist()) == list(range(40))
    assert sorted(shorter.shuffle_index[40:].tolist()) == list(range(40, 60))
    assert shorter.shuffle_index[:40].tolist() != list(range(40))


def test_a_split_of_one_token_packs_and_one_of_none_is_refused() -> None:
    assert packing.build_packed_maps(np.array([0, 1], dtype=np.int32), 0, 2, None, 10, 3, 4).epoch_samples == (1,)
    with pytest.raises(ValueError, match="no tokens"):
        packing.build_packed_maps(np.array([0, 0], dtype=np.int32), 0, 2, None, 10, 3, 4)


def test_packing_stats_of_hand_checked_samples() -> None:
    """[23, 5] at capacity 10: pieces 0@0 and 0@10 fill a sample each, 0@20 (3) and 1 (5) share a third."""
    lengths = np.array([23, 5], dtype=np.int32)
    packed = packing.build_packed_maps(lengths, 0, 2, None, 10, 3, 64)
    assert packing.packing_stats(packed.arrays(), lengths, 10, 3) == packing.PackingStats(pytest.approx(2 / 30), 1, 0)
    assert packing.packing_stats(packed.arrays(), lengths, 10, 0) == packing.PackingStats(0.0, 1, 0)
    last = int(np.flatnonzero(packed.shuffle_index == 2)[0])  # the padded sample's place in the shuffled order
    assert packing.packing_stats(packed.arrays(), lengths, 10, last + 1).padding == pytest.approx(2 / (10 * (last + 1)))
