"""AdamW with its moments in bf16 (``--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16``, Megatron's spelling).

Mixed precision with fp32 master weights, fp32 gradients and fp32 moments costs 16 bytes per parameter
(plus activations): 128 GB for an 8B model, more than one H200 holds beside the activations. bf16
moments cut that to 12 bytes. The update itself runs in fp32 and the new moments are stored with
stochastic rounding: round-to-nearest would freeze the second moment, whose per-step change
(``1 - beta2`` = 0.1%) is below half a bf16 ulp (0.2%). Parameters are updated in slices of
:data:`SLICE` elements so the fp32 temporaries of the eager update stay small next to the 8B model.

On CUDA the update is compiled (``compiled=True``): one fused pass per slice reads the weight, gradient
and moments once and writes them once, where the eager update ran a dozen full passes, stochastic
rounding's random draws included. The hyperparameters travel as one tensor so the compiled update serves
every step and every parameter (shapes are dynamic).

With both dtypes fp32 the update is ``torch.optim.AdamW``'s to fp32 rounding (a test holds it to that).
"""

from __future__ import annotations

import math

import torch

#: Elements updated at once (bounds the fp32 temporaries: ~6 of this size).
SLICE = 2**25

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def stochastic_round_to_bf16(x: torch.Tensor) -> torch.Tensor:
    """``x`` (fp32) rounded to bf16 up or down at random, with the probability of rounding up equal to the
    fraction of the way to the next bf16 value, so the rounding is unbiased in expectation."""
    bits = x.view(torch.int32)
    noise = torch.randint(0, 1 << 16, bits.shape, dtype=torch.int32, device=x.device)
    truncated = (bits + noise) & -65536  # NOTE: a carry out of the low 16 bits rounds the magnitude up
    return truncated.view(torch.float32).to(torch.bfloat16)


def _store(target: torch.Tensor, value: torch.Tensor) -> None:
    target.copy_(value if target.dtype == torch.float32 else stochastic_round_to_bf16(value))


def _update_slice(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                  hyper: torch.Tensor, grad_scale: torch.Tensor | None) -> None:
    """One AdamW update of matching flat slices (torch.optim.AdamW's arithmetic, in fp32) with the gradient
    divided by ``grad_scale`` when given; ``hyper`` = :func:`hyperparameters`."""
    lr, beta1, beta2, eps, weight_decay, correction1, correction2_sqrt = hyper.unbind()
    grad = grad.float() if grad_scale is None else grad.float() / grad_scale
    first = exp_avg.float().lerp(grad, 1 - beta1)
    second = exp_avg_sq.float() * beta2 + grad * grad * (1 - beta2)
    param.mul_(1 - lr * weight_decay)
    param.sub_(first / (second.sqrt() / correction2_sqrt + eps) * (lr / correction1))
    _store(exp_avg, first)
    _store(exp_avg_sq, second)


def hyperparameters(group: dict, step: int, device: torch.device) -> torch.Tensor:
    """``[lr, beta1, beta2, eps, weight_decay, 1 - beta1^step, sqrt(1 - beta2^step)]`` of a parameter group
    at ``step``, as one fp32 tensor on ``device``."""
    beta1, beta2 = group["betas"]
    values = [float(group["lr"]), beta1, beta2, group["eps"], group["weight_decay"], 1 - beta1**step,
              math.sqrt(1 - beta2**step)]
    return torch.tensor(values, dtype=torch.float32).to(device, non_blocking=True)


class LowPrecisionAdamW(torch.optim.Optimizer):
    """AdamW (decoupled weight decay) whose ``exp_avg``/``exp_avg_sq`` state has the given dtypes."""

    def __init__(self, params, lr: float, betas: tuple[float, float], eps: float, weight_decay: float,
                 exp_avg_dtype: torch.dtype, exp_avg_sq_dtype: torch.dtype, compiled: bool = False) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        self.dtypes = (exp_avg_dtype, exp_avg_sq_dtype)
        self.update = torch.compile(_update_slice, dynamic=True) if compiled else _update_slice
        self.register_load_state_dict_post_hook(LowPrecisionAdamW._restore_dtypes)

    @staticmethod
    def _restore_dtypes(optimizer: "LowPrecisionAdamW") -> None:
        """``Optimizer.load_state_dict`` casts state to the parameters' dtype (fp32); cast the moments back
        (exact: they were saved in their own dtype)."""
        for state in optimizer.state.values():
            for key, dtype in zip(("exp_avg", "exp_avg_sq"), optimizer.dtypes):
                if key in state:
                    state[key] = state[key].to(dtype)

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
        (the protocol of torch's fused optimizers: :func:`trainer.optim.clipped_step` sets it)."""
        loss = None if closure is None else closure()
        grad_scale = getattr(self, "grad_scale", None)
        for group in self.param_groups:
            hypers: dict[tuple[int, torch.device], torch.Tensor] = {}
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self._state(param)
                state["step"] += 1
                key = (int(state["step"]), param.device)
                if key not in hypers:
                    hypers[key] = hyperparameters(group, *key)
                flat = [param.view(-1), param.grad.reshape(-1), state["exp_avg"].view(-1), state["exp_avg_sq"].view(-1)]
                for start in range(0, flat[0].numel(), SLICE):
                    self.update(*(t[start:start + SLICE] for t in flat), hypers[key], grad_scale)
        return loss
