"""Online mixing in the trainer, on real text: a source of one short text repeated loses weight to varied prose
under Online Data Mixing's rule, and the console, the metrics file, TensorBoard and ``trainer plot`` all show the
weights; a run killed and resumed (mid-window or at an update) is bit for bit the uninterrupted one; a checkpoint
of another blend is refused unless told, and then each source goes on after the samples it gave."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from corpus.core.errors import UserError
from tests.conftest import run_cli
from tests.trainer.conftest import blend_overrides, read_metrics, single_thread
from tests.trainer.parallelize.support import RELATIVE_TOLERANCE, layout_overrides, run_ranks
from trainer.checkpoint import store as checkpoint
from trainer.config.loading import load_config, merge
from trainer.run.loop import train

MIXING = "mixing: {kind: online, rule: odm, update_interval: 2, floor: 0.05, options: {smoothing: 0.5}}\n"


@pytest.fixture(scope="module")
def online(two_sources) -> Path:
    """The two sources (repeated text, varied prose; 0.5 each) mixed online every 2 steps."""
    blend = two_sources.parent / "online.yaml"
    blend.write_text(two_sources.read_text() + MIXING)
    return blend


def training_records(path: Path) -> list[dict]:
    return [record for record in read_metrics(path) if "loss" in record]


def weights(records: list[dict], name: str) -> list[float]:
    return [record["sources"][name]["weight"] for record in records]


@pytest.fixture(scope="module")
def mixed_run(online, tmp_path_factory) -> Path:
    """30 steps of online mixing, TensorBoard events written; the folder holds the metrics and ``console.log``."""
    folder = tmp_path_factory.mktemp("mixed_run")
    handler = logging.FileHandler(folder / "console.log")
    logging.getLogger("trainer").addHandler(handler)
    logging.getLogger("trainer").setLevel(logging.INFO)
    try:
        train(load_config(None, blend_overrides(folder, online, training={"train_iters": 30},
                                                optim={"lr": 1e-2, "lr_warmup_iters": 4},
                                                logging={"eval_interval": 30,
                                                         "tensorboard_dir": str(folder / "tb")})))
    finally:
        logging.getLogger("trainer").removeHandler(handler)
        handler.close()
    return folder


def test_the_repeated_source_loses_weight_under_odm(mixed_run):
    records = training_records(mixed_run / "metrics.jsonl")
    repeated, varied = weights(records, "repeated"), weights(records, "varied")
    assert repeated[0] == 0.5  # no update after step 1: the blend's weights
    assert repeated[-1] < repeated[15] < repeated[5] < 0.5 and repeated[-1] < 0.4
    assert all(a + b == pytest.approx(1.0) for a, b in zip(repeated, varied))
    assert all(weight >= 0.05 for weight in repeated + varied)  # the floor
    assert repeated[2] != repeated[3] and repeated[3] == repeated[4]  # updates after steps 4, 6…: held between
    drawn = sum(record["sources"]["varied"]["tokens"] for record in records[-10:])
    assert drawn > 0.55 * 10 * 4 * 64  # the last 10 steps of 4 samples of 64 tokens drew mostly varied prose


def logged_updates(console: str) -> dict[int, tuple[float, float]]:
    """The weights (repeated, varied) each console line of an online-mixing update gave, by step."""
    found = re.findall(r"step (\d+): online mixing update .*: weights repeated ([0-9.]+), varied ([0-9.]+)", console)
    return {int(step): (float(repeated), float(varied)) for step, repeated, varied in found}


def test_the_samples_follow_the_weights_in_force(mixed_run):
    """Each update starts a segment (here two steps, 8 samples) drawn with the weights the mixer logged: every
    source gives within one sample of its weight's share of the segment."""
    updates = logged_updates((mixed_run / "console.log").read_text())
    assert sorted(updates) == list(range(2, 31, 2))
    totals = {record["step"]: record["sources"] for record in training_records(mixed_run / "metrics.jsonl")}
    in_force, before = (0.5, 0.5), {"repeated": {"tokens_total": 0}, "varied": {"tokens_total": 0}}
    for step in sorted(updates):
        for index, name in enumerate(("repeated", "varied")):
            drawn = (totals[step][name]["tokens_total"] - before[name]["tokens_total"]) / 64  # 64 tokens a sample
            assert abs(drawn - 8 * in_force[index]) < 1, (step, name)
        in_force, before = updates[step], totals[step]


def test_every_place_a_user_looks_shows_the_weights(mixed_run):
    console = (mixed_run / "console.log").read_text()
    assert "train weights mixed online by odm every 2 steps" in console
    assert "step 2: online mixing update 1 (odm) from the losses of steps 1-2 (repeated " in console
    last = training_records(mixed_run / "metrics.jsonl")[-1]
    assert f"{last['sources']['varied']['weight']:.3f}" == f"{logged_updates(console)[30][1]:.3f}"  # the mixer's
    assert f"(weight {last['sources']['varied']['weight']:.3f})" in console.split("step 30/30 | loss")[-1]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(mixed_run / "tb"))
    events.Reload()
    assert events.Scalars("weight/varied")[-1].value == pytest.approx(last["sources"]["varied"]["weight"])
    summary = json.loads(run_cli("trainer", "plot", str(mixed_run), "--json").stdout)["sources"]
    assert summary["varied"]["weight"] == last["sources"]["varied"]["weight"]
    assert summary["varied"]["valid_loss"] is not None  # each source's own validation samples, as without mixing


def test_trainer_plot_draws_the_online_weights(mixed_run, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib (the plot extra) is not installed")
    from trainer.run.curves import read_curves, write_curves

    curves = read_curves(mixed_run / "metrics.jsonl")
    assert curves.weights["repeated"][0] == 0.5 and curves.weights["repeated"][-1] < 0.4
    write_curves(curves, tmp_path / "mix.svg")
    assert "repeated weight" in (tmp_path / "mix.svg").read_text()


@pytest.mark.parametrize("stop", [5, 6])  # mid-window (step 5 of the window 5-6), and right at an update
def test_a_resume_is_the_uninterrupted_run_bit_for_bit(online, tmp_path, stop):
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    steps = {"train_iters": 12}
    train(load_config(None, blend_overrides(reference, online, training=steps)))
    save = str(resumed / "ckpt")
    train(load_config(None, blend_overrides(resumed, online, training={**steps, "exit_interval": stop},
                                            checkpoint={"save": save})))
    train(load_config(None, blend_overrides(resumed, online, training=steps, checkpoint={"save": save, "load": save})))
    records = lambda path: [(r["step"], r["loss"], r["sources"]) for r in training_records(path)]  # noqa: E731
    assert records(resumed / "metrics.jsonl") == records(reference / "metrics.jsonl")
    assert len(set(weights(training_records(reference / "metrics.jsonl"), "varied"))) > 3  # weights did move


def test_a_checkpoint_of_another_mix_is_refused_unless_told_and_then_repeats_nothing(online, tmp_path):
    """Resumed under other prior weights: refused; with --override-blend-check each source goes on after the
    samples it gave (its maps are the same: online mixing sizes them from the floor, not the weights)."""
    save = str(tmp_path / "ckpt")
    train(load_config(None, blend_overrides(tmp_path / "first", online, training={"train_iters": 6},
                                            checkpoint={"save": save})))
    reweighted = online.parent / "reweighted.yaml"
    reweighted.write_text(online.read_text().replace("weight: 0.5}", "weight: 0.9}", 1))
    again = blend_overrides(tmp_path / "second", reweighted, training={"train_iters": 10},
                            checkpoint={"save": save, "load": save})
    with pytest.raises(UserError, match="another blend .* --override-blend-check"):
        train(load_config(None, again))
    train(load_config(None, blend_overrides(tmp_path / "second", reweighted, training={"train_iters": 10},
                                            data={"override_blend_check": True},
                                            checkpoint={"save": save, "load": save})))
    second = training_records(tmp_path / "second" / "metrics.jsonl")
    assert second[0]["step"] == 7
    assert second[0]["sources"]["repeated"]["weight"] == pytest.approx(0.9 / 1.4)  # the new blend's weights
    saved = lambda step: checkpoint.read_info(Path(save) / f"iter_{step:07d}")["loaders"]["train"]  # noqa: E731
    for source in ("repeated", "varied"):
        drawn = sum(record["sources"][source]["tokens"] for record in second) // 64  # 64 tokens a sample
        # each source's next sample after the resume is the one after those it gave before: none repeated
        assert saved(10)["source_samples"][source] == saved(6)["source_samples"][source] + drawn

def layout_run(folder: Path, blend: Path, **parallel) -> dict:
    """12 steps of the layouts' 4-layer model on ``blend`` (global batch 8, seq 32), checkpointed at step 6."""
    return merge(layout_overrides(folder, steps=12, **parallel), {
        "data": {"mock_data": False, "blend": str(blend), "seq_length": 32, "data_cache_path": str(folder / "maps")},
        "model": {"vocab_size": 8192}, "logging": {"eval_interval": 12},
        "checkpoint": {"save": str(folder / "ckpt"), "save_interval": 6}})


@pytest.mark.slow  # eight CPU ranks on 2 cores
def test_every_layout_follows_the_same_weights(online, tmp_path):
    with single_thread():
        train(load_config(None, layout_run(tmp_path / "one", online)))
    parallel = layout_run(tmp_path / "tp2_pp2_dp2", online, tensor_model_parallel_size=2,
                          pipeline_model_parallel_size=2, sequence_parallel=True)
    run_ranks(8, [parallel])
    resumed = merge(layout_run(tmp_path / "resumed", online),
                    {"checkpoint": {"load": str(tmp_path / "tp2_pp2_dp2" / "ckpt" / "iter_0000006")}})
    with single_thread():
        train(load_config(None, resumed))
    reference = training_records(tmp_path / "one" / "metrics.jsonl")
    assert len(set(weights(reference, "varied"))) > 3  # the weights moved
    for name in ("tp2_pp2_dp2", "resumed"):
        records = training_records(tmp_path / name / "metrics.jsonl")
        compared = reference[-len(records):]
        assert [r["step"] for r in records] == [r["step"] for r in compared]
        for source in ("repeated", "varied"):
            assert weights(records, source) == weights(compared, source), (name, source)  # exactly
            assert [r["sources"][source]["tokens_total"] for r in records] == [
                r["sources"][source]["tokens_total"] for r in compared]  # the same samples
        for mine, theirs in zip(records, compared):
            assert mine["loss"] == pytest.approx(theirs["loss"], rel=RELATIVE_TOLERANCE)
