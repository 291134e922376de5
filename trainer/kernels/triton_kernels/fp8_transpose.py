"""The Triton kernel of :func:`trainer.kernels.fp8_transpose.fp8_transpose`: a tile loaded along rows, stored
along the columns of the output, 16 bytes a thread each way."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.library import wrap_triton

#: Tile edge of the Triton transpose: 128 × 128 bytes, loaded and stored 16 bytes a thread at a time.
BLOCK = 128


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
    """``matrix.t().contiguous()`` for a 2-D tensor of 1-byte elements."""
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
