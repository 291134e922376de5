"""Rotary position embeddings applied to the fused QKV output: :func:`rotary_heads` splits the QKV GEMM's output
into q, k (rotated) and v.

The forward is plain tensor code (Inductor fuses it into one pass); the backward is the one-pass op
:func:`trainer.kernels.rotary.rotary_backward_qkv` (a Triton kernel on CUDA).
"""

from __future__ import annotations

import torch

from trainer.kernels.rotary import HeadShape, rotary_backward_qkv

__all__ = ["HeadShape", "apply_rotary", "rotary_heads", "rotary_heads_values"]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` [B, S, heads, head_dim] by the tables of :class:`trainer.model.layers.RotaryEmbedding`."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


def rotary_heads(qkv: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                 shape: HeadShape) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k (rotated) and v [B, S, heads, head_dim] from a fused QKV output [B, S, width] laid out per group as
    ``[q heads…, k, v]`` (the qkv weight's row layout); the backward pass is :func:`rotary_backward_qkv`."""
    return _RotaryHeads.apply(qkv, *rotary, shape)


def rotary_heads_values(qkv: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                        shape: HeadShape) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The forward formula of :func:`rotary_heads` alone (for autograd functions that own the backward)."""
    groups, per_group, head_dim = shape
    batch, size = qkv.shape[:2]
    qkv = qkv.view(batch, size, groups, per_group + 2, head_dim)
    q = apply_rotary(qkv[:, :, :, :per_group].reshape(batch, size, groups * per_group, head_dim), *rotary)
    k = apply_rotary(qkv[:, :, :, per_group], *rotary)
    return q, k, qkv[:, :, :, per_group + 1]


class _RotaryHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, shape: HeadShape):
        ctx.save_for_backward(cos, sin)
        ctx.shape, ctx.qkv_shape = shape, qkv.shape
        return rotary_heads_values(qkv, (cos, sin), shape)

    @staticmethod
    def backward(ctx, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor):
        cos, sin = ctx.saved_tensors
        return rotary_backward_qkv(dq, dk, dv, cos, sin, *ctx.shape).view(ctx.qkv_shape), None, None, None
