"""AdamW over the parameters a rank steps, fused on CUDA; norm weights are exempt from weight decay."""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from trainer.adamw import DTYPES, LowPrecisionAdamW
from trainer.config import OptimConfig


def build_optimizer(parameters: Iterable[nn.Parameter], config: OptimConfig, device: torch.device) -> torch.optim.Optimizer:
    """AdamW with two parameter groups (decayed matrices and embeddings; undecayed 1-D norm weights) over
    ``parameters`` (the whole model, or this rank's share under ZeRO-1; either group may be empty); torch's
    fused AdamW unless ``--main-params-dtype``/``--exp-avg-dtype``/``--exp-avg-sq-dtype`` ask for bf16 (then
    ours, with stochastic rounding, compiled on CUDA).

    The learning rate is set before every step from :class:`trainer.schedule.LRSchedule`.
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
                                 compiled=device.type == "cuda")
    return torch.optim.AdamW(groups, lr=config.lr, betas=betas, eps=config.adam_eps, fused=device.type == "cuda" or None)


def clip_factor(norm: float, max_norm: float) -> float:
    """What clipping multiplies every gradient by: ``max_norm / norm`` above ``max_norm``, else 1
    (``torch.nn.utils.clip_grad_norm_``'s rule; ``inf``: no clipping)."""
    return min(1.0, max_norm / (norm + 1e-6))


def clipped_step(optimizer: torch.optim.Optimizer, grad_factor: float) -> None:
    """``optimizer.step()`` on every gradient times ``grad_factor`` (clipping). Torch's fused AdamW and
    :class:`~trainer.adamw.LowPrecisionAdamW` apply the factor inside their update, through the
    ``grad_scale`` divisor AMP's gradient scaler sets, instead of a pass that reads and writes every gradient
    (~0.7 ms net per step of the 1.3b preset on an H200: torch's kernel then writes the scaled gradients
    back); other optimizers get their gradients scaled first."""
    if grad_factor == 1.0:
        optimizer.step()
        return
    params = [param for group in optimizer.param_groups for param in group["params"] if param.grad is not None]
    if not (isinstance(optimizer, LowPrecisionAdamW) or optimizer.defaults.get("fused")):
        if params:
            torch._foreach_mul_([param.grad for param in params], grad_factor)
        optimizer.step()
        return
    device = params[0].device if params else torch.device("cpu")
    optimizer.grad_scale = torch.full((), 1.0 / grad_factor, dtype=torch.float32, device=device)
    try:
        optimizer.step()
    finally:
        del optimizer.grad_scale


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set ``lr`` on every parameter group."""
    for group in optimizer.param_groups:
        group["lr"] = lr
