"""Loading a config: layering (YAML → flags), unknown keys and wrongly typed values rejected with the file
and key, a round trip through dicts, and the field table the CLI builds its flags from."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from corpus.core.errors import ConfigError
from trainer.config.loading import from_dict, load_config
from trainer.config.schema import TrainConfig

MOCK = {"data": {"mock_data": True, "seq_length": 64}, "training": {"train_iters": 5}}


def config_fields() -> list[dataclasses.Field]:
    """Every leaf field of ``TrainConfig`` (each section's fields), in declaration order: what the CLI exposes."""
    sections = typing.get_type_hints(TrainConfig)
    return [leaf for section in dataclasses.fields(TrainConfig) for leaf in dataclasses.fields(sections[section.name])]


def test_yaml_then_flags(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("model: {preset: 125m, num_layers: 3}\noptim: {lr: 0.001}\n"
                    "data: {mock_data: true, seq_length: 32}\ntraining: {train_iters: 7}\n")
    config = load_config(path, {"model": {"num_layers": 5}, "optim": {"min_lr": 1e-5}})
    assert config.model.num_layers == 5 and config.model.hidden_size == 768
    assert config.optim.lr == 0.001 and config.optim.min_lr == 1e-5 and config.training.train_iters == 7


@pytest.mark.parametrize("document, fragment", [
    ("model: {num_layer: 3}", "unknown key(s) num_layer"),
    ("optimizer: {lr: 1}", "unknown section(s) optimizer"),
    ("optim: {lr: fast}", "optim.lr: expected a number"),
    ("training: {micro_batch_size: 2.5}", "training.micro_batch_size: expected an integer"),
    ("training: {precision: fp16}", "not one of auto, bf16, fp32"),
    ("- a list", "expected a mapping"),
    ("model: [1, 2]", ": model: expected a mapping"),
])
def test_bad_yaml_names_file_and_key(tmp_path, document, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(document + "\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, MOCK)
    assert fragment in str(error.value)
    if "list" not in document:
        assert str(path) in str(error.value)


def test_round_trip_through_dict():
    config = load_config(None, {**MOCK, "model": {"preset": "350m"}})
    assert from_dict(type(config), config.to_dict()) == config


def test_every_field_has_help_and_flags_are_unique():
    flags = [f.metadata["flag"] for f in config_fields() if f.metadata.get("flag")]
    assert len(flags) == len(set(flags))
    assert all(f.metadata.get("help") for f in config_fields())
    for flag in ("--train-iters", "--global-batch-size", "--micro-batch-size", "--lr", "--min-lr", "--lr-warmup-iters",
                 "--lr-decay-style", "--weight-decay", "--clip-grad", "--seed", "--save", "--save-interval", "--load",
                 "--log-interval", "--eval-interval", "--eval-iters", "--num-layers", "--hidden-size",
                 "--num-attention-heads", "--num-query-groups", "--ffn-hidden-size", "--seq-length", "--data-path",
                 "--split", "--data-cache-path", "--vocab-size", "--make-vocab-size-divisible-by", "--mock-data",
                 "--exit-duration-in-mins", "--profile", "--use-pytorch-profiler", "--profile-step-start",
                 "--profile-step-end", "--tensorboard-dir", "--log-throughput", "--metrics-jsonl", "--preset",
                 "--save-retain", "--attention-backend"):
        assert flag in flags, flag
