"""The training loop end to end on tiny mock-data runs: learning, exact resume, accumulation,
clean stops, and each failure's message."""

from __future__ import annotations

import math

import pytest
import torch

from corpus.core.errors import ConfigError
from tests.trainer.conftest import read_metrics, tiny_config
from trainer.checkpoint import store as checkpoint
from trainer.config.schema import ModelConfig
from trainer.errors import OutOfMemory, TrainingDiverged
from trainer.model.gpt import GPT
from trainer.parallelize import engine
from trainer.run.build import model_vocab_size
from trainer.run.loop import train


def losses(path) -> list[tuple]:
    return [(r["step"], r.get("loss"), r.get("grad_norm"), r.get("eval_loss")) for r in read_metrics(path)]


def test_mock_loss_falls_and_records_are_complete(tmp_path):
    result = train(tiny_config(tmp_path, training={"train_iters": 30}, optim={"lr": 1e-2},
                               logging={"eval_interval": 10, "tensorboard_dir": str(tmp_path / "tb")}))
    records = read_metrics(tmp_path / "metrics.jsonl")
    train_records = [r for r in records if "loss" in r]
    assert [r["step"] for r in train_records] == list(range(1, 31))
    assert train_records[-1]["loss"] < 0.75 * train_records[0]["loss"]
    for key in ("lr", "grad_norm", "tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "consumed_samples"):
        assert key in train_records[0]
    evals = [r for r in records if "eval_loss" in r]
    assert [(r["step"], r["split"]) for r in evals] == [(10, "valid"), (20, "valid"), (30, "valid"), (30, "test")]
    assert result.iteration == 30 and result.stopped_by == "completed"
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_resume_equals_uninterrupted_to_the_bit(tmp_path):
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    reference.mkdir(), resumed.mkdir()
    train(tiny_config(reference, training={"train_iters": 10}))
    save = str(resumed / "ckpt")
    first = train(tiny_config(resumed, training={"train_iters": 10, "exit_interval": 5}, checkpoint={"save": save}))
    assert first.stopped_by == "--exit-interval 5 reached" and first.iteration == 5
    train(tiny_config(resumed, training={"train_iters": 10}, checkpoint={"save": save, "load": save}))
    assert losses(resumed / "metrics.jsonl") == losses(reference / "metrics.jsonl")
    assert checkpoint.read_info(checkpoint.find(save))["iteration"] == 10


def test_gradient_accumulation_matches_one_big_batch(tmp_path):
    one, many = tmp_path / "one", tmp_path / "many"
    one.mkdir(), many.mkdir()
    train(tiny_config(one, training={"micro_batch_size": 4, "global_batch_size": 4, "train_iters": 4}))
    train(tiny_config(many, training={"micro_batch_size": 1, "global_batch_size": 4, "train_iters": 4}))
    for a, b in zip(losses(one / "metrics.jsonl"), losses(many / "metrics.jsonl")):
        assert a[0] == b[0]
        for x, y in zip(a[1:], b[1:]):
            assert (x is None and y is None) or math.isclose(x, y, rel_tol=1e-5)


def test_nan_loss_stops_without_applying_the_step_or_saving(tmp_path, monkeypatch):
    save = tmp_path / "ckpt"
    real, calls = GPT.loss_sum, []

    def poisoned(model, *args):
        calls.append(1)
        value = real(model, *args)
        return value * math.nan if len(calls) == 7 else value  # step 4's first micro-batch (2 per step)

    monkeypatch.setattr(GPT, "loss_sum", poisoned)
    config = tiny_config(tmp_path, checkpoint={"save": str(save), "save_interval": 2},
                         logging={"eval_iters": 0})
    with pytest.raises(TrainingDiverged, match=r"step 4: loss nan.*last checkpoint is untouched.*--lr"):
        train(config)
    assert checkpoint.complete_iterations(save) == [2]
    assert (save / checkpoint.TRACKER).read_text() == "2\n"


def test_out_of_memory_names_the_knobs(tmp_path, monkeypatch):
    def exhausted(self, batches, tokens):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

    monkeypatch.setattr(engine.StepEngine, "forward_backward", exhausted)
    with pytest.raises(OutOfMemory, match=r"step 1.*--micro-batch-size.*--seq-length"):
        train(tiny_config(tmp_path))


def test_vocabulary_checks():
    model = ModelConfig()
    assert model_vocab_size(model, 50257, 1) == 50304
    assert model_vocab_size(ModelConfig(vocab_size=60000), 50257, 1) == 60032
    with pytest.raises(ConfigError, match="tokenizer has 50257 ids but --vocab-size is 1000"):
        model_vocab_size(ModelConfig(vocab_size=1000), 50257, 1)
    with pytest.raises(ConfigError, match="give the model's vocabulary with --vocab-size"):
        model_vocab_size(model, None, 1)


def test_exit_duration_saves_and_stops(tmp_path):
    save = tmp_path / "ckpt"
    result = train(tiny_config(tmp_path, training={"exit_duration_in_mins": 0.0}, checkpoint={"save": str(save)}))
    assert result.stopped_by == "--exit-duration-in-mins reached" and result.iteration == 1
    assert checkpoint.complete_iterations(save) == [1]


def test_pytorch_profiler_writes_a_trace(tmp_path):
    train(tiny_config(tmp_path, profile={"profile": True, "use_pytorch_profiler": True, "profile_step_start": 2,
                                         "profile_step_end": 4, "profile_dir": str(tmp_path / "prof")}))
    assert [p.name for p in (tmp_path / "prof").iterdir()] == ["trace_steps_2-3.json"]
    with pytest.raises(ConfigError, match="--use-pytorch-profiler"):
        train(tiny_config(tmp_path, profile={"profile": True}))


def test_finetune_and_no_load_optim(tmp_path):
    from trainer.run.build import build_run

    save = str(tmp_path / "ckpt")
    train(tiny_config(tmp_path, training={"train_iters": 3}, checkpoint={"save": save}))
    saved = {"model": {"output.weight": torch.zeros(128, 32)}}
    checkpoint.load(checkpoint.find(save), saved)
    finetune = build_run(tiny_config(tmp_path, checkpoint={"load": save, "finetune": True}))
    assert finetune.iteration == 0 and not finetune.optimizer.state
    assert torch.equal(finetune.model.output.weight, saved["model"]["output.weight"])
    fresh_optimizer = build_run(tiny_config(tmp_path, checkpoint={"load": save, "no_load_optim": True}))
    assert fresh_optimizer.iteration == 3 and not fresh_optimizer.optimizer.state
    resumed = build_run(tiny_config(tmp_path, checkpoint={"load": save}))
    assert resumed.iteration == 3 and len(resumed.optimizer.state) == len(list(resumed.model.parameters()))


def test_manual_gc_collects_only_where_asked_and_trains_the_same(tmp_path, monkeypatch):
    """--manual-gc: the collector is off during the steps, collects every --manual-gc-interval steps and
    before each evaluation, is back on after the run, and the run's numbers do not change."""
    import gc

    from trainer.runtime import collection

    collected, states = [], []
    monkeypatch.setattr(collection.gc, "collect", lambda *args: collected.append(gc.isenabled()) or 0)
    monkeypatch.setattr(engine.StepEngine, "forward_backward",
                        lambda self, *args, original=engine.StepEngine.forward_backward: states.append(gc.isenabled())
                        or original(self, *args))
    overrides = {"logging": {"eval_interval": 3}}
    train(tiny_config(tmp_path / "manual", training={"train_iters": 6, "manual_gc": True, "manual_gc_interval": 2},
                      **overrides))
    assert states == [False] * 6 and gc.isenabled()
    assert len(collected) == 1 + 3 + 2  # at the start, after steps 2/4/6, before the evaluations at 3 and 6
    train(tiny_config(tmp_path / "automatic", training={"train_iters": 6}, **overrides))
    assert losses(tmp_path / "manual" / "metrics.jsonl") == losses(tmp_path / "automatic" / "metrics.jsonl")
    with pytest.raises(ConfigError, match="--manual-gc-interval must be 0 or positive"):
        tiny_config(tmp_path / "bad", training={"train_iters": 1, "manual_gc": True, "manual_gc_interval": -1})
