"""AdamW over the parameters a rank steps, fused on CUDA; norm weights are exempt from weight decay."""

from __future__ import annotations

import math
from typing import Iterable

import torch
from torch import nn

from trainer.config.schema import OptimConfig
from trainer.optim.adamw import DTYPES, LowPrecisionAdamW


def build_optimizer(parameters: Iterable[nn.Parameter], config: OptimConfig,
                    device: torch.device) -> torch.optim.Optimizer:
    """AdamW with two parameter groups (decayed matrices and embeddings; undecayed 1-D norm weights) over
    ``parameters`` (the whole model, or this rank's share under ZeRO-1; either group may be empty); torch's
    fused AdamW unless ``--main-params-dtype``/``--exp-avg-dtype``/``--exp-avg-sq-dtype`` ask for bf16 (then
    ours, with stochastic rounding, one Triton launch for every parameter on CUDA).

    The learning rate is set before every step from :class:`trainer.optim.schedule.LRSchedule`.
    """
    parameters = list(parameters)
    decayed = [p for p in parameters if p.ndim >= 2]
    undecayed = [p for p in parameters if p.ndim < 2]
    groups = [{"params": decayed, "weight_decay": config.weight_decay},
              {"params": undecayed, "weight_decay": 0.0}]
    betas = (config.adam_beta1, config.adam_beta2)
    if (config.main_params_dtype, config.exp_avg_dtype, config.exp_avg_sq_dtype) != ("fp32", "fp32", "fp32"):
        return LowPrecisionAdamW(groups, config.lr, betas, config.adam_eps, config.weight_decay,
                                 DTYPES[config.exp_avg_dtype], DTYPES[config.exp_avg_sq_dtype],
                                 fused=device.type == "cuda")
    return torch.optim.AdamW(groups, lr=config.lr, betas=betas, eps=config.adam_eps,
                             fused=device.type == "cuda" or None)


def clip_divisor(grad_norm: torch.Tensor, max_norm: float) -> torch.Tensor | None:
    """What clipping divides every gradient by, a 0-d tensor beside ``grad_norm``: ``norm / max_norm`` above
    ``max_norm``, else 1 (``torch.nn.utils.clip_grad_norm_``'s rule, its 1e-6 included); None without
    clipping (``max_norm`` inf)."""
    if not math.isfinite(max_norm):
        return None
    return ((grad_norm.float() + 1e-6) / max_norm).clamp(min=1.0)


def clipped_step(optimizer: torch.optim.Optimizer, grad_norm: torch.Tensor, max_norm: float,
                 finite: torch.Tensor) -> None:
    """``optimizer.step()`` on every gradient divided by :func:`clip_divisor`, and no step at all unless
    ``finite`` (a 0-d bool tensor: the loss and the norm were finite).

    Torch's fused AdamW and :class:`~trainer.optim.adamw.LowPrecisionAdamW` do both on the device, through the
    ``grad_scale`` divisor and ``found_inf`` flag AMP's gradient scaler sets: no value travels to the host
    before the step is queued, so the GPU goes from the backward pass to the update without waiting for
    Python, and clipping costs no pass over the gradients.
    Other optimizers read the divisor first and scale the gradients themselves."""
    divisor = clip_divisor(grad_norm, max_norm)
    if isinstance(optimizer, LowPrecisionAdamW) or optimizer.defaults.get("fused"):
        optimizer.found_inf = (~finite).float()
        if divisor is not None:
            optimizer.grad_scale = divisor
        try:
            optimizer.step()
        finally:
            optimizer.__dict__.pop("grad_scale", None)
            del optimizer.found_inf
        return
    if not bool(finite):
        return
    grads = [param.grad for group in optimizer.param_groups for param in group["params"] if param.grad is not None]
    if grads and divisor is not None and float(divisor) > 1.0:
        torch._foreach_div_(grads, divisor)
    optimizer.step()


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set ``lr`` on every parameter group."""
    for group in optimizer.param_groups:
        group["lr"] = lr
