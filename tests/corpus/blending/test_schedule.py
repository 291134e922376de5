"""Weight schedules: a one-phase schedule is today's blend byte for byte, each phase draws what it schedules to
within one sample per source, each source's own order is untouched, the schedule is part of the cache key and the
fingerprint, every mistake in one is located in the file, and the loader resumes a scheduled blend mid-phase."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from corpus.blending.datasets import SampleCounts, build_split_datasets
from corpus.blending.loader import BlendLoader
from corpus.blending.resolve import resolve_blend
from corpus.blending.schema import blend_from_dict, load_blend
from corpus.core.errors import ConfigError
from tests.corpus.blending.blend_data import THREE_SOURCES as NAMES
from tests.corpus.blending.blend_data import write_three_sources


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_three_sources(tmp_path_factory.mktemp("schedule"))


def _blend(folder: Path, schedule: list[dict] | None, weights: tuple[float, ...] | None = None) -> dict:
    sources = [{"name": name, "prefix": f"data/{name}", **({"weight": weights[i]} if weights else {})}
               for i, name in enumerate(NAMES)]
    return {"seq_length": 16, "seed": 5, "split": "90,10,0", "cache_dir": str(folder / "cache"), "sources": sources,
            **({"schedule": schedule} if schedule else {})}


def _datasets(folder: Path, data: dict, train: int = 3000, valid: int = 0):
    return build_split_datasets(blend_from_dict(data, base_dir=folder), SampleCounts(train, valid))


def test_a_one_phase_schedule_is_the_weighted_blend_byte_for_byte(folder):
    weights = (0.5, 0.3, 0.2)
    fixed = _datasets(folder, _blend(folder, None, weights), valid=200)
    scheduled = _datasets(folder, _blend(folder, [{"weights": dict(zip(NAMES, weights))}]), valid=200)
    assert scheduled.train.plan.mode == "scheduled" and fixed.train.plan.mode == "weighted"
    for name in ("_dataset_index", "_dataset_sample_index"):
        mine, theirs = getattr(scheduled.train, name), getattr(fixed.train, name)
        assert mine.dtype == theirs.dtype and mine.tobytes() == theirs.tobytes()
    assert [m.num_samples for m in scheduled.train.plan.members] == [m.num_samples for m in fixed.train.plan.members]
    assert scheduled.valid.tokens_of(17).tolist() == fixed.valid.tokens_of(17).tolist()  # the first phase's mix


SCHEDULES = {
    "step": [{"until": 0.5, "weights": {"web": 0.7, "code": 0.2, "py": 0.1}},
             {"weights": {"web": 0.1, "code": 0.2, "py": 0.7}}],
    "ramps": [{"until_samples": 1000, "weights": {"web": 0.6, "code": 0.3, "py": 0.1}},
              {"until": 0.7, "weights": {"web": 0.2, "code": 0.3, "py": 0.5}, "ramp": "linear"},
              {"until_tokens": 40_000, "weights": {"web": 0.0, "code": 0.1, "py": 0.9}, "ramp": "linear"},
              {"weights": {"web": 1, "code": 1, "py": 1}}],
    "odd-sizes": [{"until_samples": 7, "weights": {"web": 3, "code": 2, "py": 5}},
                  {"until_samples": 2991, "weights": {"web": 0.01, "code": 0.98, "py": 0.01}, "ramp": "linear"},
                  {"weights": {"web": 0.0, "code": 0.0, "py": 1.0}}],
}


@pytest.mark.parametrize("name", SCHEDULES)
def test_each_phase_draws_its_schedule_within_one_sample_per_source(folder, name):
    train = _datasets(folder, _blend(folder, SCHEDULES[name])).train
    schedule, index = train.plan.schedule, np.asarray(train._dataset_index)
    assert schedule.size == len(train) == 3000 and schedule.num_phases == len(SCHEDULES[name])
    for phase in range(schedule.num_phases):
        first, stop = schedule.bounds[phase], schedule.bounds[phase + 1]
        drawn = np.bincount(index[first:stop], minlength=len(NAMES))
        expected = schedule.expected_counts(stop) - schedule.expected_counts(first)
        assert drawn.sum() == stop - first
        assert np.abs(drawn - expected).max() <= 1, (phase, drawn, expected)
        unweighted = (schedule.start[phase] == 0) & (schedule.end[phase] == 0)
        assert not drawn[unweighted].any()  # a weight of 0 throughout a phase: never drawn in it
    # each source's samples are taken in its own order: 0, 1, 2… across the phases
    for source in range(len(NAMES)):
        taken = np.asarray(train._dataset_sample_index)[index == source]
        assert taken.tolist() == list(range(len(taken)))


def test_a_ramp_moves_the_mix_gradually(folder):
    """Over a linear ramp from 0.9 to 0.1, the source's share falls steadily, quarter after quarter."""
    ramp = [{"until": 0.2, "weights": {"web": 0.9, "code": 0.05, "py": 0.05}},
            {"weights": {"web": 0.1, "code": 0.45, "py": 0.45}, "ramp": "linear"}]
    train = _datasets(folder, _blend(folder, ramp)).train
    index = np.asarray(train._dataset_index)[600:]
    quarters = [float(np.mean(part == 0)) for part in np.array_split(index, 4)]
    assert quarters == sorted(quarters, reverse=True)
    assert quarters[0] == pytest.approx(0.8, abs=0.02) and quarters[-1] == pytest.approx(0.2, abs=0.02)


def test_a_source_ramping_up_from_zero_waits_for_its_first_expected_sample(folder):
    """Ramping from 0 to 1 over 1,000 samples, web's expected draws reach one half at sample ~32: not sooner."""
    ramp = [{"until_samples": 1000, "weights": {"web": 0, "code": 1, "py": 1}},
            {"until_samples": 2000, "weights": {"web": 1, "code": 0, "py": 0}, "ramp": "linear"},
            {"weights": {"web": 1, "code": 1, "py": 1}}]
    index = np.asarray(_datasets(folder, _blend(folder, ramp)).train._dataset_index)
    assert not (index[:1000] == 0).any()
    assert 25 <= int(np.argmax(index[1000:] == 0)) <= 45


def test_the_schedule_is_in_the_cache_key_and_the_fingerprint(folder):
    """Two phases swapped draw the same samples of each source overall (the same source maps), in another order:
    only the blended index is rebuilt, and it differs."""
    first = _datasets(folder, _blend(folder, SCHEDULES["step"]))
    assert _datasets(folder, _blend(folder, SCHEDULES["step"])).train.maps_built == 0  # the same schedule: cached
    swapped = [{**SCHEDULES["step"][0], "weights": SCHEDULES["step"][1]["weights"]},
               {"weights": SCHEDULES["step"][0]["weights"]}]
    other = _datasets(folder, _blend(folder, swapped))
    assert other.train.maps_built == 1
    assert other.fingerprint != first.fingerprint
    assert np.asarray(other.train._dataset_index)[:1500].tolist() == np.asarray(first.train._dataset_index)[
        1500:].tolist()


def test_the_loader_takes_a_schedule_and_resumes_mid_phase(folder):
    train = _datasets(folder, _blend(folder, SCHEDULES["step"])).train
    loader = BlendLoader(train, micro_batch_size=4, dp_rank=1, dp_size=2, blend_fingerprint="x")
    batches = [batch["source_ids"].tolist() for batch in loader]
    first_half = [s for batch in batches[: len(batches) // 2] for s in batch]
    second_half = [s for batch in batches[len(batches) // 2:] for s in batch]
    assert np.mean(np.array(first_half) == 0) > 0.6 and np.mean(np.array(second_half) == 2) > 0.6
    resumed = BlendLoader(train, micro_batch_size=4, dp_rank=1, dp_size=2, consumed_samples=1496,
                          blend_fingerprint="x")
    assert [batch["source_ids"].tolist() for batch in resumed] == batches[1496 // 8:]


def test_a_resume_under_another_schedule_repeats_and_skips_nothing(folder):
    """Megatron #457: a run reweighted on resume (allowed) goes on with each source after the samples it gave. Every
    source is read less than once here, so its maps are the same under both schedules, and over the two parts each
    source gives its first samples once each."""
    before = _datasets(folder, _blend(folder, SCHEDULES["step"]), train=200).train
    after = _datasets(folder, _blend(folder, [{"until": 0.3, "weights": {"web": 0.2, "code": 0.6, "py": 0.2}},
                                              {"weights": {"web": 0.5, "code": 0.1, "py": 0.4}}]), train=200).train
    assert all(m.epochs.num_epochs == 1 for m in before.plan.members + after.plan.members)
    first = BlendLoader(before, 8, blend_fingerprint="before")
    for _, _ in zip(range(10), first):
        pass
    second = BlendLoader(after, 8, blend_fingerprint="after")
    second.load_state_dict(first.state_dict(), allow_blend_change=True)
    assert len(list(second)) == 15
    read = [before.locate(i) for i in range(80)] + [after.locate(i) for i in range(80, 200)]
    for member, name in enumerate(NAMES):
        given = sorted(sample for source, sample in read if source == member)
        assert given == list(range(len(given))), name
    assert second.state_dict()["source_samples"] == {name: sum(source == member for source, _ in read)
                                                     for member, name in enumerate(NAMES)}


def _error(folder: Path, text: str, **counts: int) -> ConfigError:
    path = folder / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        config = load_blend(path)
        build_split_datasets(resolve_blend(config), SampleCounts(counts.get("train", 1000)))
    return caught.value


HEAD = """\
seq_length: 16
split: "90,10,0"
sources:
  - {name: web, prefix: data/web}
  - {name: code, prefix: data/code}
schedule:
"""


@pytest.mark.parametrize("phases, line, key, words", [
    ("  - {until: 0.8, weights: {web: 1, code: 1}}\n  - {until: 0.5, weights: {web: 1, code: 2}}\n",
     8, "schedule[1].until", "sort them by their end"),
    ("  - {until: 0.8, weights: {web: 1}}\n  - {weights: {web: 1, code: 2}}\n",
     7, "schedule[0].weights", "no weight for code"),
    ("  - {until: 0.8, weights: {web: 1, code: 1}}\n  - weights: {web: 1, code: -2}\n",
     8, "schedule[1].weights.code", "negative"),
    ("  - {until: 0.8, weights: {web: 1, code: 1}, ramp: linear}\n  - {weights: {web: 1, code: 2}}\n",
     7, "schedule[0].ramp", "no previous phase"),
    ("  - {until_samples: 5000, weights: {web: 1, code: 1}}\n  - {weights: {web: 1, code: 2}}\n",
     7, "schedule[0].until_samples", "ends at sample 5,000 but the run has 1,000"),
    ("  - {until_tokens: 12000, weights: {web: 1, code: 1}}\n  - {until_samples: 700, weights: {web: 1, code: 2}}\n"
     "  - {weights: {web: 1, code: 2}}\n", 8, "schedule[1].until_samples", "not after the previous phase's end (750)"),
    ("  - {until: 0.8, weights: {web: 1, code: 1}}\n  - {until: 0.9, weights: {web: 1, code: 2}}\n",
     8, "schedule[1].until", "leave its end out"),
    ("  - {until: 0.8, weights: {web: 1, cod: 1}}\n  - {weights: {web: 1, code: 2}}\n",
     7, "schedule[0].weights.cod", "no train source is named 'cod'"),
    ("  - {until: 0.8, until_samples: 9, weights: {web: 1, code: 1}}\n  - {weights: {web: 1, code: 2}}\n",
     7, "schedule[0].until_samples", "keep one"),
    ("  - {weights: {web: 1, code: 1}}\n  - {weights: {web: 1, code: 2}}\n",
     7, "schedule[0]", "only the last phase may leave its end out"),
    ("  - {until: 1.5, weights: {web: 1, code: 1}}\n", 7, "schedule[0].until", "(0, 1]"),
    ("  - {weights: {web: 0, code: 0}}\n", 7, "schedule[0].weights", "every weight of this phase is 0"),
], ids=["out-of-order", "weight-missing", "weight-negative", "ramp-first", "past-the-run", "units-out-of-order",
        "last-ends-early", "unknown-source", "two-ends", "open-ended-middle", "share-above-one", "all-zero"])
def test_schedule_mistakes_name_file_line_key_and_fix(folder, phases, line, key, words):
    error = _error(folder, HEAD + phases)
    message = str(error)
    assert message.startswith(f"{folder / 'bad.yaml'}:{line}: {key}:"), message
    assert words in message


def test_a_source_weight_beside_a_schedule_is_refused(folder):
    text = (HEAD.replace("prefix: data/code}", "prefix: data/code, weight: 0.3}").replace(
        "prefix: data/web}", "prefix: data/web, weight: 0.7}") + "  - {weights: {web: 1, code: 1}}\n")
    message = str(_error(folder, text))
    assert message.startswith(f"{folder / 'bad.yaml'}:4: sources[0].weight:") and "remove this weight" in message


def test_a_saved_blend_keeps_its_schedule(folder, tmp_path):
    from corpus.blending.schema import dump_blend

    config = blend_from_dict(_blend(folder, SCHEDULES["ramps"]), base_dir=folder)
    dump_blend(config, tmp_path / "saved.yaml")
    assert yaml.safe_load((tmp_path / "saved.yaml").read_text())["schedule"][1]["ramp"] == "linear"
    assert resolve_blend(load_blend(tmp_path / "saved.yaml")).fingerprint == resolve_blend(config).fingerprint
