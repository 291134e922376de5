"""The QKV linear's output gradient under delayed FP8 scaling, written by RoPE's backward kernel already cast.

Attention's backward gives ``dq``, ``dk``, ``dv``; the QKV GEMMs want ``[dq; dk; dv]`` (RoPE undone on ``dq``
and ``dk``, heads back in the fused weight's per-group layout) cast to FP8 with its amax. Compiled from the
autograd formula, Inductor did all of that in one kernel, but a row reduction over the concatenation whose
every element loads from three masked sources: on the H200 it moved ~1.4 TB/s (214 µs per layer of the 1.3b
preset for 0.3 GB; bench/train_h200.md, ninth run). Here each program takes a tile of tokens of one head:
it loads the head's two halves once, rotates them back, rounds to the gradient's dtype (as the bf16 gradient
would have been), and stores the scaled FP8 values into the head's columns, keeping the tile's amax.

The op is a ``torch.library.triton_op`` (compiled, Inductor launches the kernels itself); off CUDA, or
without Triton, it is the same computation in tensor code (:func:`rotary_cast_reference`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch.library import wrap_triton

from trainer.fp8.delayed import cast_outputs
from trainer.fp8.scaling import fp8_max
from trainer.kernel_ops import kernel_op, launcher
from trainer.layers import HeadShape, rotary_backward


@dataclass(frozen=True)
class Tiling:
    """The Triton kernel's launch shape: a program takes ``tokens`` tokens of one head, with ``warps`` warps."""

    tokens: int = 64
    warps: int = 4


#: The launch shapes used, of the cast and of the cast that also writes the transposed copy. On an H200
#: ``bench/fp8_kernels.py`` timed the cast 102 µs a layer of the 1.3b preset with 32 tokens and 8 warps against 108
#: for 64 tokens and 4 warps (the FP8 speed run trains with it, bench/train_h200.md, twelfth run; its first try
#: faulted in Inductor's clone of a slice of the then shared amax buffer: see ``launch``), and the transposing
#: cast 142 µs with 32 tokens and 2 warps, against 162 for the cast then the tiled transposing kernel.
TILING = {"cast": Tiling(tokens=32, warps=8), "transposed": Tiling(tokens=32, warps=2)}


def qkv_gradient(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 shape: HeadShape) -> torch.Tensor:
    """The fused QKV output's gradient [tokens, width] in ``dq``'s dtype from the gradients of q, k (rotated)
    and v [B, S, heads, head_dim], in tensor code (rounded once, from fp32)."""
    groups, per_group, head_dim = shape
    batch, size = dq.shape[:2]
    parts = (rotary_backward(dq, cos, sin).view(batch, size, groups, per_group, head_dim),
             rotary_backward(dk, cos, sin).unsqueeze(3), dv.float().unsqueeze(3))
    return torch.cat(parts, dim=3).to(dq.dtype).view(batch * size, -1)


def rotary_cast_reference(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor,
                          sin: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, shape: HeadShape,
                          transposed: bool = False) -> tuple[torch.Tensor, ...]:
    """:func:`rotary_backward_cast` (with ``transposed``: :func:`rotary_backward_cast_transposed`) in tensor
    code."""
    return cast_outputs(qkv_gradient(dq, dk, dv, cos, sin, shape), scale, dtype, transposed)


@kernel_op("blendforge::rotary_backward_cast")
def rotary_backward_cast(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         scale: torch.Tensor, dtype: torch.dtype, groups: int, per_group: int,
                         head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The QKV gradient [tokens, width] (:func:`qkv_gradient`) times ``scale``, saturated into ``dtype``, and
    its amax (fp32, 0-d), from ``dq`` [B, S, groups·per_group, head_dim], ``dk`` and ``dv`` [B, S, groups,
    head_dim] and RoPE's tables ``cos``/``sin`` [B, S, 1, head_dim]."""
    launch = launcher(triton_rotary_cast, rotary_cast_reference, dq.device)
    return launch(dq, dk, dv, cos, sin, scale, dtype, (groups, per_group, head_dim))


@kernel_op("blendforge::rotary_backward_cast_transposed")
def rotary_backward_cast_transposed(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor,
                                    sin: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, groups: int,
                                    per_group: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`rotary_backward_cast` with the cast gradient's transpose [width, tokens] (row-major, the weight
    gradient GEMM's left operand) between the two: on CUDA written by the same kernels, so no transposing copy
    reads the gradient again (``--fp8-transpose producers``)."""
    launch = launcher(triton_rotary_cast, rotary_cast_reference, dq.device)
    return launch(dq, dk, dv, cos, sin, scale, dtype, (groups, per_group, head_dim), transposed=True)


@functools.cache
def triton_rotary_cast():
    """The Triton launcher of :func:`rotary_backward_cast` (same arguments, the head shape as one tuple; with
    ``transposed``, that of :func:`rotary_backward_cast_transposed`), or None where Triton is not importable.
    Built on first use, so ``TRITON_INTERPRET=1`` set before then runs it on the CPU; ``dtype`` may then be bf16
    (the interpreter converts to FP8 wrongly)."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def rotary_backward_cast_kernel(grad_ptr, cos_ptr, sin_ptr, out_ptr, scale_ptr, amax_ptr, tokens, seq_length,
                                    grad_stride_b, grad_stride_s, grad_stride_h, table_stride_b, table_stride_s,
                                    out_width, heads_per_group, group_width, slot, half, transposed_ptr,
                                    LIMIT: tl.constexpr, HALF_BLOCK: tl.constexpr, BLOCK: tl.constexpr,
                                    ROTATE: tl.constexpr, TRANSPOSED: tl.constexpr):
        head = tl.program_id(1)
        token = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)[:, None]
        col = tl.arange(0, HALF_BLOCK)[None, :]
        mask = (token < tokens) & (col < half)
        batch, position = (token // seq_length).to(tl.int64), (token % seq_length).to(tl.int64)
        at = grad_ptr + batch * grad_stride_b + position * grad_stride_s + head * grad_stride_h + col
        first = tl.load(at, mask=mask, other=0.0).to(tl.float32)
        second = tl.load(at + half, mask=mask, other=0.0).to(tl.float32)
        if ROTATE:  # [g₁·cos₁ + g₂·sin₂; g₂·cos₂ − g₁·sin₁] (trainer.layers.rotary_backward)
            table = batch * table_stride_b + position * table_stride_s + col
            cos_first = tl.load(cos_ptr + table, mask=mask, other=0.0).to(tl.float32)
            cos_second = tl.load(cos_ptr + table + half, mask=mask, other=0.0).to(tl.float32)
            sin_first = tl.load(sin_ptr + table, mask=mask, other=0.0).to(tl.float32)
            sin_second = tl.load(sin_ptr + table + half, mask=mask, other=0.0).to(tl.float32)
            first, second = first * cos_first + second * sin_second, second * cos_second - first * sin_first
        # NOTE: as the bf16 gradient would be cast: rounded first; masked elements are 0, outside the amax
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
               scale: torch.Tensor, dtype: torch.dtype, shape: HeadShape,
               transposed: bool = False) -> tuple[torch.Tensor, ...]:
        groups, per_group, head_dim = shape
        batch, size = dq.shape[:2]
        tokens, group_width = batch * size, (per_group + 2) * head_dim
        cos, sin = cos.expand(batch, size, 1, head_dim), sin.expand(batch, size, 1, head_dim)
        if any(t.stride(-1) != 1 for t in (dq, dk, dv, cos, sin)) or cos.stride() != sin.stride():
            dq, dk, dv, cos, sin = (t.contiguous() for t in (dq, dk, dv, cos, sin))
        out = dq.new_empty(tokens, groups * group_width, dtype=dtype)
        # NOTE: without the transposed copy the kernel never writes transposed_ptr: `out` stands in for it
        out_t = out.new_empty(out.shape[1], tokens) if transposed else out
        tiling = TILING["transposed" if transposed else "cast"]
        blocks = triton.cdiv(tokens, tiling.tokens)
        # NOTE: one launch per source: q heads fill the first per_group slots of each group, k the next, v the last
        sources = ((dq, per_group, 0, True), (dk, 1, per_group, True), (dv, 1, per_group + 1, False))
        amaxes = []
        for grad, heads_per_group, slot, rotate in sources:
            heads = grad.shape[2]
            # NOTE: each launch its own amax buffer, never a slice of a shared one: compiled, torch 2.11's Inductor
            # clones a kernel's mutated view at an offset reading past its buffer (pytorch#192226; on the H200 it
            # faulted with 32-token tiles, bench/train_h200.md, eleventh run)
            amax = dq.new_empty(blocks * heads, dtype=torch.float32)
            wrap_triton(rotary_backward_cast_kernel)[(blocks, heads)](
                grad, cos, sin, out, scale, amax, tokens, size, grad.stride(0), grad.stride(1), grad.stride(2),
                cos.stride(0), cos.stride(1), out.shape[1], heads_per_group,
                # NOTE: the limit a constexpr: Inductor passes a float argument of a kernel it launches as fp64
                group_width, slot, head_dim // 2, out_t, LIMIT=fp8_max(dtype),
                HALF_BLOCK=triton.next_power_of_2(head_dim // 2), BLOCK=tiling.tokens, ROTATE=rotate,
                TRANSPOSED=transposed, num_warps=tiling.warps)
            amaxes.append(amax.amax())
        amax = torch.stack(amaxes).amax()
        return (out, out_t, amax) if transposed else (out, amax)

    return launch
