"""SwiGLU's backward as torch ops: the ``[dgate | dup]`` gradient of ``silu(gate) * up``, plain or cast to FP8
for delayed scaling (with its amax, and its transpose on request).

Compiled from the autograd formula, Inductor lowers the gradient as a pointwise ``cat`` whose halves each reload
the inputs (7 tensor-sized transfers where 5 do); the Triton kernel reads ``gate``, ``up`` and the output gradient
once and writes both halves, about twice as fast in the step (bench/RESULTS.md). Under delayed scaling the
gradient's only readers are the FP8 GEMMs of the ``[gate; up]`` linear, so the same kernel writes it already
scaled and cast: the bf16 gradient is never stored, nor read again by a cast.
"""

from __future__ import annotations

import torch

from trainer.kernels.fp8_cast import cast_outputs
from trainer.kernels.ops import kernel_op, launcher


@kernel_op("blendforge::swiglu_backward")
def swiglu_backward(fused: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """``[dgate | dup]`` [rows, 2F] of ``silu(gate) * up`` from ``fused = [gate | up]`` [rows, 2F] and the
    output gradient [rows, F], computed in fp32 and returned in ``fused``'s dtype: on CUDA the Triton kernel,
    elsewhere :func:`reference_backward`."""
    return launcher("swiglu", reference_backward, fused.device)(fused, grad)


def reference_backward(fused: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """The backward in tensor code: ``dgate = g·up·σ(1 + gate(1 − σ))``, ``dup = g·silu(gate)`` with
    ``σ = sigmoid(gate)`` and ``g`` the output gradient."""
    compute = torch.promote_types(fused.dtype, torch.float32)
    gate, up = fused.to(compute).chunk(2, dim=-1)
    grad = grad.to(compute)
    sigmoid = torch.sigmoid(gate)
    dgate = grad * up * sigmoid * (1 + gate * (1 - sigmoid))
    return torch.cat([dgate, grad * gate * sigmoid], dim=-1).to(fused.dtype)


@kernel_op("blendforge::swiglu_backward_cast")
def swiglu_backward_cast(fused: torch.Tensor, grad: torch.Tensor, scale: torch.Tensor,
                         dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`swiglu_backward` as the FP8 GEMMs after it take it: the gradient (rounded to ``fused``'s dtype)
    times ``scale``, saturated into ``dtype``, and its amax (fp32, 0-d) — on CUDA from the SwiGLU kernel itself.

    NOTE: a Triton op, not an opaque custom op: Inductor then allocates the output, knows it aligned, and the
    FP8 transpose after it loads 16 bytes a thread (behind an opaque op it ran at half that speed)."""
    return launcher("swiglu", swiglu_cast_reference, fused.device)(fused, grad, scale, dtype)


@kernel_op("blendforge::swiglu_backward_cast_transposed")
def swiglu_backward_cast_transposed(fused: torch.Tensor, grad: torch.Tensor, scale: torch.Tensor,
                                    dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`swiglu_backward_cast` with the cast gradient's transpose [2F, rows] (row-major, the weight
    gradient GEMM's left operand) between the two: on CUDA written by the same kernel, so no transposing copy
    reads the gradient again (``--fp8-transpose producers``)."""
    return launcher("swiglu", swiglu_cast_reference, fused.device)(fused, grad, scale, dtype, transposed=True)


def swiglu_cast_reference(fused: torch.Tensor, grad: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype,
                          transposed: bool = False) -> tuple[torch.Tensor, ...]:
    """:func:`swiglu_backward_cast` (with ``transposed``: :func:`swiglu_backward_cast_transposed`) in tensor
    code."""
    return cast_outputs(reference_backward(fused, grad), scale, dtype, transposed)
