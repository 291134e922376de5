"""Building blocks of the GPT that know about tensor parallelism: parallel linears, the vocab-parallel
embedding, RMSNorm and rotary embeddings.

Each parallel layer takes the :class:`~trainer.parallel_state.ParallelState` and stores only its shard
(``tp_size`` is 1 today, so the shard is the whole weight). ``partition_dim`` names the dimension a
weight is split on, which resharding checkpoints need. The matrix multiply itself is a pluggable
*local GEMM* from :data:`GEMMS`, so an FP8 backend can replace it without touching the model.

NOTE: parameters are created on whatever device is current (the model is built on ``meta`` and
materialised with ``to_empty``); :meth:`reset_parameters` is what fills them.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from trainer.errors import ConfigError
from trainer.parallel_state import ParallelState

#: A local GEMM computes ``x @ weight.T`` for one shard (``torch.nn.functional.linear``'s contract).
LocalGemm = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

GEMMS: dict[str, LocalGemm] = {
    "plain": F.linear,
}


def local_gemm(name: str) -> LocalGemm:
    """The local GEMM registered as ``name``."""
    if name not in GEMMS:
        raise ConfigError(f"GEMM backend {name!r} unknown; choose one of {', '.join(GEMMS)}")
    return GEMMS[name]


def _shard(size: int, parts: int, what: str) -> int:
    if size % parts:
        raise ConfigError(f"{what} ({size}) is not divisible by the tensor-parallel size {parts}")
    return size // parts


class _ShardedWeight(nn.Module):
    """A module holding one tensor-parallel shard of a [rows, cols] weight, normal(0, init_std) init."""

    partition_dim: int

    def __init__(self, rows: int, cols: int, init_std: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(rows, cols))
        self.init_std = init_std

    def reset_parameters(self) -> None:
        """Normal(0, init_std) init."""
        nn.init.normal_(self.weight, mean=0.0, std=self.init_std)


class _ShardedLinear(_ShardedWeight):
    """A bias-free linear layer computing its shard with the local GEMM."""

    def __init__(self, in_local: int, out_local: int, init_std: float, gemm: LocalGemm) -> None:
        super().__init__(out_local, in_local, init_std)
        self.gemm = gemm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gemm(x, self.weight)


class ColumnParallelLinear(_ShardedLinear):
    """Output features split across the TP group (each rank computes a slice of the outputs)."""

    partition_dim = 0

    def __init__(self, in_features: int, out_features: int, parallel: ParallelState, init_std: float,
                 gemm: LocalGemm) -> None:
        super().__init__(in_features, _shard(out_features, parallel.tp_size, "output features"), init_std, gemm)


class RowParallelLinear(_ShardedLinear):
    """Input features split across the TP group (partial outputs are summed over the group)."""

    partition_dim = 1

    def __init__(self, in_features: int, out_features: int, parallel: ParallelState, init_std: float,
                 gemm: LocalGemm) -> None:
        super().__init__(_shard(in_features, parallel.tp_size, "input features"), out_features, init_std, gemm)


class VocabParallelEmbedding(_ShardedWeight):
    """Token embedding with the (padded) vocabulary split across the TP group."""

    partition_dim = 0

    def __init__(self, vocab_size: int, hidden_size: int, parallel: ParallelState, init_std: float) -> None:
        super().__init__(_shard(vocab_size, parallel.tp_size, "vocabulary"), hidden_size, init_std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.embedding(tokens, self.weight)


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in fp32 (stable under bf16 autocast), scaled by a learned weight."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(hidden_size))
        self.eps = eps

    def reset_parameters(self) -> None:
        """Weight of ones."""
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)  # fused kernel where torch has one
        return self.weight * normed.to(x.dtype)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding, non-interleaved halves (Llama/HF and Megatron's default layout)."""

    def __init__(self, head_dim: int, base: float, max_positions: int) -> None:
        super().__init__()
        if head_dim % 2:
            raise ConfigError(f"head size {head_dim} must be even for rotary embeddings")
        self.head_dim, self.base, self.max_positions = head_dim, base, max_positions
        self.register_buffer("cos", torch.empty(max_positions, head_dim), persistent=False)
        self.register_buffer("sin", torch.empty(max_positions, head_dim), persistent=False)

    def reset_parameters(self) -> None:
        """Fill the cos/sin tables (fp32), as transformers' Llama computes them."""
        device = self.cos.device
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.head_dim, 2, device=device, dtype=torch.int64).float()
                                        / self.head_dim))
        angles = torch.outer(torch.arange(self.max_positions, device=device, dtype=torch.int64).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.cos.copy_(angles.cos())
        self.sin.copy_(angles.sin())

    def forward(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [B, S, 1, head_dim] for ``position_ids`` [B, S], computed once per forward pass."""
        return self.cos[position_ids].unsqueeze(2).to(dtype), self.sin[position_ids].unsqueeze(2).to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` [B, S, heads, head_dim] by the tables of :class:`RotaryEmbedding`."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


def scaled_init_std(std: float, num_layers: int) -> float:
    """Megatron's init for the projections that write into the residual stream: std / sqrt(2L)."""
    return std / math.sqrt(2.0 * num_layers)
