"""The index-map pieces against megatron-core's own functions and compiled helpers."""

from __future__ import annotations

import numpy as np
import pytest

from corpus.blending import index_maps as maps
from corpus.blending.datasets import SampleCounts, build_split_datasets
from corpus.blending.schema import blend_from_dict
from corpus.indexed import IndexedWriter

SPLITS = ["99,1,0", "969, 30, 1", "1", "80,20", "0,1,0", "33,33,34", "1.5,0.25,0.25", "98,2,0", "100,0,0", "7,0,3"]


@pytest.mark.parametrize("split", SPLITS)
def test_split_ranges_equal_megatron(split: str, megatron_datasets) -> None:
    from megatron.core.datasets.blended_megatron_dataset_config import (
        convert_split_vector_to_split_matrix,
        parse_and_normalize_split,
    )

    expected = convert_split_vector_to_split_matrix(parse_and_normalize_split(split))
    assert maps.split_matrix(split) == expected
    for bookend in filter(None, expected):
        for count in (1, 2, 3, 7, 50, 51, 101, 999, 123_457):
            assert maps.split_range(bookend, count) == (int(round(bookend[0] * float(count))),
                                                        int(round(bookend[1] * float(count))))


def test_sample_index_equals_megatron_helper(megatron_datasets) -> None:
    from megatron.core.datasets import helpers

    rng = np.random.default_rng(1)
    for trial in range(150):
        count = int(rng.integers(1, 300))
        lengths = rng.integers(0 if trial % 3 == 0 else 1, 60, count).astype(np.int32)
        if lengths.sum() < 3:
            continue
        seq_length, extra, epochs = int(rng.integers(2, 40)), int(rng.integers(0, 2)), int(rng.integers(1, 4))
        doc_index = np.tile(np.arange(count, dtype=np.int32), epochs)
        np.random.RandomState(trial).shuffle(doc_index)
        tokens = int(lengths.sum())
        ours = maps.sample_index(lengths, doc_index, seq_length, epochs * tokens, extra)
        theirs = helpers.build_sample_idx(lengths, doc_index, seq_length, epochs, tokens, True, bool(extra))
        assert ours.dtype == theirs.dtype
        np.testing.assert_array_equal(ours, theirs, err_msg=f"trial {trial}")


def test_blending_indices_equal_megatron_helpers(megatron_datasets) -> None:
    from megatron.core.datasets import helpers

    rng = np.random.default_rng(2)
    for trial in range(100):
        weights = maps.normalize(list(rng.random(int(rng.integers(1, 7)))))
        size = int(rng.integers(0, 3000))
        theirs = np.zeros(size, np.int16), np.zeros(size, np.int64)
        helpers.build_blending_indices(*theirs, weights, len(weights), size, False)
        mine = maps.blending_indices(weights, size)
        np.testing.assert_array_equal(mine.dataset_index, theirs[0], err_msg=f"trial {trial}")
        np.testing.assert_array_equal(mine.dataset_sample_index, theirs[1], err_msg=f"trial {trial}")
        np.testing.assert_array_equal(mine.counts, np.bincount(theirs[0], minlength=len(weights)))
        sizes = [int(s) for s in rng.integers(1, 80, len(weights))]
        theirs = np.zeros(sum(sizes), np.int16), np.zeros(sum(sizes), np.int64)
        helpers.build_exhaustive_blending_indices(*theirs, np.asarray(sizes, np.int64), len(sizes))
        mine = maps.exhaustive_blending_indices(sizes)
        np.testing.assert_array_equal(mine.dataset_index, theirs[0], err_msg=f"exhaustive trial {trial}")
        np.testing.assert_array_equal(mine.dataset_sample_index, theirs[1], err_msg=f"exhaustive trial {trial}")


def test_blend_counts_use_megatron_rounding() -> None:
    assert maps.blend_counts([0.7, 0.3], 11) == [8, 4]
    assert maps.blend_counts([0.7, 0.3], 1000, maps.SURPLUS) == [704, 302]
    assert maps.blend_counts([0.5, 0.5], 1, maps.SURPLUS) == [2, 2]  # ceil(1 * 1.005)


def test_epochs_count_the_extra_token_and_separate_the_short_last_epoch() -> None:
    # 100 samples of 16 need 1601 tokens: two epochs of 800 are one token short.
    assert maps.num_epochs(800, 100, 16, 1) == 3 and maps.num_epochs(800, 100, 16, 0) == 2
    plan = maps.plan_epochs(800, 100, 16, 1)
    assert plan.separate_final_epoch and plan.num_samples_sans_final_epoch == (1600 - 1) // 16
    assert not maps.plan_epochs(800, 149, 16, 1).separate_final_epoch  # 50 of 49 samples per epoch: full


@pytest.mark.parametrize("extra", [True, False])
def test_sample_count_on_an_epoch_boundary_equals_megatron(extra: bool, tmp_path, megatron_datasets) -> None:
    """n * S == 2 * T exactly: the extra token decides between two and three epochs."""
    with IndexedWriter(tmp_path / "even", np.uint16) as writer:
        writer.add_documents(np.arange(50 * 16, dtype=np.uint16) % 997 + 1, np.full(50, 16))
        writer.finalize()
    api = megatron_datasets

    class Tokenizer:
        eod, pad, vocab_size, unique_identifiers = 0, -1, 1000, {"class": "boundary"}

    config = api.GPTDatasetConfig(random_seed=4, sequence_length=16, blend=([str(tmp_path / "even")], None),
                                  split="100,0,0", tokenizer=Tokenizer(), reset_position_ids=False,
                                  reset_attention_mask=False, eod_mask_loss=False, create_attention_mask=False,
                                  add_extra_token_to_sequence=extra, path_to_cache=str(tmp_path / "mc"))
    reference = api.BlendedMegatronDatasetBuilder(api.GPTDataset, [100, 0, 0], lambda: True, config).build()[0]
    blend = {"seq_length": 16, "seed": 4, "split": "100,0,0", "cache_dir": "cache",
             "samples": {"add_extra_token_to_sequence": extra}, "sources": [{"name": "even", "prefix": "even"}]}
    ours = build_split_datasets(blend_from_dict(blend, base_dir=tmp_path), SampleCounts(100)).train
    assert ours.plan.members[0].epochs.num_epochs == (3 if extra else 2)
    assert len(ours) == len(reference)
    for index in range(len(ours)):
        np.testing.assert_array_equal(ours.tokens_of(index), reference._query_document_sample_shuffle_indices(index)[0])


def test_each_epoch_is_shuffled_anew_and_a_seed_repeats_the_maps() -> None:
    """Megatron tiles the documents over the epochs and shuffles them together: epochs differ in order, the
    separate last epoch is a shuffle of its own, the same seed gives the same maps and another seed other ones."""
    lengths = np.full(50, 10, dtype=np.int32)
    built = maps.build_gpt_maps(lengths, 0, 50, 130, 9, 5, 1)  # 130 samples, 55 per epoch: a short third epoch
    epochs = built.document_index.reshape(3, 50)
    assert len({tuple(epoch) for epoch in epochs}) == 3
    assert sorted(epochs[2].tolist()) == list(range(50))  # the separate last epoch holds every document once
    assert sorted(epochs[:2].ravel().tolist()) == sorted(list(range(50)) * 2)
    assert not all(sorted(epoch.tolist()) == list(range(50)) for epoch in epochs[:2])  # shuffled together
    again, other = maps.build_gpt_maps(lengths, 0, 50, 130, 9, 5, 1), maps.build_gpt_maps(lengths, 0, 50, 130, 9, 6, 1)
    for name, array in built.arrays().items():
        np.testing.assert_array_equal(again.arrays()[name], array, err_msg=name)
    assert not np.array_equal(other.document_index, built.document_index)
    assert not np.array_equal(other.shuffle_index, built.shuffle_index)
