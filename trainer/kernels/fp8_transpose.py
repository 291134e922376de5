"""The transposed FP8 copies of the weight-gradient GEMM as an op of their own (``--fp8-transpose kernel``).

``dW = dyᵀ · x`` contracts over the tokens, and Hopper's FP8 GEMMs need the contracted dimension contiguous in
both operands, so every FP8 linear's backward needs ``x`` and ``dy`` transposed (TN layout). Compiled, Inductor
writes those copies inside the kernel that produces the tensor; when that kernel is a row reduction (RMSNorm,
RoPE's backward), its transposed 1-byte stores go across rows at a fraction of the bandwidth. Made by this op
instead, the producer writes only the row-major copy and a tiled transpose moves 2 bytes an element: faster in
the step, at some peak memory, since the partitioner cannot recompute an op it does not see into
(bench/RESULTS.md).

The op is a ``torch.library.triton_op``: compiled, AOTAutograd sees the kernel itself and Inductor launches it
from its own generated code (a plain custom op costs a dispatcher and Python launcher call each time, enough to
make the FP8 forward pass host-bound). NOTE: Inductor compiles the kernel for the alignment it can prove of its
arguments: keep the producers of its inputs visible to Inductor (behind an opaque op the source was not known
16-byte aligned and the transpose ran at half speed).
"""

from __future__ import annotations

import torch

from trainer.kernels.ops import kernel_op, launcher


@kernel_op("blendforge::fp8_transpose")
def fp8_transpose(matrix: torch.Tensor) -> torch.Tensor:
    """``matrix.t().contiguous()`` for a 2-D tensor of 1-byte elements (FP8), always a new tensor: on CUDA
    the tiled Triton kernel, elsewhere (or without Triton) a copy in tensor code."""
    return launcher("fp8_transpose", _transpose_reference, matrix.device)(matrix)


def _transpose_reference(matrix: torch.Tensor) -> torch.Tensor:
    """:func:`fp8_transpose` in tensor code."""
    return matrix.t().clone(memory_format=torch.contiguous_format)
