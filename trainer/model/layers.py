"""Building blocks of the GPT that know about tensor parallelism: parallel linears, the vocab-parallel
embedding, RMSNorm and the rotary embeddings' tables (their application: :mod:`trainer.model.rotary`).

Each parallel layer takes the :class:`~trainer.parallel.state.ParallelState` and stores only its shard
and calls the collectives of :class:`~trainer.parallel.collectives.TensorParallel` around its GEMM.
``partition_dim`` names the dimension a weight is split on and ``logical_shape`` the TP-independent
shape checkpoints store (see :class:`ShardedWeight`). The matrix multiply itself is a pluggable
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

from corpus.core.errors import ConfigError
from trainer.model.rotary import HeadShape, rotary_heads
from trainer.model.swiglu import swiglu
from trainer.parallel.collectives import TensorParallel
from trainer.parallel.state import ParallelState

#: A local GEMM computes ``x @ weight.T`` for one shard (``torch.nn.functional.linear``'s contract). A GEMM
#: with per-linear state (delayed FP8 scaling) has a ``new_scales()`` method; each linear then owns what it
#: returns (a module, as ``fp8_scales``) and passes it as a third argument. A GEMM may also have a
#: ``swiglu(x, weight, scales)`` method: ``swiglu`` of its product, fused (see ColumnParallelLinear.swiglu), and
#: a ``rotary_heads(x, weight, scales, rotary, shape)`` one (see ColumnParallelLinear.rotary_heads).
LocalGemm = Callable[..., torch.Tensor]

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


class ShardedWeight(nn.Module):
    """A module holding one tensor-parallel shard of a weight, normal(0, init_std) init.

    The weight is seen through a *logical* shape that does not depend on the TP size: ``[rows, cols]``,
    or ``[stacked, rows / stacked, cols]`` for matrices fused along their rows (SwiGLU's ``[gate; up]``,
    each half split on its own). A shard is a contiguous slice of the logical weight along
    ``logical_dim``; checkpoints store the logical weight, so they reshard to any TP size.
    """

    partition_dim: int  # dimension of the 2-D local weight the shards split
    split_what: str  # what the split divides, for the error message

    def __init__(self, rows: int, cols: int, init_std: float, parallel: ParallelState, stacked: int = 1) -> None:
        super().__init__()
        self.tp = TensorParallel(parallel)
        self.logical_shape = (stacked, rows // stacked, cols) if stacked > 1 else (rows, cols)
        self.logical_dim = 1 if stacked > 1 else self.partition_dim
        local = list(self.logical_shape)
        local[self.logical_dim] = _shard(local[self.logical_dim], self.tp.size, self.split_what)
        self.weight = nn.Parameter(torch.empty(math.prod(local[:-1]), local[-1]))
        self.init_std = init_std

    @property
    def local_logical_shape(self) -> tuple[int, ...]:
        """The logical shape of this rank's shard."""
        shape = list(self.logical_shape)
        shape[self.logical_dim] //= self.tp.size
        return tuple(shape)

    def logical_weight(self, tensor: torch.Tensor | None = None) -> torch.Tensor:
        """``tensor`` (default: the weight; any tensor of its shape, e.g. an optimizer state) viewed in the
        logical shape of this shard."""
        return (self.weight if tensor is None else tensor).view(self.local_logical_shape)

    def reset_parameters(self) -> None:
        """Normal(0, init_std) init of the *whole* logical weight from the current RNG, then keep this rank's
        shard: a model initialises to the same weights at every TP size."""
        full = torch.empty(self.logical_shape, device=self.weight.device).normal_(0.0, self.init_std)
        size = self.logical_shape[self.logical_dim] // self.tp.size
        self.logical_weight().copy_(full.narrow(self.logical_dim, self.tp.rank * size, size))


class _ShardedLinear(ShardedWeight):
    """A bias-free linear layer computing its shard with the local GEMM."""

    def __init__(self, in_features: int, out_features: int, parallel: ParallelState, init_std: float,
                 gemm: LocalGemm, stacked: int = 1) -> None:
        super().__init__(out_features, in_features, init_std, parallel, stacked)
        self.gemm = gemm
        self.fp8_scales = gemm.new_scales() if hasattr(gemm, "new_scales") else None

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        """This shard's ``x @ weight.T`` through the local GEMM (with its scales, when it keeps any)."""
        if self.fp8_scales is None:
            return self.gemm(x, self.weight)
        return self.gemm(x, self.weight, self.fp8_scales)


class ColumnParallelLinear(_ShardedLinear):
    """Output features split across the TP group (each rank computes a slice of the outputs). ``stacked``
    matrices fused along the outputs (``[gate; up]``) are split each on its own, so a shard is
    ``[gate_r; up_r]``."""

    partition_dim, split_what = 0, "output features"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._matmul(self.tp.column_input(x))

    def swiglu(self, x: torch.Tensor) -> torch.Tensor:
        """``swiglu(self(x))`` for a ``[gate; up]`` weight (``stacked=2``: each shard holds both halves of its
        slice), through the local GEMM's fused version where it has one (FP8 delayed scaling's)."""
        return self._fused("swiglu", swiglu, x)

    def rotary_heads(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                     shape: HeadShape) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:func:`rotary_heads` of ``self(x)`` for a fused QKV weight, through the local GEMM's fused version
        where it has one (FP8 delayed scaling's: its backward casts the QKV gradient in RoPE's kernel)."""
        return self._fused("rotary_heads", rotary_heads, x, rotary, shape)

    def _fused(self, name: str, then: Callable, x: torch.Tensor, *args):
        """``then(self(x), *args)``, or the local GEMM's method ``name`` computing it fused where it has one."""
        x = self.tp.column_input(x)
        fused = getattr(self.gemm, name, None)
        return then(self._matmul(x), *args) if fused is None else fused(x, self.weight, self.fp8_scales, *args)


class RowParallelLinear(_ShardedLinear):
    """Input features split across the TP group (partial outputs are summed over the group)."""

    partition_dim, split_what = 1, "input features"

    def __init__(self, in_features: int, out_features: int, parallel: ParallelState, init_std: float,
                 gemm: LocalGemm) -> None:
        super().__init__(in_features, out_features, parallel, init_std, gemm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tp.row_output(self._matmul(x))


class VocabParallelEmbedding(ShardedWeight):
    """Token embedding with the (padded) vocabulary split across the TP group: each rank looks up the
    ids in its range, zeros the others, and the partial embeddings are summed over the group."""

    partition_dim, split_what = 0, "vocabulary"

    def __init__(self, vocab_size: int, hidden_size: int, parallel: ParallelState, init_std: float) -> None:
        super().__init__(vocab_size, hidden_size, init_std, parallel)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.tp.size == 1:
            return F.embedding(tokens, self.weight)
        start = self.tp.rank * self.weight.shape[0]
        outside = (tokens < start) | (tokens >= start + self.weight.shape[0])
        partial = F.embedding((tokens - start).masked_fill(outside, 0), self.weight)
        return self.tp.row_output(partial.masked_fill(outside.unsqueeze(-1), 0.0))


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in fp32 (stable under bf16 autocast), scaled by a learned weight."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(hidden_size))
        self.eps = eps

    def reset_parameters(self) -> None:
        """Weight of ones."""
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor, addend: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` (plus ``addend``: the final norm takes the last block's MLP output still to be added, so that
        compiled, the add and the norm are one kernel) normalised and scaled in fp32, returned in the dtype of
        ``x`` (one rounding)."""
        if addend is not None:
            x = x + addend
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)  # fused kernel where torch has one
        return (normed * self.weight).to(x.dtype)


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


def scaled_init_std(std: float, num_layers: int) -> float:
    """Megatron's init for the projections that write into the residual stream: std / sqrt(2L)."""
    return std / math.sqrt(2.0 * num_layers)
