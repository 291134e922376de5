"""The sum of the squares of every gradient, what the global gradient norm is made of before clipping.

On CUDA it is one Triton launch over all gradients: ``torch._foreach_norm`` launches one kernel per ~21M
elements of bf16 gradients, each ending in a tail of idle SMs (dozens of launches a step for a 1.3B model;
bench/RESULTS.md). Elsewhere, torch's per-tensor norms.
"""

from __future__ import annotations

from typing import Callable

import torch

from trainer.kernels.ops import triton_kernels


def foreach_sum_of_squares(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Σ x² over every element of ``tensors`` (0-d fp32), from torch's per-tensor norms."""
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(tensors)).float()).square()


def sum_of_squares_function(device: torch.device) -> Callable[[list[torch.Tensor]], torch.Tensor]:
    """``Σ x²`` over a list of tensors on ``device`` as a 0-d fp32 tensor there: the one-launch Triton kernel
    on CUDA, :func:`foreach_sum_of_squares` elsewhere or without Triton."""
    module = triton_kernels("grad_norm") if device.type == "cuda" else None
    return module.sum_of_squares if module is not None else foreach_sum_of_squares
