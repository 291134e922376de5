"""RoPE's backward on the fused QKV output as torch ops: the ``[dq; dk; dv]`` gradient (RoPE undone on ``dq`` and
``dk``, heads back in the fused weight's per-group layout), plain or cast to FP8 for delayed scaling (with its
amax, and its transpose on request).

Compiled from the autograd formula, Inductor rotates ``dk`` back into a buffer of its own, then reads ``dq``,
that buffer and ``dv`` again to assemble the gradient; cast to FP8 it makes one row reduction over a concatenation
whose every element loads from three masked sources. The Triton kernel reads each head's halves once and writes
its columns of the fused gradient (cast, when asked): fewer bytes, at a copy's bandwidth (bench/RESULTS.md).
"""

from __future__ import annotations

import torch

from trainer.kernels.fp8_cast import cast_outputs
from trainer.kernels.ops import kernel_op, launcher

#: The local head layout of a fused QKV output: (key/value groups, query heads per group, head size).
HeadShape = tuple[int, int, int]


def rotary_backward(grad: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The gradient of :func:`trainer.model.rotary.apply_rotary`'s input from its output's ``grad``: ``grad·cos``
    plus the transposed half-rotation of ``grad·sin`` (``[g₂; −g₁]``), in fp32."""
    grad = grad.float()
    first, second = (grad * sin).chunk(2, dim=-1)
    return grad * cos + torch.cat((second, -first), dim=-1)


def qkv_gradient(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 shape: HeadShape) -> torch.Tensor:
    """The fused QKV output's gradient [tokens, width] in ``dq``'s dtype from the gradients of q, k (rotated)
    and v [B, S, heads, head_dim], in tensor code (rounded once, from fp32)."""
    groups, per_group, head_dim = shape
    batch, size = dq.shape[:2]
    parts = (rotary_backward(dq, cos, sin).view(batch, size, groups, per_group, head_dim),
             rotary_backward(dk, cos, sin).unsqueeze(3), dv.float().unsqueeze(3))
    return torch.cat(parts, dim=3).to(dq.dtype).view(batch * size, -1)


@kernel_op("blendforge::rotary_backward_qkv")
def rotary_backward_qkv(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                        groups: int, per_group: int, head_dim: int) -> torch.Tensor:
    """:func:`qkv_gradient` [tokens, width] from ``dq`` [B, S, groups·per_group, head_dim], ``dk`` and ``dv``
    [B, S, groups, head_dim] and RoPE's tables ``cos``/``sin`` [B, S, 1, head_dim]: on CUDA the Triton kernel."""
    launch = launcher("rotary", qkv_gradient, dq.device)
    return launch(dq, dk, dv, cos, sin, (groups, per_group, head_dim))


def rotary_cast_reference(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor,
                          sin: torch.Tensor, shape: HeadShape, scale: torch.Tensor, dtype: torch.dtype,
                          transposed: bool = False) -> tuple[torch.Tensor, ...]:
    """:func:`rotary_backward_cast` (with ``transposed``: :func:`rotary_backward_cast_transposed`) in tensor
    code, with the arguments of the Triton kernels' ``launch``."""
    return cast_outputs(qkv_gradient(dq, dk, dv, cos, sin, shape), scale, dtype, transposed)


@kernel_op("blendforge::rotary_backward_cast")
def rotary_backward_cast(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         scale: torch.Tensor, dtype: torch.dtype, groups: int, per_group: int,
                         head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The QKV gradient [tokens, width] (:func:`qkv_gradient`) times ``scale``, saturated into ``dtype``, and its
    amax (fp32, 0-d), from ``dq`` [B, S, groups·per_group, head_dim], ``dk`` and ``dv`` [B, S, groups, head_dim]
    and RoPE's tables ``cos``/``sin`` [B, S, 1, head_dim]."""
    launch = launcher("rotary", rotary_cast_reference, dq.device)
    return launch(dq, dk, dv, cos, sin, (groups, per_group, head_dim), scale, dtype)


@kernel_op("blendforge::rotary_backward_cast_transposed")
def rotary_backward_cast_transposed(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor,
                                    sin: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, groups: int,
                                    per_group: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`rotary_backward_cast` with the cast gradient's transpose [width, tokens] (row-major, the weight
    gradient GEMM's left operand) between the two: on CUDA written by the same kernels, so no transposing copy
    reads the gradient again (``--fp8-transpose producers``)."""
    launch = launcher("rotary", rotary_cast_reference, dq.device)
    return launch(dq, dk, dv, cos, sin, (groups, per_group, head_dim), scale, dtype, transposed=True)
