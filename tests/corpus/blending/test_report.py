"""Dry runs: what `corpus blend FILE` reports, computed without writing index maps."""

from __future__ import annotations

from pathlib import Path

from corpus.blending.datasets import SampleCounts, build_split_datasets
from corpus.blending.report import dry_run, format_report, report_to_json
from corpus.blending.schema import blend_from_dict
from tests.corpus.blending.blend_data import write_random

SOURCES = [{"name": "web", "prefix": "web", "weight": 3}, {"name": "code", "prefix": "code", "weight": 1}]


def _blend(folder: Path, **changes) -> object:
    write_random(folder / "web", 300, seed=1)
    write_random(folder / "code", 100, seed=2)
    data = {"seq_length": 16, "seed": 2, "split": "90,10,0", "cache_dir": "cache", "sources": SOURCES, **changes}
    return blend_from_dict(data, base_dir=folder)


def test_a_planned_dry_run_matches_the_built_datasets(tmp_path: Path) -> None:
    config = _blend(tmp_path)
    reports = dry_run(config, SampleCounts(2000, 100))
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").glob("gpt-*"))
    built = build_split_datasets(config, SampleCounts(2000, 100))
    for report in reports:
        dataset = built.split(report.split)
        assert report.size == len(dataset)
        taken = {}
        for index in range(len(dataset)):
            taken[dataset.source_name(index)] = taken.get(dataset.source_name(index), 0) + 1
        assert {row.name: row.samples for row in report.rows} == taken
        for row, member in zip(report.rows, dataset.plan.members):
            assert row.epochs == member.epochs.num_epochs and row.built == member.length
            assert row.sequences == member.end - member.begin and row.tokens == member.tokens
    assert abs(reports[0].rows[0].share - 0.75) < 0.01 and reports[0].rows[0].weight == 0.75
    text = format_report(reports)
    assert "weighted blend: 2,000 samples asked, dataset length 2,000" in text
    assert text.splitlines()[0].split()[:3] == ["split", "source", "sequences"]  # what megatron-core splits by
    assert report_to_json(reports)[1]["split"] == "valid"


def test_without_counts_weighted_splits_list_one_epoch_and_unweighted_ones_plan_it(tmp_path: Path) -> None:
    inventory = dry_run(_blend(tmp_path), None)
    assert [r.mode for r in inventory] == ["inventory", "inventory"]
    assert all(row.samples is None and row.per_epoch > 0 for r in inventory for row in r.rows)
    per_split = {"train": SOURCES, "valid": [{"name": "web", "prefix": "web"}, {"name": "code", "prefix": "code"}]}
    reports = dry_run(_blend(tmp_path, split=None, sources=per_split), None)
    assert [r.mode for r in reports] == ["inventory", "unweighted"]
    valid = reports[1]
    assert [row.samples for row in valid.rows] == [row.per_epoch for row in valid.rows] and valid.size == sum(
        row.per_epoch for row in valid.rows)
    assert "pass --num-samples" in format_report(reports)
