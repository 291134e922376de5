"""SwiGLU's activation ``silu(gate) * up`` on the fused ``[gate; up]`` GEMM output.

The forward is plain tensor code (Inductor fuses it into one pass at memory bandwidth); the backward is the
one-pass op :func:`trainer.kernels.swiglu.swiglu_backward` (a Triton kernel on CUDA).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trainer.kernels.swiglu import swiglu_backward


def swiglu(fused: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` for ``fused = [gate | up]`` along the last dimension (halves of equal width)."""
    return _SwiGLU.apply(fused)


def swiglu_values(fused: torch.Tensor) -> torch.Tensor:
    """The forward formula alone (for autograd functions that own the backward)."""
    gate, up = fused.chunk(2, dim=-1)
    return F.silu(gate) * up


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fused: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(fused)
        return swiglu_values(fused)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (fused,) = ctx.saved_tensors
        width = fused.shape[-1]
        rows = fused.reshape(-1, width)
        return swiglu_backward(rows, grad.reshape(-1, width // 2)).view(fused.shape)
