"""Every sample we return equals the one megatron-core 0.16.1's BlendedMegatronDatasetBuilder
returns for the same sources, weights, split, seed, sequence length and sample counts."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from corpus.blending.datasets import SampleCounts, build_split_datasets
from corpus.blending.index_maps import SPLIT_NAMES
from corpus.blending.schema import blend_from_dict
from corpus.indexed.merge import merge
from tests.corpus.blending.blend_data import EOD, VOCAB, write_random


class _Tokenizer:
    """What GPTDatasetConfig needs of a tokenizer."""

    eod = EOD
    pad = -1
    vocab_size = VOCAB
    unique_identifiers = {"class": "conformance-tokenizer"}


@dataclass
class Case:
    """One configuration: ``sources`` are (name, documents, weight); ``per_split`` replaces split."""

    id: str
    sources: list[tuple[str, int, float | None]]
    split: str | None
    counts: tuple[int, int, int]
    seq_length: int
    seed: int
    per_split: dict[str, list[str]] | None = None
    options: dict = field(default_factory=dict)


CASES = [
    Case("one-source-one-epoch", [("a", 300, None)], "99,1,0", (40, 0, 0), 32, 1234),
    Case("one-source-many-epochs", [("a", 120, None)], "90,10,0", (900, 30, 0), 16, 3),
    Case("one-source-weighted", [("a", 200, 1.0)], "99,1,0", (150, 0, 0), 16, 1),
    Case("two-sources", [("web", 300, 0.7), ("code", 150, 0.3)], "90,10,0", (700, 40, 0), 16, 1234),
    Case("three-sources-raw-weights", [("a", 200, 5), ("b", 90, 3), ("c", 60, 2)], "80,15,5", (2500, 300, 77), 8, 7),
    Case("one-sample", [("a", 100, 0.5), ("b", 100, 0.5)], "100,0,0", (1, 0, 0), 64, 99),
    Case("unweighted-capped", [("a", 250, None), ("b", 80, None)], "80,20,0", (300, 40, 0), 16, 5),
    Case("no-extra-token", [("a", 200, 0.6), ("b", 100, 0.4)], "95,5,0", (800, 20, 0), 16, 11,
         options={"add_extra_token_to_sequence": False}),
    Case("per-split", [("a", 200, 0.6), ("b", 120, 0.4), ("c", 80, None)], None, (600, 90, 50), 16, 21,
         per_split={"train": ["a", "b"], "valid": ["c"], "test": ["a", "c"]}),
]


def _source_entries(case: Case, names: list[str], weighted: bool) -> list[dict]:
    by_name = {name: weight for name, _, weight in case.sources}
    return [{"name": n, "prefix": n, **({"weight": by_name[n]} if weighted and by_name[n] else {})} for n in names]


def _our_blend(case: Case, folder) -> dict:
    data = {"seq_length": case.seq_length, "seed": case.seed, "cache_dir": "cache", "samples": case.options}
    if case.per_split:
        data["sources"] = {split: _source_entries(case, names, split == "train") for split,
                           names in case.per_split.items()}
    else:
        data["split"] = case.split
        data["sources"] = _source_entries(case, [n for n, _, _ in case.sources], True)
    return data


def _megatron_blend(case: Case, folder, names: list[str], weighted: bool):
    weights = [w for n, _, w in case.sources if n in names]
    return [str(folder / n) for n in names], (weights if weighted and weights[0] is not None else None)


def _megatron(api, case: Case, folder, **options):
    config = dict(random_seed=case.seed, sequence_length=case.seq_length, tokenizer=_Tokenizer(),
                  reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
                  create_attention_mask=False,
                  path_to_cache=str(folder / "megatron-cache"))
    config.update(case.options)
    config.update(options)
    if case.per_split:
        config["blend_per_split"] = [_megatron_blend(case, folder, case.per_split[s],
                                                     s == "train") for s in SPLIT_NAMES]
    else:
        config["blend"] = _megatron_blend(case, folder, [n for n, _, _ in case.sources], True)
        config["split"] = case.split
    config = api.GPTDatasetConfig(**config)
    return api.BlendedMegatronDatasetBuilder(api.GPTDataset, list(case.counts), lambda: True, config).build()


def _megatron_tokens(api, dataset, index: int) -> np.ndarray:
    if isinstance(dataset, api.BlendedDataset):
        return _megatron_tokens(api, dataset.datasets[dataset.dataset_index[index]],
                                dataset.dataset_sample_index[index])
    return dataset._query_document_sample_shuffle_indices(index)[0]


def _write_sources(case: Case, folder) -> None:
    for number, (name, documents, _) in enumerate(case.sources):
        write_random(folder / name, documents, seed=number + 10 * case.seed)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_sample_equals_megatron(case: Case, tmp_path, megatron_datasets) -> None:
    _write_sources(case, tmp_path)
    theirs = _megatron(megatron_datasets, case, tmp_path)
    ours = build_split_datasets(blend_from_dict(_our_blend(case, tmp_path), base_dir=tmp_path),
                                SampleCounts(*case.counts), required=())
    compared = 0
    for split, reference in zip(SPLIT_NAMES, theirs):
        mine = ours.split(split)
        if reference is None or case.counts[SPLIT_NAMES.index(split)] == 0:
            assert mine is None or case.counts[SPLIT_NAMES.index(split)] == 0
            continue
        assert len(mine) == len(reference), split
        for index in range(len(mine)):
            expected = _megatron_tokens(megatron_datasets, reference, index)
            np.testing.assert_array_equal(mine.tokens_of(index), expected, err_msg=f"{split} sample {index}")
        compared += len(mine)
    assert compared >= sum(case.counts) > 0


def test_glob_source_equals_megatron_on_the_merged_file(tmp_path, megatron_datasets) -> None:
    """A glob over shards gives exactly what megatron-core gives for the file `corpus merge` makes."""
    for shard in range(4):
        write_random(tmp_path / "shards" / f"code-{shard:05d}-of-00004_text_document", 40 + 13 * shard, seed=shard)
    merge([str(tmp_path / "shards" / "*_text_document")], str(tmp_path / "merged"))
    write_random(tmp_path / "web", 200, seed=9)
    case = Case("glob", [("web", 0, 0.6), ("merged", 0, 0.4)], "90,10,0", (1200, 60, 0), 16, 5)
    theirs = _megatron(megatron_datasets, case, tmp_path)
    blend = {"seq_length": 16, "seed": 5, "split": "90,10,0", "cache_dir": "cache",
             "sources": [{"name": "web", "prefix": "web", "weight": 0.6},
                         {"name": "code", "prefix": "shards/*_text_document", "weight": 0.4}]}
    ours = build_split_datasets(blend_from_dict(blend, base_dir=tmp_path), SampleCounts(*case.counts))
    for split, reference in (("train", theirs[0]), ("valid", theirs[1])):
        mine = ours.split(split)
        assert len(mine) == len(reference)
        for index in range(len(mine)):
            np.testing.assert_array_equal(mine.tokens_of(index), _megatron_tokens(megatron_datasets, reference, index))


@pytest.mark.parametrize("options", [
    {},
    {"eod_mask_loss": True},
    {"eod_mask_loss": True, "reset_position_ids": True, "reset_attention_mask": True},
    {"add_extra_token_to_sequence": False, "reset_position_ids": True},
], ids=["plain", "eod-mask", "document-reset", "no-extra-token"])
def test_sample_arrays_equal_megatron(options: dict, tmp_path, megatron_datasets) -> None:
    """tokens, labels, loss_mask and position_ids equal megatron's __getitem__; cu_seqlens spans
    exactly the blocks of its reset attention mask."""
    case = Case("arrays", [("a", 150, 0.5), ("b", 90, 0.5)], "100,0,0", (200, 0, 0), 32, 8, options=options)
    _write_sources(case, tmp_path)
    reference = _megatron(megatron_datasets, case, tmp_path, create_attention_mask=True)[0]
    mine = build_split_datasets(blend_from_dict(_our_blend(case, tmp_path), base_dir=tmp_path), SampleCounts(200)).train
    for index in range(len(mine)):
        expected, ours = reference[index], mine[index]
        for name in ("tokens", "labels", "loss_mask", "position_ids"):
            np.testing.assert_array_equal(ours[name], expected[name].numpy(), err_msg=f"{name} of sample {index}")
        assert ours["loss_mask"].dtype == np.float32 and ours["tokens"].dtype == np.int64
        if options.get("reset_attention_mask"):
            allowed = _mask_from_cu_seqlens(ours["cu_seqlens"], case.seq_length)
            np.testing.assert_array_equal(allowed, ~expected["attention_mask"][0].numpy())
        else:
            assert "cu_seqlens" not in ours


def _mask_from_cu_seqlens(cu_seqlens: np.ndarray, length: int) -> np.ndarray:
    """Causal attention within each segment (True = may attend)."""
    segment = np.zeros(length, dtype=np.int64)
    segment[cu_seqlens[1:-1]] = 1
    segment = np.cumsum(segment)
    return np.tril(np.ones((length, length), dtype=bool)) & (segment[:, None] == segment[None, :])


def _one_phase(data: dict) -> dict:
    """``data``'s weights moved into a one-phase schedule."""
    weights = {source["name"]: source.pop("weight") for source in data["sources"]}
    return {**data, "schedule": [{"weights": weights}]}


@pytest.mark.parametrize("case", [c for c in CASES if c.id in ("two-sources", "three-sources-raw-weights")],
                         ids=lambda c: c.id)
def test_a_one_phase_schedule_equals_megatron(case: Case, tmp_path, megatron_datasets) -> None:
    """Megatron's blend is a weight schedule of one phase: every train sample, valid sample (the first phase's mix)
    and test sample is megatron-core's for the same weights."""
    _write_sources(case, tmp_path)
    theirs = _megatron(megatron_datasets, case, tmp_path)
    ours = build_split_datasets(blend_from_dict(_one_phase(_our_blend(case, tmp_path)), base_dir=tmp_path),
                                SampleCounts(*case.counts), required=())
    assert ours.train.plan.mode == "scheduled"
    for split, reference, count in zip(SPLIT_NAMES, theirs, case.counts):
        mine = ours.split(split)
        if not count:
            continue
        assert len(mine) == len(reference), split
        for index in range(len(mine)):
            np.testing.assert_array_equal(mine.tokens_of(index), _megatron_tokens(megatron_datasets, reference, index),
                                          err_msg=f"{split} sample {index}")
