"""AdamW whose weights and moments may be bf16 (``--main-params-dtype``, ``--exp-avg-dtype``,
``--exp-avg-sq-dtype``: Megatron's precision-aware optimizer's spelling).

Mixed precision with fp32 master weights, fp32 gradients and fp32 moments costs 16 bytes per parameter
(plus activations): 128 GB for an 8B model, more than one H200 holds beside the activations. bf16
moments cut that to 12 bytes; bf16 weights (the model's own, no fp32 copy: no cast before every GEMM,
bf16 gradients) to 8 — what Transformer Engine's and torch's bf16 recipes train with, but there round to
nearest loses every update below half an ulp. Here the update runs in fp32 and every bf16 result is
stored with stochastic rounding: round-to-nearest would freeze the second moment, whose per-step change
(``1 - beta2`` = 0.1%) is below half a bf16 ulp (0.2%), and late small weight updates alike.

The random bits are a counter-based hash of the element's position, the step and the parameter
(:func:`random_bits`): no generator state, no stored noise, the same bits when a resumed run replays a
step, and a handful of integer operations where Philox draws cost ~100 per element. Parameters are
updated in slices of :data:`SLICE` elements so the fp32 temporaries of the eager update stay small next
to the 8B model.

On CUDA the update is one Triton launch for every parameter (``fused=True``, :mod:`trainer.kernels.adamw`):
it reads each weight, gradient and moments once and writes them once, with the same random bits as the
tensor code here, where the eager update runs a dozen full passes.

With everything fp32 the update is ``torch.optim.AdamW``'s to fp32 rounding (a test holds it to that).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable

import torch

log = logging.getLogger(__name__)

#: Elements updated at once (bounds the fp32 temporaries: ~6 of this size).
SLICE = 2**25

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


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


def gradient_of(param: torch.Tensor) -> torch.Tensor | None:
    """The gradient ``param`` is stepped with: its fp32 ``main_grad`` where the gradient reducer keeps one
    (``--accumulate-allreduce-grads-in-fp32``, Megatron's attribute), else its ``.grad``."""
    return getattr(param, "main_grad", param.grad)


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


def _fused_update() -> Callable[[list[Work], torch.Tensor | None, torch.Tensor | None], None] | None:
    """:func:`trainer.kernels.adamw.update`, or None (logged) where Triton is not importable."""
    try:
        from trainer.kernels.adamw import update
    except ImportError as error:
        log.warning("the AdamW update runs as tensor code (a dozen passes, not one kernel): %s", error)
        return None
    return update


class LowPrecisionAdamW(torch.optim.Optimizer):
    """AdamW (decoupled weight decay) whose ``exp_avg``/``exp_avg_sq`` state has the given dtypes, over
    parameters of any float dtype (bf16 ones are updated in fp32 and stored with stochastic rounding)."""

    def __init__(self, params, lr: float, betas: tuple[float, float], eps: float, weight_decay: float,
                 exp_avg_dtype: torch.dtype, exp_avg_sq_dtype: torch.dtype, fused: bool = False) -> None:
        """``fused``: update every parameter in one Triton launch (CUDA; tensor code, logged, without Triton)."""
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        self.dtypes = (exp_avg_dtype, exp_avg_sq_dtype)
        self.kernel = _fused_update() if fused else None
        self.weight_amaxes: dict[torch.Tensor, torch.Tensor] = {}
        self.register_load_state_dict_pre_hook(LowPrecisionAdamW._keep_loaded_moments)
        self.register_load_state_dict_post_hook(LowPrecisionAdamW._restore_moments)

    @staticmethod
    def _keep_loaded_moments(optimizer: "LowPrecisionAdamW", state_dict: dict) -> None:
        """Note each parameter's saved moments before ``Optimizer.load_state_dict`` casts them to the parameter's
        dtype (which would round the fp32 moments of bf16 weights on every resume)."""
        saved_ids = [index for group in state_dict["param_groups"] for index in group["params"]]
        params = [param for group in optimizer.param_groups for param in group["params"]]
        optimizer._loaded_moments = {param: state_dict["state"][index] for index, param in zip(saved_ids, params)
                                     if index in state_dict["state"]}

    @staticmethod
    def _restore_moments(optimizer: "LowPrecisionAdamW") -> None:
        """Replace the cast moments by the saved ones in the configured dtypes (exact when saved in them)."""
        for param, saved in optimizer.__dict__.pop("_loaded_moments").items():
            for key, dtype in zip(("exp_avg", "exp_avg_sq"), optimizer.dtypes):
                optimizer.state[param][key] = saved[key].to(param.device, dtype)

    def record_weight_amaxes(self, targets: dict[torch.Tensor, torch.Tensor]) -> None:
        """From now on, every step raises ``targets[param]`` (fp32, one element; the caller zeroes it between
        steps) to the largest magnitude of ``param``'s updated weights, in the pass that writes them: FP8
        delayed scaling then needs no pass of its own over every weight (``trainer.fp8.delayed``)."""
        self.weight_amaxes = dict(targets)

    def _state(self, param: torch.Tensor) -> dict:
        state = self.state[param]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(param, dtype=self.dtypes[0])
            state["exp_avg_sq"] = torch.zeros_like(param, dtype=self.dtypes[1])
        return state

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter that has a gradient, divided by the ``grad_scale`` attribute when set
        and skipped when the ``found_inf`` attribute is nonzero (the protocol of torch's fused optimizers:
        :func:`trainer.optim.optimizer.clipped_step` sets them; NOTE: a skipped fused step still counts in ``step``,
        as the caller stops training on it)."""
        loss = None if closure is None else closure()
        grad_scale, found_inf = getattr(self, "grad_scale", None), getattr(self, "found_inf", None)
        if self.kernel is None and found_inf is not None and bool(found_inf):
            return loss
        works = []
        for ordinal, (group, param) in enumerate(((g, p) for g in self.param_groups for p in g["params"]), 1):
            grad = gradient_of(param)
            if grad is None:
                continue
            state = self._state(param)
            state["step"] += 1
            step = int(state["step"])
            works.append(Work(param.view(-1), grad.reshape(-1), state["exp_avg"].view(-1),
                              state["exp_avg_sq"].view(-1), hyperparameters(group, step), hash_key(step, ordinal),
                              self.weight_amaxes.get(param)))
        if self.kernel is not None:
            self.kernel(works, grad_scale, found_inf)
            return loss
        for work in works:
            hyper = torch.tensor(work.hyper, dtype=torch.float32, device=work.param.device)
            tensors = (work.param, work.grad, work.exp_avg, work.exp_avg_sq)
            for start in range(0, work.param.numel(), SLICE):
                update_slice(*(t[start:start + SLICE] for t in tensors), hyper, grad_scale, work.key + 2 * start,
                             work.amax)
        return loss
