"""AdamW with its moments in bf16 (``--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16``, Megatron's spelling).

Mixed precision with fp32 master weights, fp32 gradients and fp32 moments costs 16 bytes per parameter
(plus activations): 128 GB for an 8B model, more than one H200 holds beside the activations. bf16
moments cut that to 12 bytes. The update itself runs in fp32 and the new moments are stored with
stochastic rounding: round-to-nearest would freeze the second moment, whose per-step change
(``1 - beta2`` = 0.1%) is below half a bf16 ulp (0.2%). Parameters are updated in slices of
:data:`SLICE` elements so the fp32 temporaries stay small next to the 8B model.

With both dtypes fp32 the update is exactly ``torch.optim.AdamW``'s (a test holds it to that).
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
                  hyper: tuple[float, float, float, float, float, int], grad_scale: torch.Tensor | None) -> None:
    """One AdamW update of matching flat slices (torch.optim.AdamW's arithmetic, in fp32) with the gradient
    divided by ``grad_scale`` when given."""
    lr, beta1, beta2, eps, weight_decay, step = hyper
    grad = grad.float() if grad_scale is None else grad.float() / grad_scale
    first = exp_avg.float().lerp_(grad, 1 - beta1)
    second = exp_avg_sq.float().mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    param.mul_(1 - lr * weight_decay)
    denominator = (second.sqrt() / math.sqrt(1 - beta2**step)).add_(eps)
    param.addcdiv_(first, denominator, value=-lr / (1 - beta1**step))
    _store(exp_avg, first)
    _store(exp_avg_sq, second)


class LowPrecisionAdamW(torch.optim.Optimizer):
    """AdamW (decoupled weight decay) whose ``exp_avg``/``exp_avg_sq`` state has the given dtypes."""

    def __init__(self, params, lr: float, betas: tuple[float, float], eps: float, weight_decay: float,
                 exp_avg_dtype: torch.dtype, exp_avg_sq_dtype: torch.dtype) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        self.dtypes = (exp_avg_dtype, exp_avg_sq_dtype)
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
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self._state(param)
                state["step"] += 1
                hyper = (float(group["lr"]), beta1, beta2, group["eps"], group["weight_decay"], int(state["step"]))
                flat = [param.view(-1), param.grad.reshape(-1), state["exp_avg"].view(-1), state["exp_avg_sq"].view(-1)]
                for start in range(0, flat[0].numel(), SLICE):
                    _update_slice(*(t[start:start + SLICE] for t in flat), hyper, grad_scale)
        return loss
