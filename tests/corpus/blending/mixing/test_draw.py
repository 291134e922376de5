"""Drawing an online-mixed split as it is read: with weights that never change it is Megatron's greedy blend,
each change of weights draws within one sample per source of them, each source's samples come in its own order,
and a user's own loop mixes through the documented calls (``online_mixer``, ``after_step``, ``set_weights``),
resuming from a loader state exactly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from corpus.blending import index_maps as maps
from corpus.blending.datasets import SampleCounts, build_split_datasets
from corpus.blending.errors import DrawError
from corpus.blending.loader import BlendLoader
from corpus.blending.schema import blend_from_dict
from tests.corpus.blending.blend_data import THREE_SOURCES as NAMES
from tests.corpus.blending.blend_data import write_three_sources

WEIGHTS = (0.5, 0.3, 0.2)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_three_sources(tmp_path_factory.mktemp("online"))


def online(folder: Path, samples: int = 2000, **mixing):
    sources = [{"name": n, "prefix": f"data/{n}", "weight": w} for n, w in zip(NAMES, WEIGHTS)]
    data = {"seq_length": 16, "seed": 5, "split": "90,10,0", "cache_dir": str(folder / "cache"), "sources": sources,
            "mixing": {"kind": "online", "update_interval": 2, "floor": 0.05, **mixing}}
    return build_split_datasets(blend_from_dict(data, base_dir=folder), SampleCounts(samples, 100)).train


def test_unchanged_weights_draw_megatrons_blend(folder):
    train = online(folder)
    assert train.plan.mode == "online"
    expected = maps.blending_indices(list(train.plan.blend_weights), 2000).dataset_index
    assert train.draw.sources_of(np.arange(2000)).tolist() == expected.astype(np.int64).tolist()
    # every source can take what the most its weight can reach would draw: 1 - 2 x floor of the run
    assert all(member.num_samples >= 0.9 * 2000 for member in train.plan.members)


def test_each_segment_draws_its_weights_and_each_source_its_own_order(folder):
    train = online(folder)
    rng = np.random.default_rng(3)
    bounds = [0, 130, 131, 400, 777, 1200]
    for first, stop in zip(bounds, bounds[1:]):
        weights = rng.dirichlet(np.ones(3))
        train.set_weights(weights, first)
        sources = train.draw.sources_of(np.arange(first, stop))
        drawn = np.bincount(sources, minlength=3)
        assert np.all(np.abs(drawn - weights * (stop - first)) <= 1), (first, drawn, weights)
    located = [train.locate(i) for i in range(1200)]
    for source in range(3):
        assert [sample for member, sample in located if member == source] == list(range(
            sum(member == source for member, _ in located)))


def test_weights_change_only_at_the_next_sample_to_draw(folder):
    train = online(folder)
    train.tokens_of(40)
    with pytest.raises(DrawError, match="set weights between steps"):
        train.set_weights([0.2, 0.2, 0.6], 8)
    train.set_weights(train.draw.weights, 8)  # unchanged: nothing to do


def loop(loader: BlendLoader, mixer, steps: range, easy: int) -> list[list[int]]:
    """A user's own loop over ``loader`` (one micro-batch a step): per-source loss sums from the batch's
    ``source_ids``, source ``easy`` with a tiny loss; each step's source ids."""
    seen, batches = [], iter(loader)
    for step in steps:
        batch = next(batches)
        ids = batch["source_ids"].numpy()
        tokens = np.bincount(ids, minlength=3) * 16.0
        sums = tokens * np.where(np.arange(3) == easy, 0.05, 5.0)
        if (weights := mixer.after_step(step, sums, tokens)) is not None:
            loader.samples.set_weights(weights, loader.consumed_samples)
        seen.append(ids.tolist())
    return seen


def test_a_users_loop_mixes_and_resumes_exactly(folder):
    pytest.importorskip("torch")
    whole = online(folder, update_interval=1)
    mixer = whole.online_mixer()
    seen = loop(BlendLoader(whole, 8), mixer, range(1, 121), easy=0)
    assert sum(ids.count(0) for ids in seen[-20:]) < 0.85 * 8 * 20 * WEIGHTS[0]  # web, easy, lost weight

    first = online(folder, update_interval=1)
    first_mixer, first_loader = first.online_mixer(), BlendLoader(first, 8)
    head = loop(first_loader, first_mixer, range(1, 51), easy=0)
    state, mixer_state = json.loads(json.dumps(first_loader.state_dict())), json.loads(json.dumps(
        first_mixer.state_dict()))
    second = online(folder, update_interval=1)
    second_loader, second_mixer = BlendLoader(second, 8), second.online_mixer()
    second_loader.load_state_dict(state)
    second_mixer.load_state_dict(mixer_state)
    assert head + loop(second_loader, second_mixer, range(51, 121), easy=0) == seen


def test_a_state_of_other_weights_continues_each_source_after_what_it_gave(folder):
    """Resumed under other weights (allowed): every source's samples go on where they stopped, so over the
    two parts each source gives its first samples once each, none repeated and none skipped (online mixing sizes
    the maps from the floor, so both blends' maps are the same)."""
    pytest.importorskip("torch")
    before = BlendLoader(online(folder), 8, blend_fingerprint="before")
    batches = iter(before)
    for _ in range(30):
        next(batches)
    sources = [{"name": n, "prefix": f"data/{n}", "weight": w} for n, w in zip(NAMES, (0.1, 0.1, 0.8))]
    data = {"seq_length": 16, "seed": 5, "split": "90,10,0", "cache_dir": str(folder / "cache"), "sources": sources,
            "mixing": {"kind": "online", "update_interval": 2, "floor": 0.05}}
    after_split = build_split_datasets(blend_from_dict(data, base_dir=folder), SampleCounts(2000, 100)).train
    after = BlendLoader(after_split, 8, blend_fingerprint="after")
    with pytest.raises(Exception, match="another blend"):
        after.load_state_dict(before.state_dict())
    after.load_state_dict(before.state_dict(), allow_blend_change=True)
    batches = iter(after)
    for _ in range(30):
        next(batches)
    read = [before.samples.locate(i) for i in range(240)] + [after_split.locate(i) for i in range(240, 480)]
    for source in range(3):
        given = sorted(sample for member, sample in read if member == source)
        assert given == list(range(len(given))), NAMES[source]
    assert sum(member == 2 for member, _ in read[240:]) > 0.7 * 240  # the new weights are in force


def test_the_mixing_settings_are_part_of_the_fingerprint(folder):
    """So that a checkpoint of other mixing settings is refused unless the resume is told to accept them."""
    from corpus.blending.resolve import resolve_blend

    def fingerprint(**mixing) -> str:
        sources = [{"name": n, "prefix": f"data/{n}", "weight": w} for n, w in zip(NAMES, WEIGHTS)]
        data = {"seq_length": 16, "sources": sources, "mixing": {"kind": "online", **mixing}}
        return resolve_blend(blend_from_dict(data, base_dir=folder)).fingerprint

    assert fingerprint(update_interval=2) != fingerprint(update_interval=3)
    assert fingerprint(options={"smoothing": 0.5}) != fingerprint()


def test_a_source_drawn_past_its_maps_starts_them_again_with_a_warning(caplog):
    from corpus.blending.mixing.draw import OnlineDraw

    draw = OnlineDraw(("a", "b"), [0.5, 0.5], [3, 100])
    draw.set_weights([1.0, 0.0], 0)
    draw.draw_to(5)
    assert [draw.locate(i) for i in range(5)] == [(0, 0), (0, 1), (0, 2), (0, 0), (0, 1)]
    assert "has drawn all 3 samples the maps of a hold" in caplog.text
