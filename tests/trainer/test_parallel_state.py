"""The documented rank layout (TP innermost, then DP, then PP) and the one-process guard."""

from __future__ import annotations

import pytest
import torch

from trainer.errors import ConfigError
from trainer.parallel_state import ParallelState, single_process_state

CPU = torch.device("cpu")


def test_rank_layout_tp_innermost_pp_outermost():
    coordinates = []
    for rank in range(8):
        state = ParallelState(CPU, tp_size=2, pp_size=2, dp_size=2, rank=rank)
        coordinates.append((state.pp_rank, state.dp_rank, state.tp_rank))
        assert rank == state.tp_rank + 2 * (state.dp_rank + 2 * state.pp_rank)
    assert coordinates == [(p, d, t) for p in range(2) for d in range(2) for t in range(2)]
    assert ParallelState(CPU, pp_size=2, rank=0).is_first_stage
    assert ParallelState(CPU, pp_size=2, rank=1).is_last_stage


def test_sizes_validated():
    with pytest.raises(ConfigError):
        ParallelState(CPU, tp_size=0)
    with pytest.raises(ConfigError, match="outside a world of 2"):
        ParallelState(CPU, dp_size=2, rank=2)


def test_multi_process_launch_refused_with_a_message(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ConfigError, match="WORLD_SIZE=4"):
        single_process_state(CPU)
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert single_process_state(CPU).world_size == 1
