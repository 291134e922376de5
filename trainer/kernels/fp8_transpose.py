"""The transposed FP8 copies of the weight-gradient GEMM as their own tiled kernel (``--fp8-transpose kernel``).

``dW = dyᵀ · x`` contracts over the tokens, and Hopper's FP8 GEMMs need the contracted dimension contiguous in
both operands, so every FP8 linear's backward needs ``x`` and ``dy`` transposed (TN layout). Compiled, Inductor
writes those copies inside the kernel that produces the tensor. When that kernel is a row reduction (RMSNorm
forward or backward, RoPE's backward with the QKV concatenation), its transposed 1-byte stores go across rows:
on the H200 such a kernel moved ~0.85 TB/s (residual add, RMSNorm, cast, amax and transpose: 317 µs per layer
of the 1.3b preset for 33.5M elements; bench/train_h200.md, eighth run). Made by a custom op instead, the
producer writes only the row-major copy and a tiled transpose (a tile loaded along rows, stored along the
columns of the output) moves 2 bytes an element.

Measured on an H200 (bench/train_h200.md, ninth run; the A/B is ``bench/train_h200.py``'s ``+transpose-fused`` run
suffix): 1.018× the fused copies' tokens/s with delayed scaling, the FP8 cast kernels 36.5 → 22.4 ms a step and
the transposes 6.7 ms. Peak memory rose 29.2 → 33.6 GiB: as an opaque custom op the partitioner could not
recompute it, so the input's transpose ran in the forward pass and its output was kept for the backward.

The op is a ``torch.library.triton_op``: compiled, AOTAutograd sees the kernel itself and Inductor launches it
from its own generated code. As a plain custom op each call cost ~145 µs of host time in the compiled forward
pass (the dispatcher, Python, Triton's launcher), four a block — enough to make the FP8 forward pass
host-bound on a slow host (bench/train_h200.md, ninth run); launched by Inductor, ~25 µs (tenth run).
NOTE: Inductor compiles the kernel for the alignment it can prove of its arguments: behind an opaque custom op
(the SwiGLU cast, once) the source was not known 16-byte aligned and the transpose ran at half speed — keep
the producers of its inputs visible to Inductor. Elsewhere than CUDA with Triton the op is a transposing copy
in tensor code.
"""

from __future__ import annotations

import functools

import torch
from torch.library import wrap_triton

from trainer.kernels.ops import kernel_op, launcher

#: Tile edge of the Triton transpose: 128 × 128 bytes, loaded and stored 16 bytes a thread at a time.
BLOCK = 128


@kernel_op("blendforge::fp8_transpose")
def fp8_transpose(matrix: torch.Tensor) -> torch.Tensor:
    """``matrix.t().contiguous()`` for a 2-D tensor of 1-byte elements (FP8), always a new tensor: on CUDA
    the tiled Triton kernel, elsewhere (or without Triton) a copy in tensor code."""
    return launcher(triton_transpose, _transpose_reference, matrix.device)(matrix)


def _transpose_reference(matrix: torch.Tensor) -> torch.Tensor:
    """:func:`fp8_transpose` in tensor code."""
    return matrix.t().clone(memory_format=torch.contiguous_format)


@functools.cache
def triton_transpose():
    """The Triton launcher ``matrix -> matrix.t().contiguous()`` for 1-byte elements, or None where Triton
    is not importable. Built on first use, so ``TRITON_INTERPRET=1`` set before then runs it on the CPU."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def fp8_transpose_kernel(source_ptr, target_ptr, rows, cols, source_stride,
                             BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
        row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        col = tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
        row64, col64 = row.to(tl.int64), col.to(tl.int64)
        tile = tl.load(source_ptr + row64[:, None] * source_stride + col64[None, :],
                       mask=(row[:, None] < rows) & (col[None, :] < cols))
        # NOTE: the store's mask built in the target's own coordinates (not the load mask transposed), so the
        # compiler sees it constant along runs of the target row and stores 16 bytes a thread
        tl.store(target_ptr + col64[:, None] * rows + row64[None, :], tl.trans(tile),
                 mask=(col[:, None] < cols) & (row[None, :] < rows))

    def launch(matrix: torch.Tensor) -> torch.Tensor:
        if matrix.dim() != 2 or matrix.element_size() != 1:
            raise ValueError(f"fp8_transpose takes a 2-D tensor of 1-byte elements, got {matrix.dtype} "
                             f"{tuple(matrix.shape)}")
        if matrix.stride(-1) != 1:  # NOTE: rows may lie further apart (the stride is an argument), columns not
            matrix = matrix.contiguous()
        rows, cols = matrix.shape
        target = matrix.new_empty(cols, rows)
        grid = (triton.cdiv(rows, BLOCK), triton.cdiv(cols, BLOCK))
        # NOTE: viewed as uint8: the kernel copies bytes, whatever the FP8 format
        # NOTE: wrap_triton: traced by AOTAutograd (inside the op), Inductor launches the kernel itself
        wrap_triton(fp8_transpose_kernel)[grid](matrix.view(torch.uint8), target.view(torch.uint8), rows, cols,
                                                matrix.stride(0), BLOCK_ROWS=BLOCK, BLOCK_COLS=BLOCK, num_warps=8)
        return target

    return launch
