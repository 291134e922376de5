"""AdamW's update with bf16 weights and moments stored by stochastic rounding, as tensor code (the formula) and
as one Triton launch for every parameter on CUDA (:mod:`trainer.kernels.triton_kernels.adamw`).

The random bits are a counter-based hash of the element's position, the step and the parameter
(:func:`random_bits`): no generator state, no stored noise, the same bits when a resumed run replays a step, and
a handful of integer operations where Philox draws cost ~100 per element. The kernel computes the same hash in
unsigned 32-bit arithmetic, so kernel and tensor code agree but where a compiler's fused multiply-add moves an
fp32 result by an ulp (a test holds them to that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from trainer.kernels.ops import triton_kernels

#: Multipliers of the 32-bit integer hash (odd, below 2^31 so int64 products never overflow).
_HASH_MULTIPLIERS = (0x7FEB352D, 0x5BD1E995)
_LOW32 = 0xFFFFFFFF


def random_bits(numel: int, offset: int, device: torch.device) -> torch.Tensor:
    """32 pseudo-random bits (int64 in ``[0, 2^32)``) for each of ``numel`` consecutive elements, a hash
    of ``offset + position``: a bijection of 32-bit integers, so distinct positions never share bits."""
    x = (torch.arange(numel, dtype=torch.int64, device=device) + offset) & _LOW32
    for multiplier in _HASH_MULTIPLIERS:
        x = x ^ (x >> 16)
        x = (x * multiplier) & _LOW32
    return x ^ (x >> 15)


def stochastic_round_to_bf16(x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """``x`` (fp32) rounded to bf16 up or down, with the probability of rounding the magnitude up equal to the
    fraction of the way to the next bf16 value when ``noise`` (integers, same shape) is uniform in
    ``[0, 2^16)``: unbiased in expectation."""
    bits = x.view(torch.int32)
    truncated = (bits + noise.to(torch.int32)) & -65536  # NOTE: a carry out of the low 16 bits rounds up
    return truncated.view(torch.float32).to(torch.bfloat16)


def update_slice(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                 hyper: torch.Tensor, grad_scale: torch.Tensor | None, key: int,
                 amax: torch.Tensor | None = None) -> None:
    """One AdamW update of matching flat slices (torch.optim.AdamW's arithmetic, in fp32) with the gradient
    divided by ``grad_scale`` when given; ``hyper`` = :func:`hyperparameters`, ``key`` = :func:`hash_key`
    (positions ``2 * i`` and ``2 * i + 1`` give element ``i`` 64 random bits, 16 for each bf16 store);
    ``amax`` (fp32, one element), when given, is raised to the largest magnitude of the updated weights."""
    lr, beta1, beta2, eps, weight_decay, correction1, correction2_sqrt = hyper.unbind()
    # NOTE: per-tensor divisors as reciprocals, so the kernel divides once per tensor, not per element
    grad = grad.float() if grad_scale is None else grad.float() * (1 / grad_scale)
    first = exp_avg.float().lerp(grad, 1 - beta1)
    second = exp_avg_sq.float() * beta2 + grad * grad * (1 - beta2)
    weight = param.float() * (1 - lr * weight_decay)
    weight = weight - first / (second.sqrt() * (1 / correction2_sqrt) + eps) * (lr / correction1)
    results = ((param, weight), (exp_avg, first), (exp_avg_sq, second))
    noises: tuple[torch.Tensor | None, ...] = (None, None, None)
    if any(target.dtype != torch.float32 for target, _ in results):
        bits = random_bits(2 * param.numel(), key, param.device).view(-1, 2)
        noises = (bits[:, 0] & 0xFFFF, bits[:, 0] >> 16, bits[:, 1] & 0xFFFF)
    for (target, value), noise in zip(results, noises):
        target.copy_(value if target.dtype == torch.float32 else stochastic_round_to_bf16(value, noise))
    if amax is not None and param.numel():
        amax.copy_(torch.maximum(amax, param.abs().max().float().reshape(amax.shape)))


def hash_key(step: int, ordinal: int) -> int:
    """Where the random bits of the optimizer's ``ordinal``-th parameter begin at ``step`` (two hash
    positions per element, so a slice at element ``start`` begins ``2 * start`` later): a different stream
    per step and parameter."""
    return (step * 0x9E3779B1 + ordinal * 0x85EBCA77) & _LOW32


def hyperparameters(group: dict, step: int) -> list[float]:
    """``[lr, beta1, beta2, eps, weight_decay, 1 - beta1^step, sqrt(1 - beta2^step)]`` of a parameter group
    at ``step`` (the ``hyper`` of :func:`update_slice` as a tensor)."""
    beta1, beta2 = group["betas"]
    return [float(group["lr"]), beta1, beta2, group["eps"], group["weight_decay"], 1 - beta1**step,
            math.sqrt(1 - beta2**step)]


@dataclass(frozen=True)
class Work:
    """One parameter's update in a step: flat tensors, its :func:`hyperparameters` and :func:`hash_key`, and
    where to raise the updated weight's amax to, if anywhere (:meth:`LowPrecisionAdamW.record_weight_amaxes`)."""

    param: torch.Tensor
    grad: torch.Tensor
    exp_avg: torch.Tensor
    exp_avg_sq: torch.Tensor
    hyper: list[float]
    key: int
    amax: torch.Tensor | None = None


def fused_update() -> Callable[[list[Work], torch.Tensor | None, torch.Tensor | None], None] | None:
    """The one-launch update of every :class:`Work` on CUDA (``update(works, grad_scale, found_inf)``), or None
    where Triton is not importable (logged once: the update then runs as tensor code, a dozen passes)."""
    module = triton_kernels("adamw")
    return module.update if module is not None else None
