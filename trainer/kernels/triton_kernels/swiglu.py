"""The Triton kernel of SwiGLU's backward (:mod:`trainer.kernels.swiglu`): one pass reading ``gate``, ``up`` and the
output gradient, writing ``[dgate | dup]``, or that gradient rounded to the input's dtype, scaled, saturated into an
FP8 dtype with its amax (delayed scaling's cast), and optionally its transpose too.
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
    """The backward kernel's launch shape: ``elements`` per program (up to ``columns`` columns of as many rows
    as fill it), ``warps`` warps. ``bench/kernels/fp8_kernels.py`` sweeps it on the GPU."""

    elements: int = 2048
    warps: int = 8
    columns: int = 1024


#: The launch shapes used, of the plain kernel, of the one casting to FP8 with the amax, and of the cast that also
#: writes the transposed copy (square tiles: 64 of its columns make a 64-byte run of FP8 bytes in the transpose):
#: the fastest of ``bench/kernels/fp8_kernels.py``'s sweep on an H200 (bench/RESULTS.md).
TILING = {"plain": Tiling(), "cast": Tiling(elements=4096), "transposed": Tiling(elements=4096, columns=64)}


@triton.jit
def swiglu_backward_kernel(fused_ptr, grad_ptr, out_ptr, transposed_ptr, scale_ptr, amax_ptr, rows, width,
                           fused_stride, grad_stride, LIMIT: tl.constexpr, BLOCK_ROWS: tl.constexpr,
                           BLOCK_COLS: tl.constexpr, CAST: tl.constexpr, TRANSPOSED: tl.constexpr):
    row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)[:, None]
    col = tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)[None, :]
    mask = (row < rows) & (col < width)
    row = row.to(tl.int64)
    gate_at = fused_ptr + row * fused_stride + col
    gate = tl.load(gate_at, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_at + width, mask=mask, other=0.0).to(tl.float32)
    grad = tl.load(grad_ptr + row * grad_stride + col, mask=mask, other=0.0).to(tl.float32)
    sigmoid = tl.sigmoid(gate)
    dgate = grad * up * sigmoid * (1.0 + gate * (1.0 - sigmoid))
    dup = grad * gate * sigmoid
    if CAST:  # as the bf16 gradient would be cast: rounded first; masked elements are 0, outside the amax
        dgate = dgate.to(fused_ptr.dtype.element_ty).to(tl.float32)
        dup = dup.to(fused_ptr.dtype.element_ty).to(tl.float32)
        amax = tl.maximum(tl.max(tl.abs(dgate)), tl.max(tl.abs(dup)))
        tl.store(amax_ptr + tl.program_id(0) * tl.num_programs(1) + tl.program_id(1), amax)
        scale = tl.load(scale_ptr)
        dgate = tl.clamp(dgate * scale, -LIMIT, LIMIT, propagate_nan=tl.PropagateNan.ALL)
        dup = tl.clamp(dup * scale, -LIMIT, LIMIT, propagate_nan=tl.PropagateNan.ALL)
    dgate, dup = dgate.to(out_ptr.dtype.element_ty), dup.to(out_ptr.dtype.element_ty)
    out_at = out_ptr + row * (2 * width) + col
    tl.store(out_at, dgate, mask=mask)
    tl.store(out_at + width, dup, mask=mask)
    if TRANSPOSED:  # element (row, col) of the gradient at (col, row) of its transpose
        transposed_at = transposed_ptr + col.to(tl.int64) * rows + row
        tl.store(transposed_at, dgate, mask=mask)
        tl.store(transposed_at + width * rows, dup, mask=mask)


def launch(fused: torch.Tensor, grad: torch.Tensor, scale: torch.Tensor | None = None,
           dtype: torch.dtype | None = None, transposed: bool = False):
    """``(fused, grad) -> [dgate | dup]``; with ``scale, dtype`` that gradient rounded to ``fused``'s dtype, times
    ``scale``, saturated into ``dtype``, and its amax; with ``transposed`` too, the cast gradient, its transpose
    [2F, rows] row-major and the amax."""
    rows, width = grad.shape
    if fused.stride(-1) != 1 or grad.stride(-1) != 1:
        fused, grad = fused.contiguous(), grad.contiguous()
    out = torch.empty_like(fused, dtype=dtype or fused.dtype, memory_format=torch.contiguous_format)
    # NOTE: without the transposed copy the kernel never writes transposed_ptr: `out` stands in for it
    out_t = out.new_empty(2 * width, rows) if transposed else out
    cast = scale is not None
    tiling = TILING["transposed" if transposed else "cast" if cast else "plain"]
    block_cols = min(tiling.columns, triton.next_power_of_2(width))
    block_rows = max(1, tiling.elements // block_cols)
    grid = (triton.cdiv(rows, block_rows), triton.cdiv(width, block_cols))
    # NOTE: without the cast the kernel never reads scale_ptr nor writes amax_ptr: `out` stands in for both
    amaxes = fused.new_empty(grid[0] * grid[1], dtype=torch.float32) if cast else out
    # NOTE: wrap_triton: traced inside the ops, Inductor launches the kernel itself; the limit a constexpr, as
    # Inductor passes float arguments as fp64
    wrap_triton(swiglu_backward_kernel)[grid](
        fused, grad, out, out_t, scale if cast else out, amaxes, rows, width, fused.stride(0), grad.stride(0),
        LIMIT=fp8_max(dtype) if cast else 0.0, BLOCK_ROWS=block_rows, BLOCK_COLS=block_cols, CAST=cast,
        TRANSPOSED=transposed, num_warps=tiling.warps)
    if transposed:
        return out, out_t, amaxes.amax()
    return (out, amaxes.amax()) if cast else out
