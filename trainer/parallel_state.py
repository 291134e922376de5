"""Where this process sits in the TP × PP × DP grid, and the process groups of each dimension.

Rank layout (Megatron's default order): tensor parallel innermost, then data parallel, then pipeline
parallel outermost::

    rank = tp_rank + tp_size * (dp_rank + dp_size * pp_rank)

so the ranks of one TP group are neighbours (one node, NVLink) and a PP stage is a contiguous block.
Today every size is 1 and no process group is created; the 3D-parallel work fills in the groups. Model
layers already take this object, so they partition by ``tp_size`` and ask it for their group.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from trainer.errors import ConfigError


@dataclass(frozen=True)
class ParallelState:
    """Sizes of each parallel dimension, this process's global rank and its device."""

    device: torch.device
    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    rank: int = 0

    def __post_init__(self) -> None:
        for name in ("tp_size", "pp_size", "dp_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank {self.rank} outside a world of {self.world_size} (TP×PP×DP)")

    @property
    def world_size(self) -> int:
        """Number of processes: TP × PP × DP."""
        return self.tp_size * self.pp_size * self.dp_size

    @property
    def tp_rank(self) -> int:
        """Rank inside the tensor-parallel group (innermost)."""
        return self.rank % self.tp_size

    @property
    def dp_rank(self) -> int:
        """Rank inside the data-parallel group; the loader shards samples by it."""
        return (self.rank // self.tp_size) % self.dp_size

    @property
    def pp_rank(self) -> int:
        """Pipeline stage of this process (outermost)."""
        return self.rank // (self.tp_size * self.dp_size)

    @property
    def is_first_stage(self) -> bool:
        """Holds the embedding."""
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        """Holds the output layer and computes the loss."""
        return self.pp_rank == self.pp_size - 1

    @property
    def is_logging_rank(self) -> bool:
        """The one process that prints, writes metrics and TensorBoard files."""
        return self.rank == 0


def single_process_state(device: torch.device) -> ParallelState:
    """The parallel state of a one-process run; refuses a multi-process launch it cannot serve yet."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != 1:
        raise ConfigError(
            f"WORLD_SIZE={world}: this trainer runs one process for now (tensor/pipeline/data parallel "
            "training is not built yet); launch it without torchrun or with --nproc-per-node 1"
        )
    return ParallelState(device=device)
