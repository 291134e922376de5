"""The saturating FP8 cast and the amax that every casting kernel computes, as tensor code: the formula the
Triton kernels are held to, and what Inductor fuses into the kernel producing a tensor in the compiled FP8 GEMMs."""

from __future__ import annotations

import torch


def fp8_max(dtype: torch.dtype) -> float:
    """Largest finite value of an FP8 dtype (448 for e4m3fn, 57344 for e5m2)."""
    return float(torch.finfo(dtype).max)


def cast_with_scale(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x · scale`` saturated into ``dtype``: no wait for ``x``'s own amax, so compiled, the cast and
    :func:`amax_of` the same ``x`` share one read of it."""
    limit = fp8_max(dtype)
    return (x.float() * scale).clamp(-limit, limit).to(dtype)


def amax_of(x: torch.Tensor) -> torch.Tensor:
    """``x``'s largest magnitude, fp32 0-d.

    NOTE: per row first: a row reduction runs over the same loop as a cast of ``x``, so Inductor puts both in
    one kernel (a whole-tensor amax is split differently and gets a kernel and a read of its own)."""
    return x.abs().amax(dim=-1).amax().float()


def cast_outputs(grad: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype,
                 transposed: bool) -> tuple[torch.Tensor, ...]:
    """What a casting op returns for ``grad``, in tensor code: :func:`cast_with_scale` of it, then with
    ``transposed`` that cast's transpose (row-major), then :func:`amax_of` it."""
    cast = cast_with_scale(grad, scale, dtype)
    return (cast, cast.t().contiguous(), amax_of(grad)) if transposed else (cast, amax_of(grad))
