"""Where this process sits in the TP × PP × DP grid, and the process groups of each dimension.

Rank layout (Megatron's default order): tensor parallel innermost, then data parallel, then pipeline
parallel outermost::

    rank = tp_rank + tp_size * (dp_rank + dp_size * pp_rank)

so the ranks of one TP group are neighbours (one node, NVLink) and a PP stage is a contiguous block.
The groups come from one ``DeviceMesh`` of shape (PP, DP, TP), which is exactly this order; the
checkpoints' DTensors live on its ``tp`` dimension. A world of one process creates no group at all.

Launch: ``torchrun`` sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``;
:func:`init_parallel` reads them (``env://``), on one node or many.
"""

from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from corpus.core.errors import ConfigError
from trainer.config.schema import ParallelConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ParallelState:
    """Sizes of each parallel dimension, this process's global rank, its device and process groups."""

    device: torch.device
    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    rank: int = 0
    vpp_size: int = 1  # model chunks per pipeline rank (interleaved 1F1B when > 1)
    sequence_parallel: bool = False
    mesh: DeviceMesh | None = field(default=None, compare=False, repr=False)
    owns_process_group: bool = field(default=False, compare=False)  # started by init_parallel, not a launcher

    def __post_init__(self) -> None:
        for name in ("tp_size", "pp_size", "dp_size", "vpp_size"):
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

    def group(self, dimension: str) -> dist.ProcessGroup | None:
        """The process group of ``tp``, ``dp`` or ``pp`` holding this rank (None in a one-process world)."""
        return None if self.mesh is None else self.mesh.get_group(dimension)

    def dp_global_rank(self, dp_rank: int) -> int:
        """Global rank of the member ``dp_rank`` of this rank's data-parallel group."""
        return self.tp_rank + self.tp_size * (dp_rank + self.dp_size * self.pp_rank)


def _world_from_env() -> tuple[int, int]:
    try:
        return int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    except ValueError:
        raise ConfigError(f"WORLD_SIZE={os.environ.get('WORLD_SIZE')!r} / RANK={os.environ.get('RANK')!r}: not "
                          "integers; launch with torchrun, which sets them") from None


def world_layout(config: ParallelConfig, world: int) -> tuple[int, int, int]:
    """(TP, PP, DP) for ``world`` processes; DP is inferred when not given. Errors say which flag to change."""
    tp, pp = config.tensor_model_parallel_size, config.pipeline_model_parallel_size
    if world % (tp * pp):
        raise ConfigError(f"world size {world} (torchrun --nnodes × --nproc-per-node) is not divisible by "
                          f"--tensor-model-parallel-size {tp} × --pipeline-model-parallel-size {pp} = {tp * pp}; "
                          "change the sizes or the number of processes")
    dp = world // (tp * pp)
    if config.data_parallel_size is not None and config.data_parallel_size != dp:
        raise ConfigError(f"--data-parallel-size {config.data_parallel_size} but the world of {world} processes "
                          f"with TP {tp} × PP {pp} leaves {dp}; drop --data-parallel-size (it is inferred) or "
                          f"launch {tp * pp * config.data_parallel_size} processes")
    return tp, pp, dp


def _backend(config: ParallelConfig, device: torch.device) -> str:
    if config.distributed_backend != "auto":
        if config.distributed_backend == "nccl" and device.type != "cuda":
            raise ConfigError("--distributed-backend nccl needs CUDA devices; use gloo (or auto) on CPU")
        return config.distributed_backend
    return "nccl" if device.type == "cuda" else "gloo"


def init_parallel(config: ParallelConfig, device: torch.device, virtual_stages: int = 1) -> ParallelState:
    """The parallel state of this process, from torchrun's environment: starts the default process group
    (unless the caller already did) and builds the (PP, DP, TP) device mesh."""
    world, rank = _world_from_env()
    tp, pp, dp = world_layout(config, world)
    sequence_parallel = config.sequence_parallel and tp > 1
    if config.sequence_parallel and tp == 1:
        log.warning("--sequence-parallel ignored: it needs --tensor-model-parallel-size > 1")
    if world == 1:
        return ParallelState(device=device, vpp_size=virtual_stages)
    owns = not dist.is_initialized()
    if owns:
        backend = _backend(config, device)
        dist.init_process_group(backend, init_method="env://", world_size=world, rank=rank,
                                timeout=datetime.timedelta(minutes=config.distributed_timeout_minutes),
                                device_id=device if device.type == "cuda" else None)
    elif dist.get_world_size() != world or dist.get_rank() != rank:
        raise ConfigError(f"a process group of world {dist.get_world_size()} (rank {dist.get_rank()}) is already "
                          f"running, but WORLD_SIZE={world}, RANK={rank}")
    mesh = init_device_mesh(device.type, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
    return ParallelState(device=device, tp_size=tp, pp_size=pp, dp_size=dp, rank=rank, vpp_size=virtual_stages,
                         sequence_parallel=sequence_parallel, mesh=mesh, owns_process_group=owns)


def shutdown_parallel(state: ParallelState) -> None:
    """Destroy the default process group if :func:`init_parallel` started it (a caller's stays up)."""
    if state.owns_process_group and dist.is_initialized():
        dist.destroy_process_group()
