"""The documented rank layout (TP innermost, then DP, then PP), DP inferred from the world size, and
the one-process state torchrun-less runs get."""

from __future__ import annotations

import pytest
import torch

from corpus.core.errors import ConfigError
from trainer.config.schema import ParallelConfig
from trainer.parallel.state import ParallelState, init_parallel, world_layout

CPU = torch.device("cpu")


def test_rank_layout_tp_innermost_pp_outermost():
    coordinates = []
    for rank in range(8):
        state = ParallelState(CPU, tp_size=2, pp_size=2, dp_size=2, rank=rank)
        coordinates.append((state.pp_rank, state.dp_rank, state.tp_rank))
        assert rank == state.tp_rank + 2 * (state.dp_rank + 2 * state.pp_rank)
        assert state.dp_global_rank(state.dp_rank) == rank
    assert coordinates == [(p, d, t) for p in range(2) for d in range(2) for t in range(2)]
    assert ParallelState(CPU, pp_size=2, rank=0).is_first_stage
    assert ParallelState(CPU, pp_size=2, rank=1).is_last_stage


@pytest.mark.parametrize("tp, dp, pp", [(2, 2, 2), (4, 2, 1), (1, 4, 2), (2, 1, 4)])
def test_groups_are_megatrons(megatron_rank_generator, tp, dp, pp):
    """Megatron's default order (tp-cp-ep-dp-pp) and the (PP, DP, TP) device mesh make the same groups."""
    world = tp * dp * pp
    states = [ParallelState(CPU, tp_size=tp, pp_size=pp, dp_size=dp, rank=rank) for rank in range(world)]
    megatron = megatron_rank_generator(tp, 1, dp, pp, 1, "tp-cp-ep-dp-pp")
    mesh = torch.arange(world).view(pp, dp, tp)  # what init_device_mesh((PP, DP, TP)) lays out
    coordinate = {"tp": lambda s: (s.pp_rank, s.dp_rank), "dp": lambda s: (s.pp_rank, s.tp_rank),
                  "pp": lambda s: (s.dp_rank, s.tp_rank)}
    mesh_groups = {"tp": mesh.reshape(-1, tp), "dp": mesh.transpose(1, 2).reshape(-1, dp),
                   "pp": mesh.permute(1, 2, 0).reshape(-1, pp)}
    for dimension, key in coordinate.items():
        ours = sorted(sorted(s.rank for s in states if key(s) == key(member)) for member in states)
        ours = [group for i, group in enumerate(ours) if group not in ours[:i]]
        assert ours == sorted(megatron.get_ranks(dimension)) == sorted(mesh_groups[dimension].tolist())


def test_sizes_validated():
    with pytest.raises(ConfigError):
        ParallelState(CPU, tp_size=0)
    with pytest.raises(ConfigError, match="outside a world of 2"):
        ParallelState(CPU, dp_size=2, rank=2)


def test_data_parallel_size_is_inferred_from_the_world():
    assert world_layout(ParallelConfig(tensor_model_parallel_size=2, pipeline_model_parallel_size=2), 16) == (2, 2, 4)
    assert world_layout(ParallelConfig(data_parallel_size=8), 8) == (1, 1, 8)


@pytest.mark.parametrize("config, world, fragment", [
    (ParallelConfig(tensor_model_parallel_size=3), 8,
     "world size 8 .* not divisible by --tensor-model-parallel-size 3"),
    (ParallelConfig(tensor_model_parallel_size=2, data_parallel_size=3), 8, "--data-parallel-size 3 .* leaves 4"),
])
def test_a_world_the_layout_cannot_fill_names_the_flags(config, world, fragment):
    with pytest.raises(ConfigError, match=fragment):
        world_layout(config, world)


def test_one_process_world_needs_no_process_group(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    state = init_parallel(ParallelConfig(), CPU)
    assert state.world_size == 1 and state.mesh is None and state.group("tp") is None
    with pytest.raises(ConfigError, match="not divisible"):
        init_parallel(ParallelConfig(tensor_model_parallel_size=2), CPU)
