"""The Triton kernel of RoPE's backward on the fused QKV output (:mod:`trainer.kernels.rotary`): each program takes a
tile of tokens of one head, loads the head's two halves once, rotates them back in fp32 and writes them into the
head's columns of the ``[dq; dk; dv]`` gradient — or, with a scale and an FP8 dtype, that gradient rounded to the
input's dtype, scaled, saturated and cast, with its amax, and optionally its transpose too.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch.library import wrap_triton

from trainer.kernels.fp8_cast import fp8_max


@dataclass(frozen=True)
class Tiling:
    """The Triton kernel's launch shape: a program takes ``tokens`` tokens of one head, with ``warps`` warps."""

    tokens: int = 64
    warps: int = 4


#: The launch shapes used: of the plain backward, of the FP8 cast and of the cast that also writes the transposed
#: copy, the fastest of ``bench/kernels/fp8_kernels.py``'s sweep on an H200 (bench/RESULTS.md). The plain backward
#: writes twice the cast's bytes: the cast's shape until a sweep says otherwise.
TILING = {"plain": Tiling(tokens=32, warps=8), "cast": Tiling(tokens=32, warps=8),
          "transposed": Tiling(tokens=32, warps=2)}


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
           shape: tuple[int, int, int], scale: torch.Tensor | None = None, dtype: torch.dtype | None = None,
           transposed: bool = False):
    """``(dq, dk, dv, cos, sin, shape) -> gradient`` of the fused QKV output; with ``scale, dtype`` that gradient
    rounded to ``dq``'s dtype, times ``scale``, saturated into ``dtype`` (delayed scaling's cast), with its amax;
    with ``transposed`` too, the cast gradient, its transpose [width, tokens] row-major and the amax. Under the
    interpreter ``dtype`` may be bf16 (it converts to FP8 wrongly)."""
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
        # clones a kernel's mutated view at an offset reading past its buffer (pytorch#192226: it faults). Without
        # the cast the kernel never reads scale_ptr nor writes amax_ptr: `out` stands in for both
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
