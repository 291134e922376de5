"""Typed configs: presets, each section's validation with the flag named, Megatron's vocabulary padding."""

from __future__ import annotations

import pytest

from corpus.core.errors import ConfigError
from trainer.config.loading import load_config
from trainer.config.presets import PRESETS
from trainer.config.schema import DataConfig, ModelConfig, TrainingConfig, padded_vocab_size

MOCK = {"data": {"mock_data": True, "seq_length": 64}, "training": {"train_iters": 5}}


def test_preset_fills_shape_and_flags_override_it():
    config = ModelConfig(preset="1.3b", num_layers=2)
    assert (config.num_layers, config.hidden_size, config.num_attention_heads, config.ffn_hidden_size) == (2, 2048, 16,
                                                                                                           5632)
    assert config.head_dim == 128


def test_presets_match_the_documented_shapes():
    assert PRESETS["1.3b"].num_layers == 24 and PRESETS["1.3b"].hidden_size == 2048  # DESIGN §7
    assert PRESETS["1.3b"].ffn_hidden_size == 5632 and PRESETS["1.3b"].num_attention_heads == 16
    eight = PRESETS["8b"]
    assert (eight.num_layers, eight.hidden_size, eight.num_query_groups, eight.ffn_hidden_size) == (32, 4096, 8, 14336)
    for name in PRESETS:
        ModelConfig(preset=name)  # every preset validates


@pytest.mark.parametrize("section, values, fragment", [
    ("model", {"hidden_size": 100, "num_attention_heads": 3}, "must be divisible by --num-attention-heads"),
    ("model", {"num_attention_heads": 4, "num_query_groups": 3}, "multiple of --num-query-groups"),
    ("model", {"preset": "2b"}, "unknown; choose one of tiny"),
    ("optim", {"lr": 1e-3, "min_lr": 1e-2}, "--min-lr"),
    ("training", {"train_iters": 0}, "--train-iters must be positive"),
])
def test_invalid_values_name_the_flag(section, values, fragment):
    overrides = {**MOCK, section: {**MOCK.get(section, {}), **values}}
    with pytest.raises(ConfigError, match=fragment):
        load_config(None, overrides)


def test_data_source_is_exactly_one():
    with pytest.raises(ConfigError, match="exactly one data source"):
        DataConfig()
    with pytest.raises(ConfigError, match="--blend and --mock-data"):
        DataConfig(blend="b.yaml", mock_data=True, seq_length=8)
    with pytest.raises(ConfigError, match="--seq-length is required"):
        DataConfig(mock_data=True)
    with pytest.raises(ConfigError, match="--train-iters is required"):
        TrainingConfig()


def test_vocab_padding_as_megatron():
    assert padded_vocab_size(50257, 128) == 50304
    assert padded_vocab_size(100277, 128, tensor_parallel_size=2) == 100352
    assert padded_vocab_size(256, 128) == 256


def test_megatron_fp8_flags_and_the_speed_and_memory_knobs():
    config = load_config(None, {**MOCK, "fp8": {"fp8_format": "hybrid", "fp8_amax_history_len": 1024,
                                                "fp8_amax_compute_algo": "max"},
                                "model": {"compile": "off", "recompute_granularity": "full"},
                                "optim": {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}})
    assert (config.fp8.fp8_format, config.fp8.fp8_recipe, config.fp8.fp8_backend) == ("hybrid", "delayed", "auto")
    assert config.fp8.fp8_amax_history_len == 1024 and config.model.recompute_granularity == "full"
    with pytest.raises(ConfigError, match="fp8.fp8_format: 'e5m2' is not one of hybrid, e4m3"):
        load_config(None, {**MOCK, "fp8": {"fp8_format": "e5m2"}})
    with pytest.raises(ConfigError, match="--fp8-min-dim must be at least 16"):
        load_config(None, {**MOCK, "fp8": {"fp8_min_dim": 8}})
