"""What the one-launch Triton kernels over many tensors share (:mod:`trainer.kernels.adamw`'s update,
:mod:`trainer.kernels.grad_norm`'s sum of squares): the program table that gives every program one chunk of one
tensor, the 16-byte alignment test and hint, and torch's dtypes as Triton's.

Imported only where such a kernel runs (CUDA, or Triton's interpreter in the tests): CPU builds of torch come
without Triton.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

#: Byte alignment every address of an aligned launch has (lets Triton load 16 bytes at a time).
ALIGNMENT = 16

TRITON_DTYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16}

#: Program tables by (device, element counts, chunk size): the parameters' sizes do not change between steps.
_PROGRAMS: dict[tuple, torch.Tensor] = {}


def aligned(tensors: tuple[torch.Tensor, ...]) -> bool:
    """Whether every address is 16-byte aligned and the element count (of the first) a multiple of 16: then a
    launch's loads and stores move 16 bytes at a time."""
    return all(t.data_ptr() % ALIGNMENT == 0 for t in tensors) and tensors[0].numel() % ALIGNMENT == 0


def program_table(numels: tuple[int, ...], device: torch.device, size: int) -> torch.Tensor:
    """``[tensor index, chunk index]`` of every program (int32, flattened; chunks of ``size`` elements), built once
    per set of sizes."""
    if (device, numels, size) not in _PROGRAMS:
        counts = torch.tensor([triton.cdiv(n, size) for n in numels], device=device)
        tensor = torch.repeat_interleave(torch.arange(len(numels), device=device), counts)
        first_chunk = torch.cumsum(counts, 0) - counts
        index = torch.arange(tensor.numel(), device=device) - first_chunk[tensor]
        _PROGRAMS[(device, numels, size)] = torch.stack([tensor, index], dim=1).to(torch.int32).reshape(-1)
    return _PROGRAMS[(device, numels, size)]


@triton.jit
def at(base, start, ALIGNED: tl.constexpr):
    """``base + start`` with the 16-byte alignment hint of an aligned launch.

    NOTE: the hint goes on the pointer itself, after the offset: hinted on the integer address, or with the
    offset added per lane, Triton 3.5 loses it and loads 2 bytes at a time (SASS: ``LDG.E.U16``)."""
    pointer = base + start
    if ALIGNED:
        pointer = tl.multiple_of(pointer, 16)
    return pointer
