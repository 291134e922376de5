"""AdamW whose weights and moments may be bf16 (``--main-params-dtype``, ``--exp-avg-dtype``,
``--exp-avg-sq-dtype``: Megatron's precision-aware optimizer's spelling).

Mixed precision with fp32 master weights, fp32 gradients and fp32 moments costs 16 bytes per parameter
(plus activations): 128 GB for an 8B model, more than one H200 holds beside the activations. bf16
moments cut that to 12 bytes; bf16 weights (the model's own, no fp32 copy: no cast before every GEMM,
bf16 gradients) to 8 — what Transformer Engine's and torch's bf16 recipes train with, but there round to
nearest loses every update below half an ulp. Here the update runs in fp32 and every bf16 result is
stored with stochastic rounding: round-to-nearest would freeze the second moment, whose per-step change
(``1 - beta2`` = 0.1%) is below half a bf16 ulp (0.2%), and late small weight updates alike.

The arithmetic and its random bits are :mod:`trainer.kernels.adamw`'s. On CUDA the update is one Triton launch
for every parameter (``fused=True``): it reads each weight, gradient and moments once and writes them once,
where the eager update runs a dozen full passes; the eager update goes in slices of :data:`SLICE` elements so
its fp32 temporaries stay small next to an 8B model.

With everything fp32 the update is ``torch.optim.AdamW``'s to fp32 rounding (a test holds it to that).
"""

from __future__ import annotations

import torch

from trainer.kernels.adamw import Work, fused_update, hash_key, hyperparameters, update_slice

#: Elements updated at once (bounds the fp32 temporaries: ~6 of this size).
SLICE = 2**25

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def gradient_of(param: torch.Tensor) -> torch.Tensor | None:
    """The gradient ``param`` is stepped with: its fp32 ``main_grad`` where the gradient reducer keeps one
    (``--accumulate-allreduce-grads-in-fp32``, Megatron's attribute), else its ``.grad``."""
    return getattr(param, "main_grad", param.grad)


class LowPrecisionAdamW(torch.optim.Optimizer):
    """AdamW (decoupled weight decay) whose ``exp_avg``/``exp_avg_sq`` state has the given dtypes, over
    parameters of any float dtype (bf16 ones are updated in fp32 and stored with stochastic rounding)."""

    def __init__(self, params, lr: float, betas: tuple[float, float], eps: float, weight_decay: float,
                 exp_avg_dtype: torch.dtype, exp_avg_sq_dtype: torch.dtype, fused: bool = False) -> None:
        """``fused``: update every parameter in one Triton launch (CUDA; tensor code, logged, without Triton)."""
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        self.dtypes = (exp_avg_dtype, exp_avg_sq_dtype)
        self.kernel = fused_update() if fused else None
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
