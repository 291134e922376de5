"""Rotary position embeddings on the fused QKV output, with a one-pass backward.

:func:`rotary_heads` splits the QKV GEMM's output into q, k (rotated) and v. Its forward is plain tensor code
(Inductor fuses it into one pass). Its backward is a Triton op (``torch.library.triton_op``: compiled, Inductor
launches the kernel itself): compiled from the autograd formula instead, Inductor rotated ``dk`` back into a
buffer of its own, then read ``dq``, that buffer and ``dv`` to assemble the ``[dq; dk; dv]`` gradient — 0.54 GB
moved at ~2.8 TB/s, 194 µs a layer of the 1.3b preset on an H200 (bench/train_h200.md, thirteenth run). The
kernel reads each head's two halves once, rotates them back in fp32, and writes them into the head's columns
of the fused gradient: 0.4 GB. Elsewhere (or without Triton) the op is the same formula in tensor code
(:func:`qkv_gradient`).

The same kernel, with ``scale`` and an FP8 ``dtype``, is delayed FP8 scaling's: it writes that gradient cast to
FP8 with its amax (and the transposed copy too when asked): :mod:`trainer.kernels.rotary_cast`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch.library import wrap_triton

from trainer.kernels.ops import kernel_op, launcher

#: The local head layout of a fused QKV output: (key/value groups, query heads per group, head size).
HeadShape = tuple[int, int, int]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` [B, S, heads, head_dim] by the tables of :class:`trainer.model.layers.RotaryEmbedding`."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


def rotary_backward(grad: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The gradient of :func:`apply_rotary`'s input from its output's ``grad``: ``grad·cos`` plus the
    transposed half-rotation of ``grad·sin`` (``[g₂; −g₁]``), in fp32."""
    grad = grad.float()
    first, second = (grad * sin).chunk(2, dim=-1)
    return grad * cos + torch.cat((second, -first), dim=-1)


def rotary_heads(qkv: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                 shape: HeadShape) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k (rotated) and v [B, S, heads, head_dim] from a fused QKV output [B, S, width] laid out per group as
    ``[q heads…, k, v]`` (the qkv weight's row layout); the backward pass is :func:`rotary_backward_qkv`."""
    return _RotaryHeads.apply(qkv, *rotary, shape)


def rotary_heads_values(qkv: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                        shape: HeadShape) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The forward formula of :func:`rotary_heads` alone (for autograd functions that own the backward)."""
    groups, per_group, head_dim = shape
    batch, size = qkv.shape[:2]
    qkv = qkv.view(batch, size, groups, per_group + 2, head_dim)
    q = apply_rotary(qkv[:, :, :, :per_group].reshape(batch, size, groups * per_group, head_dim), *rotary)
    k = apply_rotary(qkv[:, :, :, per_group], *rotary)
    return q, k, qkv[:, :, :, per_group + 1]


class _RotaryHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, shape: HeadShape):
        ctx.save_for_backward(cos, sin)
        ctx.shape, ctx.qkv_shape = shape, qkv.shape
        return rotary_heads_values(qkv, (cos, sin), shape)

    @staticmethod
    def backward(ctx, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor):
        cos, sin = ctx.saved_tensors
        return rotary_backward_qkv(dq, dk, dv, cos, sin, *ctx.shape).view(ctx.qkv_shape), None, None, None


def qkv_gradient(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 shape: HeadShape) -> torch.Tensor:
    """The fused QKV output's gradient [tokens, width] in ``dq``'s dtype from the gradients of q, k (rotated)
    and v [B, S, heads, head_dim], in tensor code (rounded once, from fp32)."""
    groups, per_group, head_dim = shape
    batch, size = dq.shape[:2]
    parts = (rotary_backward(dq, cos, sin).view(batch, size, groups, per_group, head_dim),
             rotary_backward(dk, cos, sin).unsqueeze(3), dv.float().unsqueeze(3))
    return torch.cat(parts, dim=3).to(dq.dtype).view(batch * size, -1)


@kernel_op("blendforge::rotary_backward_qkv")
def rotary_backward_qkv(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                        groups: int, per_group: int, head_dim: int) -> torch.Tensor:
    """:func:`qkv_gradient` [tokens, width] from ``dq`` [B, S, groups·per_group, head_dim], ``dk`` and ``dv``
    [B, S, groups, head_dim] and RoPE's tables ``cos``/``sin`` [B, S, 1, head_dim]: on CUDA the Triton kernel."""
    launch = launcher(triton_rotary_backward, qkv_gradient, dq.device)
    return launch(dq, dk, dv, cos, sin, (groups, per_group, head_dim))


@dataclass(frozen=True)
class Tiling:
    """The Triton kernel's launch shape: a program takes ``tokens`` tokens of one head, with ``warps`` warps."""

    tokens: int = 64
    warps: int = 4


#: The launch shapes used: of the plain backward, of the FP8 cast and of the cast that also writes the
#: transposed copy. On an H200 ``bench/fp8_kernels.py`` timed the cast 102 µs a layer of the 1.3b preset with 32
#: tokens and 8 warps against 108 for 64 tokens and 4 warps (its first try faulted in Inductor's clone of a slice
#: of the then shared amax buffer: see ``launch``), and the transposing cast 142 µs with 32 tokens and 2 warps,
#: against 162 for the cast then the tiled transposing kernel (bench/train_h200.md, twelfth run). The plain
#: backward writes twice the cast's bytes: the cast's shape until a sweep says otherwise.
TILING = {"plain": Tiling(tokens=32, warps=8), "cast": Tiling(tokens=32, warps=8),
          "transposed": Tiling(tokens=32, warps=2)}


@functools.cache
def triton_rotary_backward():
    """The Triton launcher ``(dq, dk, dv, cos, sin, shape) -> gradient`` of :func:`rotary_backward_qkv`; with
    ``scale, dtype`` that gradient rounded to ``dq``'s dtype, times ``scale``, saturated into ``dtype`` (delayed
    scaling's cast), with its amax; with ``transposed`` too, the cast gradient, its transpose [width, tokens]
    row-major and the amax. None where Triton is not importable.

    Built on first use, so ``TRITON_INTERPRET=1`` set before then runs it on the CPU; ``dtype`` may then be bf16
    (the interpreter converts to FP8 wrongly)."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None
    from trainer.fp8.scaling import fp8_max  # NOTE: here: trainer.fp8's package imports this module

    @triton.jit
    def rotary_backward_kernel(grad_ptr, cos_ptr, sin_ptr, out_ptr, scale_ptr, amax_ptr, tokens, seq_length,
                               grad_stride_b, grad_stride_s, grad_stride_h, table_stride_b, table_stride_s,
                               out_width, heads_per_group, group_width, slot, half, transposed_ptr,
                               LIMIT: tl.constexpr, HALF_BLOCK: tl.constexpr, BLOCK: tl.constexpr,
                               ROTATE: tl.constexpr, CAST: tl.constexpr, TRANSPOSED: tl.constexpr):
        head = tl.program_id(1)
        token = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)[:, None]
        col = tl.arange(0, HALF_BLOCK)[None, :]
        mask = (token < tokens) & (col < half)
        batch, position = (token // seq_length).to(tl.int64), (token % seq_length).to(tl.int64)
        at = grad_ptr + batch * grad_stride_b + position * grad_stride_s + head * grad_stride_h + col
        first = tl.load(at, mask=mask, other=0.0).to(tl.float32)
        second = tl.load(at + half, mask=mask, other=0.0).to(tl.float32)
        if ROTATE:  # [g₁·cos₁ + g₂·sin₂; g₂·cos₂ − g₁·sin₁] (rotary_backward)
            table = batch * table_stride_b + position * table_stride_s + col
            cos_first = tl.load(cos_ptr + table, mask=mask, other=0.0).to(tl.float32)
            cos_second = tl.load(cos_ptr + table + half, mask=mask, other=0.0).to(tl.float32)
            sin_first = tl.load(sin_ptr + table, mask=mask, other=0.0).to(tl.float32)
            sin_second = tl.load(sin_ptr + table + half, mask=mask, other=0.0).to(tl.float32)
            first, second = first * cos_first + second * sin_second, second * cos_second - first * sin_first
        if CAST:  # as the bf16 gradient would be cast: rounded first; masked elements are 0, outside the amax
            first = first.to(grad_ptr.dtype.element_ty).to(tl.float32)
            second = second.to(grad_ptr.dtype.element_ty).to(tl.float32)
            amax = tl.maximum(tl.max(tl.abs(first)), tl.max(tl.abs(second)))
            tl.store(amax_ptr + tl.program_id(0) * tl.num_programs(1) + head, amax)
            scale = tl.load(scale_ptr)
            first = tl.clamp(first * scale, -LIMIT, LIMIT, propagate_nan=tl.PropagateNan.ALL)
            second = tl.clamp(second * scale, -LIMIT, LIMIT, propagate_nan=tl.PropagateNan.ALL)
        first, second = first.to(out_ptr.dtype.element_ty), second.to(out_ptr.dtype.element_ty)
        column = (head // heads_per_group) * group_width + (head % heads_per_group + slot) * (2 * half)
        out_at = out_ptr + token.to(tl.int64) * out_width + column + col
        tl.store(out_at, first, mask=mask)
        tl.store(out_at + half, second, mask=mask)
        if TRANSPOSED:  # element (token, column) of the gradient at (column, token) of its transpose
            transposed_at = transposed_ptr + (column + col).to(tl.int64) * tokens + token
            tl.store(transposed_at, first, mask=mask)
            tl.store(transposed_at + half * tokens, second, mask=mask)

    def launch(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               shape: HeadShape, scale: torch.Tensor | None = None, dtype: torch.dtype | None = None,
               transposed: bool = False):
        groups, per_group, head_dim = shape
        batch, size = dq.shape[:2]
        tokens, group_width = batch * size, (per_group + 2) * head_dim
        cos, sin = cos.expand(batch, size, 1, head_dim), sin.expand(batch, size, 1, head_dim)
        if any(t.stride(-1) != 1 for t in (dq, dk, dv, cos, sin)) or cos.stride() != sin.stride():
            dq, dk, dv, cos, sin = (t.contiguous() for t in (dq, dk, dv, cos, sin))
        cast = scale is not None
        out = dq.new_empty(tokens, groups * group_width, dtype=dtype if cast else dq.dtype)
        # NOTE: without the transposed copy the kernel never writes transposed_ptr: `out` stands in for it
        out_t = out.new_empty(out.shape[1], tokens) if transposed else out
        tiling = TILING["transposed" if transposed else "cast" if cast else "plain"]
        blocks = triton.cdiv(tokens, tiling.tokens)
        # NOTE: one launch per source: q heads fill the first per_group slots of each group, k the next, v the last
        sources = ((dq, per_group, 0, True), (dk, 1, per_group, True), (dv, 1, per_group + 1, False))
        amaxes = []
        for grad, heads_per_group, slot, rotate in sources:
            heads = grad.shape[2]
            # NOTE: each launch its own amax buffer, never a slice of a shared one: compiled, torch 2.11's Inductor
            # clones a kernel's mutated view at an offset reading past its buffer (pytorch#192226; on the H200 it
            # faulted with 32-token tiles, bench/train_h200.md, eleventh run). Without the cast the kernel never
            # reads scale_ptr nor writes amax_ptr: `out` stands in for both
            amax = dq.new_empty(blocks * heads, dtype=torch.float32) if cast else out
            wrap_triton(rotary_backward_kernel)[(blocks, heads)](
                grad, cos, sin, out, scale if cast else out, amax, tokens, size, grad.stride(0), grad.stride(1),
                grad.stride(2), cos.stride(0), cos.stride(1), out.shape[1], heads_per_group,
                # NOTE: the limit a constexpr: Inductor passes a float argument of a kernel it launches as fp64
                group_width, slot, head_dim // 2, out_t, LIMIT=fp8_max(dtype) if cast else 0.0,
                HALF_BLOCK=triton.next_power_of_2(head_dim // 2), BLOCK=tiling.tokens, ROTATE=rotate, CAST=cast,
                TRANSPOSED=transposed, num_warps=tiling.warps)
            if cast:
                amaxes.append(amax.amax())
        if not cast:
            return out
        amax = torch.stack(amaxes).amax()
        return (out, out_t, amax) if transposed else (out, amax)

    return launch
