"""Autograd-correct collectives of tensor and sequence parallelism (Megatron's "mappings").

Activations are ``[batch, sequence, hidden]``; sequence parallelism splits dimension 1. Each function
is the forward of a pair whose backward is its dual:

| function | forward | backward |
|---|---|---|
| copy to the TP group | identity | all-reduce |
| reduce from the TP group | all-reduce | identity |
| gather the sequence | all-gather along the sequence | reduce-scatter along the sequence |
| reduce-scatter the sequence | reduce-scatter along the sequence | all-gather along the sequence |

:class:`TensorParallel` picks the pair a layer needs (with or without sequence parallelism) and is
the identity for a TP size of 1, so a one-GPU run pays nothing.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from trainer.parallel.state import ParallelState

SEQUENCE_DIM = 1

# NOTE: functional collectives (a new tensor, its wait a data dependency), not the in-place
# ``dist.*_into_tensor`` calls: compiled blocks mixing those with our FP8 GEMM train wrong on two GPUs, the kind
# of ordering bug functional collectives exist to avoid.


def all_reduce(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Sum of ``x`` over ``group`` (a new tensor; ``x`` is left alone)."""
    return funcol.wait_tensor(funcol.all_reduce(x, "sum", group))


def gather_sequence(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Concatenate every rank's ``x`` along the sequence dimension, in rank order."""
    size = dist.get_world_size(group)
    out = funcol.wait_tensor(funcol.all_gather_tensor(x.contiguous(), 0, group))  # [size × B, …]
    return out.unflatten(0, (size, -1)).movedim(0, SEQUENCE_DIM).flatten(SEQUENCE_DIM, SEQUENCE_DIM + 1)


def reduce_scatter_sequence(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Sum ``x`` over ``group`` and keep this rank's slice of the sequence."""
    size = dist.get_world_size(group)
    if x.shape[SEQUENCE_DIM] % size:
        raise ValueError(f"sequence length {x.shape[SEQUENCE_DIM]} is not divisible by the TP size {size}")
    pieces = x.unflatten(SEQUENCE_DIM, (size, -1)).movedim(SEQUENCE_DIM, 0).contiguous()
    # NOTE: gloo wants [size × B, …], not [size, B, …]
    return funcol.wait_tensor(funcol.reduce_scatter_tensor(pieces.flatten(0, 1), "sum", 0, group))


def _dual(forward: Callable, backward: Callable, name: str) -> type[torch.autograd.Function]:
    """An autograd function computing ``forward(x, group)`` whose backward is ``backward(grad, group)``."""

    def run_forward(ctx, x, group):
        ctx.group = group
        return forward(x, group)

    def run_backward(ctx, grad):
        return backward(grad, ctx.group), None

    return type(name, (torch.autograd.Function,), {"forward": staticmethod(run_forward),
                                                   "backward": staticmethod(run_backward)})


_CopyToGroup = _dual(lambda x, group: x, all_reduce, "_CopyToGroup")
_GatherSequence = _dual(gather_sequence, reduce_scatter_sequence, "_GatherSequence")
_ReduceScatterSequence = _dual(reduce_scatter_sequence, gather_sequence, "_ReduceScatterSequence")
_ReduceFromGroup = _dual(all_reduce, lambda grad, group: grad, "_ReduceFromGroup")


class TensorParallel:
    """The TP group as the layers see it: where a column-parallel GEMM takes its input from and where a
    row-parallel GEMM's partial sums go, with or without sequence parallelism."""

    def __init__(self, parallel: ParallelState) -> None:
        self.size, self.rank = parallel.tp_size, parallel.tp_rank
        self.sequence_parallel = parallel.sequence_parallel
        self.group = parallel.group("tp") if self.size > 1 else None

    def column_input(self, x: torch.Tensor) -> torch.Tensor:
        """The full-sequence input every rank's column shard multiplies (gathered under sequence parallelism).

        NOTE: under autocast the input is cast to the compute dtype first (the GEMM would cast it anyway),
        so the collectives move half the bytes, as Megatron's bf16 activations do."""
        if self.size == 1:
            return x
        kind = x.device.type
        if torch.is_autocast_enabled(kind) and x.dtype == torch.float32:
            x = x.to(torch.get_autocast_dtype(kind))
        if self.sequence_parallel:
            return _GatherSequence.apply(x, self.group)
        return _CopyToGroup.apply(x, self.group)

    def row_output(self, partial: torch.Tensor) -> torch.Tensor:
        """Sum the ranks' partial outputs (keeping this rank's sequence slice under sequence parallelism)."""
        if self.size == 1:
            return partial
        if self.sequence_parallel:
            return _ReduceScatterSequence.apply(partial, self.group)
        return _ReduceFromGroup.apply(partial, self.group)
