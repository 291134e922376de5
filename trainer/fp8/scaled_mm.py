"""Our own FP8 linear on ``torch._scaled_mm``: dynamic scaling, per tensor or per row, or delayed per-tensor
scaling (:mod:`trainer.fp8.delayed`), as custom autograd functions (the ``scaled_mm`` backend: the fastest
measured, so ``--fp8-backend auto`` takes it).

Forward ``y = x · Wᵀ`` and the two backward GEMMs ``dx = dy · W`` and ``dW = dyᵀ · x`` all run in FP8
with fp32 accumulation. Weights and activations use the format's forward dtype (e4m3), output gradients
its gradient dtype (e5m2 for ``hybrid``). Tensorwise scaling saves the FP8 copies of ``x`` and ``W`` for
the backward pass (half the activation memory of bf16); row-wise scaling needs scales along the other
axis in the backward pass, so it saves ``x`` and ``W`` and quantizes them again there.

NOTE: ``torch._scaled_mm(a, b)`` wants ``a`` row-major and ``b`` column-major with every dimension a
multiple of 16 (cuBLAS's FP8 layout). :func:`fp8_matmul` checks that on every device, so the CPU tests
catch a layout the GPU would reject. Row-wise scaling takes e4m3 for gradients too (the kernel's
supported combination) and bf16 outputs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from trainer.config.schema import FP8Config
from trainer.fp8.delayed import GRAD, INPUT, WEIGHT, Calibration, DelayedScales, DelayedScalingUpdate, record_amax
from trainer.fp8.scaling import ALIGNMENT, E4M3, FORMATS, Eligibility, quantize
from trainer.fp8.spec import BackendParts, FP8Backend
from trainer.kernels.fp8_cast import amax_of, cast_with_scale
from trainer.kernels.fp8_transpose import fp8_transpose
from trainer.kernels.rotary import rotary_backward_cast, rotary_backward_cast_transposed
from trainer.kernels.swiglu import swiglu_backward_cast, swiglu_backward_cast_transposed
from trainer.model.rotary import HeadShape, rotary_heads, rotary_heads_values
from trainer.model.swiglu import swiglu, swiglu_values


@dataclass(frozen=True)
class ScaledMMRecipe:
    """How one FP8 linear scales: dtypes of the forward operands and of the output gradient, and whether
    scales are per row (``rowwise``) or per tensor."""

    forward_dtype: torch.dtype
    grad_dtype: torch.dtype
    rowwise: bool
    transpose_kernel: bool = False  # the backward's transposed copies by trainer.kernels.fp8_transpose's own kernel
    producer_transposes: bool = False  # delayed: the SwiGLU and RoPE gradient kernels write their own transposes


def fp8_matmul(a: torch.Tensor, b: torch.Tensor, a_inverse: torch.Tensor, b_inverse: torch.Tensor,
               out_dtype: torch.dtype, fast_accum: bool = False) -> torch.Tensor:
    """``(a · a_inverse) @ (b · b_inverse)`` in ``out_dtype``; ``a`` [M, K] row-major, ``b`` [K, N]
    column-major, scales per tensor (0-d) or per row of ``a`` ([M, 1]) and per column of ``b`` ([1, N]).
    ``fast_accum``: Hopper's faster, less often promoted FP8 accumulation (the forward GEMM only, as
    Transformer Engine and torchao do; the gradient GEMMs keep the precise one)."""
    if a.stride(-1) != 1 or b.stride(0) != 1:
        raise ValueError(f"FP8 GEMM layout: a must be row-major and b column-major (strides {a.stride()}, "
                         f"{b.stride()})")
    if any(size % ALIGNMENT for size in (*a.shape, b.shape[1])):
        raise ValueError(f"FP8 GEMM shapes {tuple(a.shape)} @ {tuple(b.shape)}: every dimension must be a multiple of "
                         "16")
    rowwise = a_inverse.dim() > 0
    result_dtype = torch.bfloat16 if rowwise else out_dtype  # row-wise kernels write bf16
    out = torch._scaled_mm(a, b, scale_a=a_inverse, scale_b=b_inverse, out_dtype=result_dtype,
                           use_fast_accum=fast_accum)
    # NOTE: no `.to()` when the dtype already matches: torch 2.11's compiler drops the gradients of an autograd
    # function that returns that no-op alias of a tensor made inside it (pytorch#180642's family: every block
    # weight gets a zero gradient). tests/trainer/fp8 hold compiled gradients to eager ones.
    return out if out.dtype == out_dtype else out.to(out_dtype)


def _left(x: torch.Tensor, dtype: torch.dtype, rowwise: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [M, K] as a row-major left operand and its inverse scale (per row when ``rowwise``)."""
    q, inverse = quantize(x, dtype, dim=-1 if rowwise else None)
    return q.contiguous(), inverse


def _right(rows: torch.Tensor, dtype: torch.dtype, rowwise: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The right operand ``rowsᵀ`` [K, N] (column-major) from ``rows`` [N, K], with its inverse scale
    (per column of the operand, shape [1, N], when ``rowwise``)."""
    q, inverse = quantize(rows, dtype, dim=-1 if rowwise else None)
    return q.contiguous().t(), inverse.reshape(1, -1) if rowwise else inverse


def _transposed(t: torch.Tensor) -> torch.Tensor:
    """``t.t()`` laid out row-major (one transposing copy, which Inductor fuses into ``t``'s producer)."""
    return t.t().contiguous()


class _ScaledLinear(torch.autograd.Function):
    """``x [M, K] @ weight [N, K]ᵀ`` with FP8 operands in forward and backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, recipe: ScaledMMRecipe, out_dtype: torch.dtype):
        ctx.recipe, ctx.x_dtype, ctx.weight_dtype, ctx.transpose_kernel = recipe, x.dtype, weight.dtype, \
            recipe.transpose_kernel
        x_q, x_inverse = _left(x, recipe.forward_dtype, recipe.rowwise)
        w_q, w_inverse = _right(weight, recipe.forward_dtype, recipe.rowwise)
        if recipe.rowwise:
            ctx.save_for_backward(x, weight)
        else:
            ctx.save_for_backward(x_q, w_q, x_inverse, w_inverse)
        return fp8_matmul(x_q, w_q, x_inverse, w_inverse, out_dtype, fast_accum=True)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        recipe = ctx.recipe
        if recipe.rowwise:
            x, weight = ctx.saved_tensors
            g_q, g_inverse = _left(grad, E4M3, True)
            gt_q, gt_inverse = _left(grad.t(), E4M3, True)
            w_cols, w_inverse = _right(weight.t(), recipe.forward_dtype, True)
            x_cols, x_inverse = _right(x.t(), recipe.forward_dtype, True)
            grad_x = fp8_matmul(g_q, w_cols, g_inverse, w_inverse, ctx.x_dtype)
            grad_weight = fp8_matmul(gt_q, x_cols, gt_inverse, x_inverse, ctx.weight_dtype)
            return grad_x, grad_weight, None, None
        g_q, g_inverse = _left(grad, recipe.grad_dtype, False)
        return (*_tensorwise_gradients(ctx, g_q, g_inverse, ctx.saved_tensors), None, None)


def _tensorwise_gradients(ctx, g_q: torch.Tensor, g_inverse: torch.Tensor, saved: tuple[torch.Tensor, ...],
                          g_transposed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``dx = dy · W`` and ``dW = dyᵀ · x`` from the FP8 output gradient (row-major; ``g_transposed``: its
    transpose, row-major, where its producer wrote one) and the FP8 copies of ``x`` and ``W`` the forward pass
    saved with their inverse scales (``saved``'s first four)."""
    x_q, w_cols, x_inverse, w_inverse = saved[:4]  # w_cols: Wᵀ [K, N], column-major
    transposed = fp8_transpose if ctx.transpose_kernel else _transposed
    grad_x = fp8_matmul(g_q, w_cols.contiguous().t(), g_inverse, w_inverse, ctx.x_dtype)  # W [N, K] column-major
    g_rows = transposed(g_q) if g_transposed is None else g_transposed
    grad_weight = fp8_matmul(g_rows, transposed(x_q).t(), g_inverse, x_inverse, ctx.weight_dtype)
    return grad_x, grad_weight


def _delayed_forward(ctx, x: torch.Tensor, weight: torch.Tensor, recipe: ScaledMMRecipe, out_dtype: torch.dtype,
                     scales: torch.Tensor, x_inverse: torch.Tensor, w_inverse: torch.Tensor, g_inverse: torch.Tensor,
                     amax_grad: torch.Tensor, save_product: bool = False,
                     keep: tuple[torch.Tensor, ...] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward GEMM of a delayed-scaling linear: the product and ``x``'s amax. Saves for the backward
    the FP8 operands and the scales, then with ``save_product`` the product, then the tensors in ``keep``."""
    ctx.x_dtype, ctx.weight_dtype, ctx.grad_dtype = x.dtype, weight.dtype, recipe.grad_dtype
    ctx.transpose_kernel, ctx.producer_transposes = recipe.transpose_kernel, recipe.producer_transposes
    x = x.contiguous()
    x_q, x_amax = cast_with_scale(x, scales[INPUT], recipe.forward_dtype), amax_of(x)
    w_cols = cast_with_scale(weight.contiguous(), scales[WEIGHT], recipe.forward_dtype).t()
    product = fp8_matmul(x_q, w_cols, x_inverse, w_inverse, out_dtype, fast_accum=True)
    ctx.save_for_backward(x_q, w_cols, x_inverse, w_inverse, scales, g_inverse, amax_grad,
                          *([product] if save_product else []), *keep)
    ctx.mark_non_differentiable(x_amax)
    return product, x_amax


class _DelayedScaledLinear(torch.autograd.Function):
    """``x [M, K] @ weight [N, K]ᵀ`` in FP8 with delayed (per-tensor) scaling: the operands are cast with the
    given ``scales`` (input, weight, gradient; ``inverses`` undo them). Returns the product and ``x``'s amax;
    the backward pass keeps the gradient's amax in ``amax_grad``."""

    @staticmethod
    def forward(ctx, *args):
        return _delayed_forward(ctx, *args)

    @staticmethod
    def backward(ctx, grad: torch.Tensor, _amax_grad: torch.Tensor | None):
        saved = ctx.saved_tensors  # NOTE: read once: the amax update below bumps amax_grad's version
        scales, g_inverse, amax_grad = saved[4:7]
        g_q = cast_with_scale(grad, scales[GRAD], ctx.grad_dtype)
        record_amax(amax_grad, amax_of(grad))
        return (*_tensorwise_gradients(ctx, g_q.contiguous(), g_inverse, saved), *[None] * 7)


class _DelayedScaledSwiGLULinear(torch.autograd.Function):
    """``swiglu(x @ weightᵀ)`` for a ``[gate; up]`` weight, the GEMM as :class:`_DelayedScaledLinear`'s. Its
    backward pass gets the GEMM's output gradient already scaled and cast to FP8, with its amax, from the
    SwiGLU backward kernel (:func:`trainer.kernels.swiglu.swiglu_backward_cast`): no bf16 gradient is stored and
    read again by a cast."""

    @staticmethod
    def forward(ctx, *args):
        fused, x_amax = _delayed_forward(ctx, *args, save_product=True)
        return swiglu_values(fused), x_amax

    @staticmethod
    def backward(ctx, grad: torch.Tensor, _amax_grad: torch.Tensor | None):
        saved = ctx.saved_tensors
        scales, g_inverse, amax_grad, fused = saved[4:8]
        cast = swiglu_backward_cast_transposed if ctx.producer_transposes else swiglu_backward_cast
        g_q, *g_transposed, amax = cast(fused, grad.contiguous(), scales[GRAD], ctx.grad_dtype)
        record_amax(amax_grad, amax)
        return (*_tensorwise_gradients(ctx, g_q, g_inverse, saved, *g_transposed), *[None] * 7)


class _DelayedScaledRotaryLinear(torch.autograd.Function):
    """``rotary_heads(x @ weightᵀ)`` (q, k rotated, v) for a fused QKV weight, the GEMM as
    :class:`_DelayedScaledLinear`'s. Its backward pass gets the GEMM's output gradient already scaled and cast
    to FP8, with its amax, from RoPE's backward kernel (:func:`trainer.kernels.rotary.rotary_backward_cast`)."""

    @staticmethod
    def forward(ctx, x, weight, recipe, out_dtype, scales, x_inverse, w_inverse, g_inverse, amax_grad,
                cos: torch.Tensor, sin: torch.Tensor, shape: HeadShape, batch: int):
        product, x_amax = _delayed_forward(ctx, x, weight, recipe, out_dtype, scales, x_inverse, w_inverse,
                                           g_inverse, amax_grad, keep=(cos, sin))
        ctx.shape = shape
        return *rotary_heads_values(product.view(batch, -1, product.shape[-1]), (cos, sin), shape), x_amax

    @staticmethod
    def backward(ctx, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, _amax_grad: torch.Tensor | None):
        saved = ctx.saved_tensors
        scales, g_inverse, amax_grad, cos, sin = saved[4:9]
        cast = rotary_backward_cast_transposed if ctx.producer_transposes else rotary_backward_cast
        g_q, *g_transposed, amax = cast(dq, dk, dv, cos, sin, scales[GRAD], ctx.grad_dtype, *ctx.shape)
        record_amax(amax_grad, amax)
        return (*_tensorwise_gradients(ctx, g_q, g_inverse, saved, *g_transposed), *[None] * 11)


def _output_dtype(x: torch.Tensor) -> torch.dtype:
    """What ``F.linear`` would return here: the autocast dtype inside autocast, else ``x``'s dtype."""
    kind = x.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else x.dtype


def _fp8_rows(x: torch.Tensor, weight: torch.Tensor, eligible: Eligibility) -> torch.Tensor | None:
    """``x`` as the [tokens, in] matrix an FP8 GEMM takes, or None when the shape is not eligible."""
    out_features, in_features = weight.shape
    tokens = x.numel() // in_features
    return x.reshape(tokens, in_features) if eligible(tokens, in_features, out_features) else None


def scaled_mm_linear(x: torch.Tensor, weight: torch.Tensor, *, recipe: ScaledMMRecipe,
                     eligible: Eligibility) -> torch.Tensor:
    """``x @ weight.T`` (the local-GEMM contract of ``trainer.model.layers.GEMMS``) in FP8 where the shape is
    eligible, else the plain ``F.linear``."""
    rows = _fp8_rows(x, weight, eligible)
    if rows is None:
        return F.linear(x, weight)
    out = _ScaledLinear.apply(rows, weight, recipe, _output_dtype(x))
    return out.view(*x.shape[:-1], weight.shape[0])


def make_scaled_mm_gemm(recipe: ScaledMMRecipe, eligible: Eligibility):
    """The local GEMM for ``recipe`` (a plain function, so torch.compile traces straight through it)."""
    return functools.partial(scaled_mm_linear, recipe=recipe, eligible=eligible)


@dataclass(frozen=True)
class DelayedScaledGemm:
    """The local GEMM of ``--fp8-recipe delayed``: ``x @ weight.T`` in FP8 cast with the scales of the
    linear's own :class:`~trainer.fp8.delayed.DelayedScales` (its third argument; every linear makes one
    with :meth:`new_scales`), whose amaxes it updates. While ``calibration`` is active it runs current
    scaling and records the amaxes (eagerly: a gradient hook). Ineligible shapes run the plain
    ``F.linear``."""

    recipe: ScaledMMRecipe
    eligible: Eligibility
    calibration: Calibration

    @staticmethod
    def new_scales() -> DelayedScales:
        """The per-linear state this GEMM needs (a submodule of the linear)."""
        return DelayedScales()

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, scales: DelayedScales) -> torch.Tensor:
        rows = _fp8_rows(x, weight, self.eligible)
        if rows is None:
            return F.linear(x, weight)
        if self.calibration.active:
            out = self._calibrating(rows, weight, scales, _output_dtype(x))
        else:
            (out,) = self._delayed(_DelayedScaledLinear, rows, x, weight, scales)
        return out.view(*x.shape[:-1], weight.shape[0])

    def swiglu(self, x: torch.Tensor, weight: torch.Tensor, scales: DelayedScales) -> torch.Tensor:
        """``swiglu(self(x, weight, scales))`` for a ``[gate; up]`` weight; past calibration its backward
        pass writes the GEMM's FP8 output gradient straight from the SwiGLU kernel."""
        rows = _fp8_rows(x, weight, self.eligible)
        if rows is None or self.calibration.active:
            return swiglu(self(x, weight, scales))
        (out,) = self._delayed(_DelayedScaledSwiGLULinear, rows, x, weight, scales)
        return out.view(*x.shape[:-1], weight.shape[0] // 2)

    def rotary_heads(self, x: torch.Tensor, weight: torch.Tensor, scales: DelayedScales,
                     rotary: tuple[torch.Tensor, torch.Tensor],
                     shape: HeadShape) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``rotary_heads(self(x, weight, scales), rotary, shape)`` for a fused QKV weight; past calibration
        its backward pass writes the GEMM's FP8 output gradient straight from RoPE's backward kernel."""
        rows = _fp8_rows(x, weight, self.eligible)
        if rows is None or self.calibration.active:
            return rotary_heads(self(x, weight, scales), rotary, shape)
        return self._delayed(_DelayedScaledRotaryLinear, rows, x, weight, scales, *rotary, shape, x.shape[0])

    def _delayed(self, function: type[torch.autograd.Function], rows: torch.Tensor, x: torch.Tensor,
                 weight: torch.Tensor, scales: DelayedScales, *extra) -> tuple[torch.Tensor, ...]:
        """``function`` applied with this linear's scales (and its own ``extra`` arguments): its outputs but the
        last, the input's amax, which is recorded."""
        *outputs, x_amax = function.apply(rows, weight, self.recipe, _output_dtype(x), scales.scale,
                                          *scales.inverses(), scales.amax_grad, *extra)
        record_amax(scales.amax_input, x_amax)
        return tuple(outputs)

    def _calibrating(self, rows: torch.Tensor, weight: torch.Tensor, scales: DelayedScales,
                     out_dtype: torch.dtype) -> torch.Tensor:
        """Current scaling, recording the input's amax now and the output gradient's when it arrives."""
        record_amax(scales.amax_input, amax_of(rows.detach()))
        out = _ScaledLinear.apply(rows, weight, self.recipe, out_dtype)
        if out.requires_grad:
            out.register_hook(lambda grad: record_amax(scales.amax_grad, amax_of(grad)))
        return out


def build_parts(config: FP8Config, recipe: str, eligible: Eligibility) -> BackendParts:
    """The ``scaled_mm`` backend's parts: the dynamic-scaling GEMM, or for ``delayed`` the delayed GEMM with its
    once-a-step scale update and a calibrating first step."""
    forward_dtype, grad_dtype = FORMATS[config.fp8_format]
    recipe_spec = ScaledMMRecipe(forward_dtype, grad_dtype, rowwise=recipe == "blockwise",
                                 transpose_kernel=config.fp8_transpose != "fused",
                                 producer_transposes=config.fp8_transpose == "producers")
    note = "" if recipe == "blockwise" else f"transposed FP8 copies: {config.fp8_transpose} (--fp8-transpose)"
    if recipe != "delayed":
        return BackendParts(make_scaled_mm_gemm(recipe_spec, eligible), note=note)
    calibration = Calibration()
    update = DelayedScalingUpdate(config.fp8_amax_history_len, config.fp8_amax_compute_algo, forward_dtype,
                                  grad_dtype, calibration)
    return BackendParts(DelayedScaledGemm(recipe_spec, eligible, calibration), after_backward=update,
                        step_context=calibration.step_context, eager_steps=1,
                        attach_optimizer=update.take_weight_amaxes_from, note=note)


BACKEND = FP8Backend("scaled_mm", None, ("delayed", "tensorwise", "blockwise"), build_parts, compilable=True,
                     summary="own torch._scaled_mm linear")
