"""Delayed FP8 scaling for our ``torch._scaled_mm`` linear (``--fp8-recipe delayed``, Megatron's default).

Current (tensorwise) scaling must know a tensor's amax before it can cast it, so every FP8 operand costs an
amax pass and then a cast pass. Delayed scaling casts with a scale chosen from the amaxes of *earlier*
steps, so the amax of the tensor being cast is computed in the same pass as the cast, and under
torch.compile both fuse into the kernel that produces the tensor (the RMSNorm, SwiGLU or gradient kernel
before each GEMM). Transformer Engine's ``DelayedScaling`` recipe, done with torch ops:

- every FP8 linear owns a :class:`DelayedScales`: the scales its operands are cast with (input, weight,
  output gradient) and the largest amaxes seen since the last update, kept by the forward pass (input)
  and the backward pass (gradient; AOTAutograd keeps that buffer mutation inside the compiled backward
  graph);
- after each step's backward pass :class:`DelayedScalingUpdate` appends every linear's amaxes (and its
  weight's) to a history of ``--fp8-amax-history-len`` steps (one tensor for all linears, a handful of
  kernels) and sets ``scale = fp8_max / amax`` from the history's max (``--fp8-amax-compute-algo max``) or
  the latest amax (``most_recent``); an amax of 0 (a tensor not seen yet) keeps the old scale;
- the weights' amaxes come from the optimizer's update that wrote the weights when it can record them
  (:meth:`trainer.optim.adamw.LowPrecisionAdamW.record_weight_amaxes`, for every FP8 weight this rank steps; on
  CUDA its one AdamW kernel, which holds each weight in registers anyway); else — the first update of a
  process, torch's AdamW, ZeRO-1 stepping some weights on other ranks — from a pass over every weight (the
  same values, at a pass's cost).

The first step of every run (a resumed one too) *calibrates* (:class:`Calibration`): it runs current
scaling, eagerly, and measures the amaxes the history starts from. Transformer Engine instead casts its
first step with scale 1, which flushes most gradients to zero in e5m2 and costs the loss curve some twenty
steps of lag (bench/RESULTS.md). So the history need not be in checkpoints (it is not). Scales are per rank: each rank
dequantizes its own GEMMs, so ranks need not agree (TE reduces
amaxes over the group; here nothing waits on a collective).
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from trainer.kernels.fp8_cast import fp8_max

#: Index of each operand's scale and amax in the per-linear tensors.
INPUT, WEIGHT, GRAD = 0, 1, 2


class DelayedScales(nn.Module):
    """One FP8 linear's delayed-scaling state, as non-persistent buffers (checkpoints do not change):

    - ``scale`` [3]: the multipliers the input, weight and output gradient are cast with, and
      ``inverse_input``, ``inverse_weight``, ``inverse_grad`` (0-d): their inverses, which ``_scaled_mm``
      takes — set by the update, so the compiled passes launch no kernel to compute them;
    - ``amax_input`` [1] (kept by the forward pass) and ``amax_grad`` [1] (by the backward pass): the largest
      amaxes since the last update — two tensors because a compiled backward may only mutate a buffer its
      forward pass left alone. The weight's amax is taken by the update, for every weight at once.
    """

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(3), persistent=False)
        for name in ("inverse_input", "inverse_weight", "inverse_grad"):
            self.register_buffer(name, torch.ones(()), persistent=False)
        self.register_buffer("amax_input", torch.zeros(1), persistent=False)
        self.register_buffer("amax_grad", torch.zeros(1), persistent=False)

    def reset_parameters(self) -> None:
        """Scales 1, nothing seen (also after the model is materialised from ``meta``)."""
        for tensor in (self.scale, self.inverse_input, self.inverse_weight, self.inverse_grad):
            tensor.fill_(1.0)
        self.amax_input.zero_()
        self.amax_grad.zero_()

    def inverses(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The inverse scales of input, weight and gradient (``_scaled_mm``'s ``scale_a``/``scale_b``)."""
        return self.inverse_input, self.inverse_weight, self.inverse_grad


class Calibration:
    """Whether the current step calibrates delayed scaling (true until the first update): its FP8 GEMMs run
    current scaling and record their amaxes, and the step runs eagerly (:meth:`step_context`), so compiled
    blocks keep one graph, the delayed one, and compile it once."""

    def __init__(self, active: bool = True) -> None:
        self.active = active

    def step_context(self, chunks: list[nn.Module]) -> contextlib.AbstractContextManager:
        """What a training step over the model ``chunks`` runs in: while calibrating, eagerly (``torch.compiler``
        stance ``force_eager``) and with every block recomputed in its backward pass — eager passes keep far
        more activations than compiled ones, so the run's first step would otherwise set its memory peak.
        Recomputing changes no value."""
        return _eager_and_recomputed(chunks) if self.active else contextlib.nullcontext()


@contextlib.contextmanager
def _eager_and_recomputed(chunks: list[nn.Module]):
    """Compiled code run eagerly, and full activation recompute (a chunk's ``recompute`` flag) on every chunk
    that has one; the flags put back after."""
    before = [(chunk, chunk.recompute) for chunk in chunks if hasattr(chunk, "recompute")]
    for chunk, _ in before:
        chunk.recompute = True
    try:
        with torch.compiler.set_stance("force_eager"):
            yield
    finally:
        for chunk, value in before:
            chunk.recompute = value


def record_amax(running: torch.Tensor, amax: torch.Tensor) -> None:
    """Keep the largest amax since the last update (several micro-batches, recomputed forward passes)."""
    running.copy_(torch.maximum(running, amax.reshape(running.shape)))


class DelayedScalingUpdate:
    """The once-a-step update of every FP8 linear of the given model chunks (modules with a
    :class:`DelayedScales` as ``fp8_scales``): amaxes into the history, then scales and their inverses.
    ``forward_dtype``/``grad_dtype`` give each operand's FP8 maximum. Runs after the backward pass and
    before the optimizer, so the weight amax is that of the weights this step's passes cast."""

    def __init__(self, history_len: int, compute_algo: str, forward_dtype: torch.dtype, grad_dtype: torch.dtype,
                 calibration: Calibration) -> None:
        self.history_len, self.compute_algo, self.calibration = history_len, compute_algo, calibration
        self.maxima = (fp8_max(forward_dtype), fp8_max(forward_dtype), fp8_max(grad_dtype))
        self._linears: list[nn.Module] | None = None
        self._history: torch.Tensor | None = None  # [history_len, linears, 3]
        self._maxima: torch.Tensor | None = None  # on the device: no host copy, so no wait, in the update
        self._steps = 0
        self._optimizer: torch.optim.Optimizer | None = None
        self._recorded: torch.Tensor | None = None  # [linears]: the weight amaxes the optimizer's update recorded

    def take_weight_amaxes_from(self, optimizer: torch.optim.Optimizer) -> None:
        """Have ``optimizer`` record the weights' amaxes as it writes them, from the first update on, if it can
        (``record_weight_amaxes``) and steps every FP8 weight of these chunks."""
        self._optimizer = optimizer

    def __call__(self, chunks: list[nn.Module]) -> None:
        """Fold the amaxes seen since the last call into the history and set every linear's next scales."""
        if self._linears is None:
            self._linears = [module for chunk in chunks for module in chunk.modules()
                             if isinstance(getattr(module, "fp8_scales", None), DelayedScales)]
        if self._linears:  # NOTE: a pipeline stage may hold no FP8 linear; it still ends its calibration
            with torch.no_grad():
                self._update([linear.fp8_scales for linear in self._linears])
        self.calibration.active = False

    def _weight_amaxes(self) -> torch.Tensor:
        """Every linear's weight amax [linears], fp32: as the optimizer's last update recorded it, else (no update
        has recorded it yet) from a pass over the weights."""
        if self._recorded is not None:
            return self._recorded
        return torch.stack(torch._foreach_norm([linear.weight for linear in self._linears], float("inf"))).float()

    def _record_from_optimizer(self) -> None:
        """Hand the optimizer the tensor to record the weights' amaxes in, if it can and steps every FP8 weight."""
        record = getattr(self._optimizer, "record_weight_amaxes", None)
        stepped = {id(param) for group in getattr(self._optimizer, "param_groups", []) for param in group["params"]}
        if record is None or any(id(linear.weight) not in stepped for linear in self._linears):
            return
        self._recorded = torch.zeros(len(self._linears), device=self._linears[0].weight.device)
        record({linear.weight: self._recorded[index] for index, linear in enumerate(self._linears)})

    def _update(self, states: list[DelayedScales]) -> None:
        amax = torch.stack([torch.cat([state.amax_input for state in states]), self._weight_amaxes(),
                            torch.cat([state.amax_grad for state in states])], dim=1)
        if self._history is None:
            self._history = amax.new_zeros(self.history_len, *amax.shape)
            self._maxima = amax.new_tensor(self.maxima)
        self._history[self._steps % self.history_len] = amax
        self._steps += 1
        window = self._history.amax(0) if self.compute_algo == "max" else amax
        old = torch.stack([state.scale for state in states])
        new = torch.where(window > 0, self._maxima / window.clamp(min=1e-30), old)
        torch._foreach_copy_([state.scale for state in states], list(new.unbind(0)))
        inverse = new.reciprocal()
        for operand in (INPUT, WEIGHT, GRAD):
            torch._foreach_copy_([state.inverses()[operand] for state in states], list(inverse[:, operand].unbind(0)))
        recorded = [] if self._recorded is None else [self._recorded]  # NOTE: the next optimizer step raises it
        torch._foreach_zero_([t for state in states for t in (state.amax_input, state.amax_grad)] + recorded)
        if self._recorded is None:
            self._record_from_optimizer()
