"""SwiGLU's activation ``silu(gate) * up`` on the fused ``[gate; up]`` GEMM output, with a one-pass backward.

The forward is plain tensor code (Inductor fuses it into one pass at memory bandwidth). The backward is
a Triton op (``torch.library.triton_op``: compiled, Inductor launches the kernel itself): compiled from the
autograd formula instead, Inductor lowers the ``[dgate; dup]`` gradient as a
pointwise ``cat`` whose two halves each reload the inputs (7 tensor-sized transfers where 5 do, at ~70%
of the bandwidth: 10.5 ms of a 283 ms step of the 1.3b preset on an H200). On CUDA with Triton the op is
one kernel that reads ``gate``, ``up`` and the output gradient once and writes both halves: 5.4 ms per
step there (bench/train_h200.md, fifth run). Elsewhere it is the same formula in tensor code.

With FP8 delayed scaling the gradient's only readers are the FP8 GEMMs of the ``[gate; up]`` linear, so the
same kernel can write it already scaled and cast, with its amax (``trainer.fp8.delayed.swiglu_backward_cast``):
the bf16 gradient is never stored, nor read again by a cast kernel (that cast took 228 µs per layer of the
1.3b preset on an H200, bench/train_h200.md, ninth run).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.library import wrap_triton

from trainer.kernels.ops import kernel_op, launcher


@dataclass(frozen=True)
class Tiling:
    """The backward kernel's launch shape: ``elements`` per program (up to ``columns`` columns of as many rows
    as fill it), ``warps`` warps. ``bench/fp8_kernels.py`` sweeps it on the GPU."""

    elements: int = 2048
    warps: int = 8
    columns: int = 1024


#: The launch shapes used, of the plain kernel and of the one casting to FP8 with the amax: on an H200
#: ``bench/fp8_kernels.py`` timed the cast 194 µs a layer of the 1.3b preset with 4096 elements a program against
#: 212 with 2048 (the plain kernel is at the copy's bandwidth with 2048); the FP8 speed run trains with them
#: (bench/train_h200.md, twelfth run). ``transposed``: the cast that also writes the transposed copy, in square
#: tiles (each of its columns is a row there: 64 of them make a 64-byte run of FP8 bytes): 274 µs a layer, the
#: fastest of 18 shapes swept, against 290 for the cast then the tiled transposing kernel.
TILING = {"plain": Tiling(), "cast": Tiling(elements=4096), "transposed": Tiling(elements=4096, columns=64)}


def swiglu(fused: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` for ``fused = [gate | up]`` along the last dimension (halves of equal width)."""
    return _SwiGLU.apply(fused)


def swiglu_values(fused: torch.Tensor) -> torch.Tensor:
    """The forward formula alone (for autograd functions that own the backward)."""
    gate, up = fused.chunk(2, dim=-1)
    return F.silu(gate) * up


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fused: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(fused)
        return swiglu_values(fused)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (fused,) = ctx.saved_tensors
        width = fused.shape[-1]
        rows = fused.reshape(-1, width)
        return swiglu_backward(rows, grad.reshape(-1, width // 2)).view(fused.shape)


@kernel_op("blendforge::swiglu_backward")
def swiglu_backward(fused: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """``[dgate | dup]`` [rows, 2F] of ``silu(gate) * up`` from ``fused = [gate | up]`` [rows, 2F] and the
    output gradient [rows, F], computed in fp32 and returned in ``fused``'s dtype: on CUDA the Triton kernel,
    elsewhere (or without Triton) :func:`reference_backward`."""
    return launcher(triton_backward, reference_backward, fused.device)(fused, grad)


def reference_backward(fused: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """The backward in tensor code: ``dgate = g·up·σ(1 + gate(1 − σ))``, ``dup = g·silu(gate)`` with
    ``σ = sigmoid(gate)`` and ``g`` the output gradient."""
    compute = torch.promote_types(fused.dtype, torch.float32)
    gate, up = fused.to(compute).chunk(2, dim=-1)
    grad = grad.to(compute)
    sigmoid = torch.sigmoid(gate)
    dgate = grad * up * sigmoid * (1 + gate * (1 - sigmoid))
    return torch.cat([dgate, grad * gate * sigmoid], dim=-1).to(fused.dtype)


@functools.cache
def triton_backward():
    """The Triton launcher ``(fused, grad) -> [dgate | dup]``, and with ``scale, dtype`` that gradient rounded
    to ``fused``'s dtype, times ``scale``, saturated into ``dtype`` (delayed scaling's cast), with its amax;
    with ``transposed`` too, the cast gradient, its transpose [2F, rows] row-major (the weight gradient GEMM's
    operand) and the amax; or None where Triton is not importable.

    Built on first use, so ``TRITON_INTERPRET=1`` set before then runs it on the CPU (the tests do)."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

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
            LIMIT=torch.finfo(dtype).max if cast else 0.0, BLOCK_ROWS=block_rows, BLOCK_COLS=block_cols, CAST=cast,
            TRANSPOSED=transposed, num_warps=tiling.warps)
        if transposed:
            return out, out_t, amaxes.amax()
        return (out, amaxes.amax()) if cast else out

    return launch
