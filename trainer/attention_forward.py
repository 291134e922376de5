"""A causal FlashAttention forward in Triton, whose outputs cuDNN's backward takes.

The kernel computes ``softmax(q kᵀ · scale) v`` with the causal mask for q [B, S, H, D] and k, v [B, S, G, D] (G
key/value heads) in any layout whose head dimension is contiguous, streaming key blocks through TMA tensor
descriptors and keeping the running row maximum and sum in fp32 (online softmax, in base 2). It returns the output
[B, S, H, D] (contiguous: the attention-out GEMM's operand) and each row's log-sum-exp in natural log, the
statistics SDPA's cuDNN backward reads, so a forward of ours pairs with cuDNN's backward
(:mod:`trainer.attention`'s ``triton_cudnn`` backend).

Programs take one block of query rows of one head; the longest rows of the causal triangle are launched first,
so the short ones fill the last wave.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tiling:
    """The launch shape: ``rows`` query rows and ``keys`` key rows a step, ``warps`` warps, ``stages`` stages
    of the key/value pipeline."""

    rows: int = 128
    keys: int = 64
    warps: int = 8
    stages: int = 3


TILING = Tiling()


def supports(seq_length: int, head_dim: int, tiling: Tiling = TILING) -> bool:
    """Whether the kernel takes this shape: whole query blocks, a head size the tensor cores and TMA take."""
    return seq_length % tiling.rows == 0 and tiling.rows % tiling.keys == 0 and head_dim in (64, 128)


@functools.cache
def triton_attention_forward():
    """The launcher ``(q, k, v, scale, tiling) -> (out, logsumexp [B, H, S] fp32)``, or None where Triton is not
    importable. Built on first use (the kernels' module is imported then), so ``TRITON_INTERPRET=1`` set before
    runs it on the CPU."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor

        from trainer.attention_forward_kernel import attention_forward_kernel
    except ImportError:
        return None

    def token_rows(t: torch.Tensor) -> tuple[torch.Tensor, int]:
        """[B, S, heads, D] as a row-major [B·S, width] matrix whose row is a token's heads, and the columns from one
        head to the next (the batch stride must be S times the token stride)."""
        batch, size, heads, dim = t.shape
        if t.stride(-1) != 1 or (batch > 1 and t.stride(0) != size * t.stride(1)):
            t = t.contiguous()
        return t.as_strided((batch * size, (heads - 1) * t.stride(2) + dim), (t.stride(1), 1)), t.stride(2)

    def launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
               tiling: Tiling = TILING) -> tuple[torch.Tensor, torch.Tensor]:
        batch, size, heads, dim = q.shape
        scale = 1 / math.sqrt(dim) if scale is None else scale
        out = torch.empty(batch, size, heads, dim, dtype=q.dtype, device=q.device)
        lse = torch.empty(batch, heads, size, dtype=torch.float32, device=q.device)
        (q_rows, q_heads), (k_rows, k_heads), (v_rows, v_heads), (o_rows, _) = map(token_rows, (q, k, v, out))
        attention_forward_kernel[(batch * heads, size // tiling.rows)](
            TensorDescriptor.from_tensor(q_rows, [tiling.rows, dim]), q_heads,
            TensorDescriptor.from_tensor(k_rows, [tiling.keys, dim]), k_heads,
            TensorDescriptor.from_tensor(v_rows, [tiling.keys, dim]), v_heads,
            TensorDescriptor.from_tensor(o_rows, [tiling.rows, dim]), lse, size, heads, heads // k.shape[2],
            scale * math.log2(math.e), ROWS=tiling.rows, KEYS=tiling.keys, HEAD_DIM=dim, num_warps=tiling.warps,
            num_stages=tiling.stages)
        return out, lse

    return launch
