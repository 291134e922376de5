"""Per-source telemetry on real text: a source of one short text repeated learns far faster than varied prose,
and the metrics file, the TensorBoard events and ``trainer plot`` all show it; the token counts are what
``corpus blend --show-samples`` says the samples hold; a resume continues them; ``--log-per-source`` quiets
the console or turns it all off."""

from __future__ import annotations

import json
import logging
import re
import statistics
from pathlib import Path

import pytest

from corpus.blending.resolve import resolve_blend
from corpus.blending.schema import load_blend
from corpus.core.figures import THREE_PANELS
from tests.conftest import run_cli
from tests.images import svg_size
from tests.trainer.conftest import blend_overrides, read_metrics
from trainer.config.loading import load_config
from trainer.run.build import build_run
from trainer.run.loop import train
from trainer.run.telemetry import SourceTelemetry


def per_source(records: list[dict], name: str, key: str = "loss") -> list:
    """``key`` of source ``name`` in every training record."""
    return [r["sources"][name][key] for r in records if "loss" in r]


@pytest.fixture(scope="module")
def forty_steps(two_sources, tmp_path_factory) -> Path:
    """The folder of a 40-step run of the two sources, evaluated at steps 20 and 40, with TensorBoard events."""
    folder = tmp_path_factory.mktemp("forty_steps")
    train(load_config(None, blend_overrides(folder, two_sources, training={"train_iters": 40},
                                            optim={"lr": 1e-2, "lr_warmup_iters": 4},
                                            logging={"eval_interval": 20, "eval_iters": 2,
                                                     "tensorboard_dir": str(folder / "tb")})))
    return folder


def test_the_repeated_source_learns_far_faster_everywhere_a_user_looks(forty_steps):
    records = read_metrics(forty_steps / "metrics.jsonl")
    repeated, varied = per_source(records, "repeated")[-5:], per_source(records, "varied")[-5:]
    assert statistics.fmean(repeated) < 0.3 * statistics.fmean(varied)
    evals = [r for r in records if r.get("split") == "valid"]
    assert [r["step"] for r in evals] == [20, 40]
    assert evals[-1]["sources"]["repeated"]["loss"] < 0.3 * evals[-1]["sources"]["varied"]["loss"]
    assert evals[0]["sources"]["repeated"]["tokens"] == 64 * 64  # 64 samples of 64 tokens, the default

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(forty_steps / "tb"))
    events.Reload()
    last = {tag: events.Scalars(tag)[-1].value for tag in ("loss/repeated", "loss/varied", "valid_loss/repeated",
                                                           "valid_loss/varied", "tokens/varied", "share/varied")}
    assert last["loss/repeated"] < 0.3 * last["loss/varied"]
    assert last["valid_loss/repeated"] < 0.3 * last["valid_loss/varied"]
    assert last["share/varied"] == pytest.approx(0.5, abs=0.05) and last["tokens/varied"] > 0

    shown = json.loads(run_cli("trainer", "plot", str(forty_steps), "--json").stdout)
    summary = shown["sources"]
    assert summary["repeated"]["loss"] < 0.3 * summary["varied"]["loss"]
    assert summary["repeated"]["valid_loss"] < 0.3 * summary["varied"]["valid_loss"]
    assert summary["varied"]["weight"] == 0.5 and summary["varied"]["tokens"] == per_source(records, "varied",
                                                                                             "tokens_total")[-1]


def test_trainer_plot_draws_the_run(forty_steps, tmp_path):
    run_cli("trainer", "plot", str(forty_steps), "--out", str(tmp_path / "c.svg"))  # a vector type: PNG is tested apart
    assert svg_size(tmp_path / "c.svg") == (THREE_PANELS[0] * 72, THREE_PANELS[1] * 72)  # 72 points an inch



def test_token_counts_are_what_the_samples_hold(two_sources, tmp_path):
    """Loss-bearing tokens with --eod-mask-loss (an input EOD carries no loss), counted from the raw samples
    ``corpus blend --show-samples`` prints for the run's request."""
    train(load_config(None, blend_overrides(tmp_path, two_sources, training={"train_iters": 6},
                                            data={"eod_mask_loss": True}, logging={"log_interval": 4})))
    records = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "loss" in r]
    assert [r["step"] for r in records] == [4, 6]
    eod = resolve_blend(load_blend(two_sources)).eod_id
    shown = run_cli("corpus", "blend", str(two_sources), "--split", "train", "--num-samples", "24", "--seq-length",
                    "64", "--seed", "1234", "--show-samples", "0:24", "--json")
    held = {"repeated": 0, "varied": 0}
    for sample in map(json.loads, shown.stdout.splitlines()):
        held[sample["source"]] += sum(token != eod for token in sample["tokens"][:64])
    assert held["repeated"] < 24 * 64 / 2  # short documents: many EODs, so the mask matters
    for name, count in held.items():
        assert per_source(records, name, "tokens_total")[-1] == count
        assert sum(per_source(records, name, "tokens")) == count


def test_a_resume_continues_the_counts_exactly(two_sources, tmp_path):
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    train(load_config(None, blend_overrides(reference, two_sources, training={"train_iters": 8})))
    save = str(resumed / "ckpt")
    train(load_config(None, blend_overrides(resumed, two_sources, training={"train_iters": 8, "exit_interval": 4},
                                            checkpoint={"save": save})))
    train(load_config(None, blend_overrides(resumed, two_sources, training={"train_iters": 8},
                                            checkpoint={"save": save, "load": save})))
    sources = lambda path: [(r["step"], r["sources"]) for r in read_metrics(path)]  # noqa: E731
    assert sources(resumed / "metrics.jsonl") == sources(reference / "metrics.jsonl")
    assert per_source(read_metrics(reference / "metrics.jsonl"), "varied", "tokens_total")[-1] > 0


@pytest.mark.parametrize("mode", ["files", "off"])
def test_log_per_source_quiets_the_console_or_turns_it_all_off(two_sources, tmp_path, caplog, mode):
    overrides = blend_overrides(tmp_path, two_sources, training={"train_iters": 2},
                                logging={"log_per_source": mode, "eval_interval": 2})
    with caplog.at_level(logging.INFO, logger="trainer"):
        train(load_config(None, overrides))
    assert "| loss" in caplog.text and not re.search(r"^  repeated +loss", caplog.text, re.M)
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert all(("sources" in r) == (mode == "files") for r in records)
    with caplog.at_level(logging.INFO, logger="trainer"):
        train(load_config(None, {**overrides, "logging": {**overrides["logging"], "log_per_source": "on"}}))
    assert re.search(r"^  repeated +loss .* tokens \| .* in all, share", caplog.text, re.M)
    assert re.search(r"^  varied +valid loss", caplog.text, re.M)
    assert build_run(load_config(None, overrides)).engine.num_sources == (2 if mode == "files" else 0)


def test_counts_from_a_checkpoint_of_another_blend_keep_the_sources_both_know(caplog):
    telemetry = SourceTelemetry(("web", "code"), (0.7, 0.3))
    telemetry.load_state_dict({"tokens": {"web": 100, "books": 5}})
    assert telemetry.totals == [100, 0] and "books" in caplog.text
    telemetry.add([20.0, 4.0], [10.0, 2.0])
    record = telemetry.record()
    assert record["web"] == {"loss": 2.0, "tokens": 10, "tokens_total": 110, "share": 110 / 112, "weight": 0.7,
                             "scheduled_share": 0.7}
    assert telemetry.record()["code"]["loss"] is None  # no tokens since the last record
    telemetry.load_state_dict(None)
    assert "start from zero" in caplog.text


@pytest.fixture(scope="module")
def scheduled(two_sources) -> Path:
    """The two sources under a schedule: only ``repeated`` for the first quarter of the run, a linear ramp to
    only ``varied`` over the next half, then only ``varied``."""
    blend = two_sources.parent / "scheduled.yaml"
    text = two_sources.read_text().replace(", weight: 0.5}", "}")
    blend.write_text(text + "schedule:\n  - {until: 0.25, weights: {repeated: 1, varied: 0}}\n"
                     "  - {until: 0.75, weights: {repeated: 0, varied: 1}, ramp: linear}\n"
                     "  - {weights: {repeated: 0, varied: 1}}\n")
    return blend


def test_a_schedule_is_logged_per_phase_and_realised_as_scheduled(scheduled, tmp_path, caplog):
    """8 steps of 4 samples: steps 1-2 draw only repeated, 3-6 ramp, 7-8 only varied. Every record says the phase,
    the weight in force and the share scheduled so far; the realised shares follow within a sample's tokens."""
    with caplog.at_level(logging.INFO, logger="trainer"):
        train(load_config(None, blend_overrides(tmp_path, scheduled, training={"train_iters": 8})))
    records = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "loss" in r]
    assert [r["phase"] for r in records] == [1, 1, 2, 2, 2, 2, 3, 3]
    assert per_source(records, "varied", "tokens")[:2] == [0, 0] and per_source(records, "repeated", "tokens")[-2:] == [
        0, 0]
    assert records[3]["sources"]["repeated"]["weight"] == pytest.approx(1 - 7 / 16)  # sample 15: 7/16 of the ramp
    assert records[5]["sources"]["varied"]["scheduled_share"] == pytest.approx((0 * 8 + 8) / 24)
    for record in records:
        samples = record["consumed_samples"]
        for name, numbers in record["sources"].items():
            realised = numbers["share"] * samples  # every sample holds 64 loss-bearing tokens here
            assert abs(realised - numbers["scheduled_share"] * samples) <= 1, (record["step"], name)
    assert re.search(r"step 1: phase 1/3 of the blend's schedule \(samples 0-7\): weights repeated 1.000, "
                     r"varied 0.000", caplog.text)
    assert "step 3: phase 2/3" in caplog.text and "ramping to 0.000, 1.000" in caplog.text
    assert "step 7: phase 3/3" in caplog.text and "phase 2/3" not in caplog.text.split("step 7:")[1]
    assert re.search(r"^  varied +loss .* share [0-9.]+ of [0-9.]+ scheduled \(weight 1.000\)", caplog.text, re.M)
    summary = json.loads(run_cli("trainer", "plot", str(tmp_path), "--json").stdout)["sources"]
    assert summary["varied"]["weight"] == 1.0 and summary["repeated"]["weight"] == 0.0


def test_a_resume_mid_ramp_follows_the_same_schedule(scheduled, tmp_path, caplog):
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    train(load_config(None, blend_overrides(reference, scheduled, training={"train_iters": 8})))
    save = str(resumed / "ckpt")
    train(load_config(None, blend_overrides(resumed, scheduled, training={"train_iters": 8, "exit_interval": 5},
                                            checkpoint={"save": save})))
    with caplog.at_level(logging.INFO, logger="trainer"):
        train(load_config(None, blend_overrides(resumed, scheduled, training={"train_iters": 8},
                                                checkpoint={"save": save, "load": save})))
    assert "step 6: phase 2/3" in caplog.text  # a resume says where in the schedule it starts
    records = lambda path: [(r["step"], r["loss"], r.get("phase"), r["sources"])  # noqa: E731
                            for r in read_metrics(path) if "loss" in r]
    assert records(resumed / "metrics.jsonl") == records(reference / "metrics.jsonl")


def test_trainer_plot_draws_the_mix_over_tokens(scheduled, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib (the plot extra) is not installed")
    from trainer.run.curves import read_curves, write_curves

    train(load_config(None, blend_overrides(tmp_path, scheduled, training={"train_iters": 8})))
    curves = read_curves(tmp_path / "metrics.jsonl")
    assert curves.weights["repeated"][:2] == [1.0, 1.0] and curves.weights["repeated"][-1] == 0.0
    write_curves(curves, tmp_path / "mix.svg")
    drawn = (tmp_path / "mix.svg").read_text()
    assert "mix per source" in drawn and "repeated weight" in drawn and "varied share" in drawn
