"""FP8 number formats and dynamic scaling: the math every torch-native FP8 GEMM here is built on.

A tensor is quantized by ``q = saturate(x · s)`` with ``s = fp8_max / amax(x)`` (per tensor, or per row
with ``dim``), and ``q · (1/s)`` dequantizes it; ``torch._scaled_mm`` takes the inverse scales (``1/s``)
and multiplies them back into its fp32 accumulator. Scaling happens in fp32 whatever the input dtype,
so a bf16 tensor is rounded once (to FP8), not twice.

The GEMM eligibility rule lives here too, since every backend shares it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.kernels.fp8_cast import fp8_max

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2

#: ``--fp8-format`` → (dtype of weights and activations, dtype of the gradients of the outputs).
FORMATS: dict[str, tuple[torch.dtype, torch.dtype]] = {
    "hybrid": (E4M3, E5M2),  # e5m2's range suits gradients, e4m3's precision the forward pass
    "e4m3": (E4M3, E4M3),
}

#: Smallest amax used for a scale, so an all-zero tensor quantizes to zeros instead of NaN.
AMAX_FLOOR = 1e-12

#: FP8 GEMMs need every dimension a multiple of this (cuBLAS/CUTLASS alignment of 16-byte rows).
ALIGNMENT = 16


def scale_for(amax: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The fp32 multiplier that maps ``amax`` onto ``dtype``'s largest finite value."""
    return fp8_max(dtype) / amax.float().clamp(min=AMAX_FLOOR)


def quantize(x: torch.Tensor, dtype: torch.dtype, dim: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, inverse_scale)``: ``x`` scaled into ``dtype`` (saturating) and the fp32 factor that undoes it.

    ``dim=None`` scales the whole tensor by one factor (tensorwise); ``dim=d`` takes one factor per slice
    along ``d`` (``dim=-1`` on a [M, K] matrix: one per row, shape [M, 1]).
    """
    magnitude = x.abs()
    amax = magnitude.amax() if dim is None else magnitude.amax(dim=dim, keepdim=True)
    scale = scale_for(amax, dtype)
    limit = fp8_max(dtype)
    q = (x.float() * scale).clamp(-limit, limit).to(dtype)
    return q, scale.reciprocal()


def dequantize(q: torch.Tensor, inverse_scale: torch.Tensor) -> torch.Tensor:
    """The fp32 values an FP8 tensor and its inverse scale stand for."""
    return q.float() * inverse_scale


@dataclass(frozen=True)
class Eligibility:
    """Which GEMMs run in FP8: every dimension a multiple of 16 (hardware), and in/out widths at least
    ``min_dim`` (below that the casts cost more than the faster GEMM saves)."""

    min_dim: int

    def __call__(self, tokens: int, in_features: int, out_features: int) -> bool:
        """True when ``[tokens, in] @ [in, out]`` should run in FP8."""
        aligned = all(size % ALIGNMENT == 0 for size in (tokens, in_features, out_features))
        return aligned and min(in_features, out_features) >= self.min_dim
