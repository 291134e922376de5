"""What a TP × PP × DP layout refuses, and how it splits the model and the gradient buckets (no
process group needed)."""

from __future__ import annotations

import pytest
import torch

from corpus.core.errors import ConfigError
from tests.conftest import invoke_cli
from trainer.config.schema import ModelConfig, ParallelConfig, padded_vocab_size
from trainer.parallel.state import ParallelState
from trainer.parallelize.data_parallel import _owners, _split
from trainer.parallelize.layout import local_stage_indices, stage_spec, validate_layout, virtual_stages

CPU = torch.device("cpu")
MODEL = ModelConfig(num_layers=8, hidden_size=64, num_attention_heads=8, num_query_groups=4, ffn_hidden_size=96)


def state(tp: int = 1, pp: int = 1, dp: int = 1, vpp: int = 1, sp: bool = False) -> ParallelState:
    return ParallelState(CPU, tp_size=tp, pp_size=pp, dp_size=dp, vpp_size=vpp, sequence_parallel=sp)


@pytest.mark.parametrize("parallel, seq, micro_batches, fragment", [
    (state(tp=3), 64, 1, "--num-attention-heads 8 is not divisible by --tensor-model-parallel-size 3"),
    (state(tp=8), 64, 1, "--num-query-groups .* 4 is not divisible by --tensor-model-parallel-size 8"),
    (state(pp=3), 64, 4, "--num-layers 8 is not divisible by the number of pipeline stages"),
    (state(pp=2, vpp=8), 64, 4, "--num-layers 8 is not divisible by .* = 16"),
    (state(tp=2, sp=True), 63, 1, "--seq-length .* 63 is not divisible by --tensor-model-parallel-size 2"),
    (state(pp=4), 64, 2, "2 micro-batch.* cannot fill 4 pipeline stages.*--global-batch-size"),
    (state(pp=2, vpp=2), 64, 5, "interleaved 1F1B.*5 micro-batches per step is not a multiple of 2 rounds"),
])
def test_layouts_the_model_cannot_take_are_refused(parallel, seq, micro_batches, fragment):
    with pytest.raises(ConfigError, match=fragment):
        validate_layout(MODEL, parallel, seq, micro_batches)


def test_ffn_split_is_checked():
    model = ModelConfig(num_layers=8, hidden_size=64, num_attention_heads=8, num_query_groups=4, ffn_hidden_size=90)
    with pytest.raises(ConfigError, match="--ffn-hidden-size 90 is not divisible by --tensor-model-parallel-size 4"):
        validate_layout(model, state(tp=4), 64, 1)


def test_layouts_that_fit_pass():
    validate_layout(MODEL, state(tp=4, pp=2, dp=2, vpp=2, sp=True), 64, 4)
    validate_layout(MODEL, state(pp=4), 64, 10)


@pytest.mark.parametrize("config, fragment", [
    ({"virtual_pipeline_model_parallel_size": 2}, "needs --pipeline-model-parallel-size > 1"),
    ({"pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2,
      "num_layers_per_virtual_pipeline_stage": 1}, "not both"),
    ({"overlap_param_gather": True}, "--overlap-param-gather needs --use-distributed-optimizer"),
    ({"tensor_model_parallel_size": 0}, "--tensor-model-parallel-size must be positive"),
])
def test_inconsistent_parallel_flags_are_refused(config, fragment):
    with pytest.raises(ConfigError, match=fragment):
        ParallelConfig(**config)


def test_virtual_stages_from_either_flag():
    assert virtual_stages(ParallelConfig(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=3),
                          12) == 3
    assert virtual_stages(ParallelConfig(pipeline_model_parallel_size=2, num_layers_per_virtual_pipeline_stage=2),
                          12) == 3
    assert virtual_stages(ParallelConfig(), 12) == 1
    with pytest.raises(ConfigError, match="--num-layers 12 is not divisible by --num-layers-per-virtual"):
        virtual_stages(ParallelConfig(pipeline_model_parallel_size=2, num_layers_per_virtual_pipeline_stage=5), 12)


def test_interleaved_stages_loop_over_the_ranks():
    parallel = ParallelState(CPU, pp_size=2, vpp_size=2, rank=1)
    assert local_stage_indices(parallel) == [1, 3]
    stages = [stage_spec(8, 4, index) for index in range(4)]
    assert [list(stage.layers) for stage in stages] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [(stage.first, stage.last) for stage in stages] == [(True, False), (False, False), (False, False),
                                                               (False, True)]


def test_megatron_vocabulary_padding_follows_tp():
    assert padded_vocab_size(100_277, 128, 1) == 100_352
    assert padded_vocab_size(100_277, 128, 2) == 100_352
    assert padded_vocab_size(100_277, 128, 8) == 100_352
    assert padded_vocab_size(50_000, 128, 3) == 50_304  # 131 × 384


def test_buckets_and_zero1_owners_are_balanced():
    params = [torch.nn.Parameter(torch.empty(size)) for size in (5, 5, 3, 8, 2)]
    assert [[p.numel() for p in group] for group in _split(params, 10)] == [[5, 5], [3], [8, 2]]
    assert _owners([10, 3, 10], 2) == [0, 0, 1]
    assert _owners([4, 4, 4, 4], 2) == [0, 1, 0, 1]


def test_a_layout_bigger_than_the_world_is_a_cli_error(tmp_path):
    result = invoke_cli("trainer", "run", "--mock-data", "--seq-length", "16", "--train-iters", "1", "--preset",
                        "tiny", "--vocab-size", "64", "--tp", "2", env={"WORLD_SIZE": "1"})
    assert result.returncode == 1
    assert "world size 1" in result.stderr and "--tensor-model-parallel-size 2" in result.stderr
    assert "Traceback" not in result.stderr
