"""The Triton kernel of :func:`trainer.kernels.grad_norm.sum_of_squares_function`'s CUDA path: the sum of the
squares of every gradient in one launch. Each program reads a chunk of one tensor
(:func:`~trainer.kernels.triton_kernels.multi_tensor.program_table`) and writes its partial sum; one sum of the
partials follows (no atomics: the same norm every run).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from trainer.kernels.triton_kernels.multi_tensor import TRITON_DTYPES, aligned, at, program_table

#: Elements per loop iteration, iterations per program, warps per program (``bench/kernels/grad_norm.py`` times them).
BLOCK = 4096
BLOCKS_PER_PROGRAM = 8
NUM_WARPS = 8


@triton.jit
def sum_of_squares_kernel(table_ptr, programs_ptr, partials_ptr, DTYPE: tl.constexpr, ALIGNED: tl.constexpr,
                          BLOCK: tl.constexpr, BLOCKS_PER_PROGRAM: tl.constexpr):
    """``BLOCKS_PER_PROGRAM`` consecutive ``BLOCK``s of one tensor per program (``programs`` holds (tensor,
    chunk) pairs, the table (address, element count) per tensor); writes their sum of squares (fp32)."""
    tensor = tl.load(programs_ptr + 2 * tl.program_id(0)).to(tl.int64)
    chunk = tl.load(programs_ptr + 2 * tl.program_id(0) + 1).to(tl.int64)
    base = tl.load(table_ptr + 2 * tensor).to(tl.pointer_type(DTYPE))
    count = tl.load(table_ptr + 2 * tensor + 1)
    offsets = tl.arange(0, BLOCK)
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for index in range(BLOCKS_PER_PROGRAM):
        start = (chunk * BLOCKS_PER_PROGRAM + index) * BLOCK
        remaining = count - start
        if ALIGNED:  # a multiple of 16 elements: the mask is constant over each 16-byte vector
            remaining = tl.multiple_of(remaining, 16)
        values = tl.load(at(base, start, ALIGNED) + offsets, mask=offsets < remaining, other=0.0).to(tl.float32)
        total += values * values
    tl.store(partials_ptr + tl.program_id(0), tl.sum(total, axis=0))


def sum_of_squares(tensors: list[torch.Tensor], *, block: int = BLOCK, blocks_per_program: int = BLOCKS_PER_PROGRAM,
                   num_warps: int = NUM_WARPS) -> torch.Tensor:
    """Σ x² over every element of ``tensors`` (fp32 or bf16, on one device; at least one) as a 0-d fp32 tensor
    there, one launch
    per dtype and alignment; nothing is read back to the host. ``block``, ``blocks_per_program`` and ``num_warps``
    set the launch shape."""
    launches: dict[tuple, list[torch.Tensor]] = {}
    for tensor in tensors:
        flat = tensor.reshape(-1)  # NOTE: a copy only of a non-contiguous tensor
        launches.setdefault((flat.dtype, aligned((flat,))), []).append(flat)
    partials = []
    for (dtype, is_aligned), group in launches.items():
        device = group[0].device
        table = torch.tensor([[t.data_ptr(), t.numel()] for t in group], dtype=torch.int64)
        table = table.to(device, non_blocking=True)  # NOTE: from pageable memory: staged at once, waits for nothing
        programs = program_table(tuple(t.numel() for t in group), device, block * blocks_per_program)
        sums = torch.empty(programs.numel() // 2, dtype=torch.float32, device=device)
        sum_of_squares_kernel[(sums.numel(),)](table, programs, sums, DTYPE=TRITON_DTYPES[dtype], ALIGNED=is_aligned,
                                               BLOCK=block, BLOCKS_PER_PROGRAM=blocks_per_program, num_warps=num_warps)
        partials.append(sums)
    return torch.cat(partials).sum()
