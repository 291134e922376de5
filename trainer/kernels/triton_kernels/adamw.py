"""The Triton kernel of :func:`trainer.kernels.adamw.update_slice` for every parameter in one launch: each weight,
gradient and moments read once and written once (the gradient only read), in whichever of fp32 and bf16 each is
held (an fp32 ``main_grad`` beside bf16 weights too), bf16 results stored with stochastic rounding from the same
32-bit hash as :func:`trainer.kernels.adamw.random_bits` (unsigned 32-bit arithmetic here).

One launch for all parameters (a table of their addresses, as apex's multi-tensor apply), not one per parameter:
per-parameter launches of a 1.3B model cost more Python time than the GPU work they queue, and ``torch.compile``
of the tensor code was slower still (Inductor computes the hash in int64, and every call pays Dynamo's guards;
bench/RESULTS.md). A skipped step (``found_inf`` set: a non-finite loss or gradient) writes nothing.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from trainer.kernels.adamw import Work
from trainer.kernels.triton_kernels.multi_tensor import TRITON_DTYPES, aligned, at, program_table

#: Elements per loop iteration, iterations per program, warps per program: ``bench/kernels/adamw_kernel.py`` sweeps
#: them on the GPU (an iteration's block sits in registers: larger ones lower the occupancy).
BLOCK = 2048
BLOCKS_PER_PROGRAM = 8
NUM_WARPS = 8


@triton.jit
def _hash32(x):
    """:func:`trainer.optim.adamw.random_bits`'s hash of uint32 positions."""
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 16)
    x = x * 0x5BD1E995
    return x ^ (x >> 15)


@triton.jit
def _store(pointer, offsets, mask, value, noise):
    """``value`` (fp32) stored as is, or rounded to bf16 up or down by ``noise`` (16 random bits); returns the
    value stored (fp32)."""
    if pointer.dtype.element_ty == tl.bfloat16:
        value = ((value.to(tl.uint32, bitcast=True) + noise) & 0xFFFF0000).to(tl.float32, bitcast=True)
    tl.store(pointer + offsets, value.to(pointer.dtype.element_ty), mask=mask)
    return value


@triton.jit
def adamw_update_kernel(table_ptr, chunks_ptr, hyper_ptr, grad_scale_ptr, found_inf_ptr,
                        HAS_GRAD_SCALE: tl.constexpr, HAS_FOUND_INF: tl.constexpr, HAS_AMAX: tl.constexpr,
                        PARAM_DTYPE: tl.constexpr,
                        GRAD_DTYPE: tl.constexpr, EXP_AVG_DTYPE: tl.constexpr, EXP_AVG_SQ_DTYPE: tl.constexpr,
                        ALIGNED: tl.constexpr, BLOCK: tl.constexpr, BLOCKS_PER_PROGRAM: tl.constexpr,
                        ROW: tl.constexpr):
    """``BLOCKS_PER_PROGRAM`` consecutive ``BLOCK``s of one tensor per program: ``chunks`` holds (tensor, chunk)
    pairs, the table one row per tensor (param, grad, exp_avg, exp_avg_sq addresses, element count, hash key,
    address of the fp32 amax to raise to the largest updated weight or 0), ``hyper`` 7 floats per tensor.

    NOTE: a program reads its table row and hyperparameters once, then loops: with one block per program those
    dependent reads come before every block's data, and the kernel falls below torch's fused AdamW's rate
    (bench/RESULTS.md)."""
    if HAS_FOUND_INF:
        if tl.load(found_inf_ptr) != 0:
            return
    tensor = tl.load(chunks_ptr + 2 * tl.program_id(0)).to(tl.int64)
    chunk = tl.load(chunks_ptr + 2 * tl.program_id(0) + 1).to(tl.int64)
    row = table_ptr + tensor * ROW
    count, key = tl.load(row + 4), tl.load(row + 5).to(tl.uint32)
    param_base = tl.load(row).to(tl.pointer_type(PARAM_DTYPE))
    grad_base = tl.load(row + 1).to(tl.pointer_type(GRAD_DTYPE))
    exp_avg_base = tl.load(row + 2).to(tl.pointer_type(EXP_AVG_DTYPE))
    exp_avg_sq_base = tl.load(row + 3).to(tl.pointer_type(EXP_AVG_SQ_DTYPE))
    hyper = hyper_ptr + tensor * 7
    lr, beta1, beta2, eps = tl.load(hyper), tl.load(hyper + 1), tl.load(hyper + 2), tl.load(hyper + 3)
    weight_decay, correction1, correction2_sqrt = tl.load(hyper + 4), tl.load(hyper + 5), tl.load(hyper + 6)
    grad_factor = tl.div_rn(1.0, tl.load(grad_scale_ptr)) if HAS_GRAD_SCALE else 1.0
    offsets = tl.arange(0, BLOCK)
    largest = 0.0  # NOTE: a scalar, each block's max folded in: a [BLOCK] vector needs more registers than the
    # update's 64 and slows it down
    for index in range(BLOCKS_PER_PROGRAM):
        start = (chunk * BLOCKS_PER_PROGRAM + index) * BLOCK
        param_ptr, grad_ptr = at(param_base, start, ALIGNED), at(grad_base, start, ALIGNED)
        exp_avg_ptr, exp_avg_sq_ptr = at(exp_avg_base, start, ALIGNED), at(exp_avg_sq_base, start, ALIGNED)
        remaining = count - start
        if ALIGNED:  # a multiple of 16 elements: the mask is constant over each 16-byte vector
            remaining = tl.multiple_of(remaining, 16)
        mask = offsets < remaining
        grad = tl.load(grad_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        if HAS_GRAD_SCALE:
            grad = grad * grad_factor
        first = tl.load(exp_avg_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        second = tl.load(exp_avg_sq_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        weight = tl.load(param_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        first = first + (1.0 - beta1) * (grad - first)  # torch's lerp for weights below 0.5
        second = second * beta2 + grad * grad * (1.0 - beta2)
        weight = weight * (1.0 - lr * weight_decay)
        denominator = tl.sqrt_rn(second) * tl.div_rn(1.0, correction2_sqrt) + eps
        weight = weight - tl.div_rn(first, denominator) * tl.div_rn(lr, correction1)
        position = ((start + offsets) * 2).to(tl.uint32) + key
        bits, more_bits = _hash32(position), _hash32(position + 1)
        weight = _store(param_ptr, offsets, mask, weight, bits & 0xFFFF)
        _store(exp_avg_ptr, offsets, mask, first, bits >> 16)
        _store(exp_avg_sq_ptr, offsets, mask, second, more_bits & 0xFFFF)
        if HAS_AMAX:
            largest = tl.maximum(largest, tl.max(tl.abs(weight)))  # NOTE: masked lanes hold 0
    if HAS_AMAX:
        amax_address = tl.load(row + 6)
        if amax_address != 0:  # NOTE: relaxed: nothing in the kernel reads it, and acq_rel, the default, fences
            # every program's stores first (a third slower)
            tl.atomic_max(amax_address.to(tl.pointer_type(tl.float32)), largest, sem="relaxed")


def _signature(work: Work) -> tuple:
    """What one launch needs alike: the dtypes, and whether it is :func:`~trainer.kernels.multi_tensor.aligned`."""
    tensors = (work.param, work.grad, work.exp_avg, work.exp_avg_sq)
    return (*(t.dtype for t in tensors), aligned(tensors))


#: Entries of a tensor's row of the launch table.
ROW = 7


def update(works: list[Work], grad_scale: torch.Tensor | None, found_inf: torch.Tensor | None, *,
           block: int = BLOCK, blocks_per_program: int = BLOCKS_PER_PROGRAM, num_warps: int = NUM_WARPS) -> None:
    """:func:`trainer.optim.adamw.update_slice` of every ``Work``, one launch per :func:`_signature` (gradients
    divided by ``grad_scale`` when given; nothing written when ``found_inf`` is nonzero); ``block``,
    ``blocks_per_program`` and ``num_warps`` set the launch shape (the defaults are the fastest measured)."""
    launches: dict[tuple, list[Work]] = {}
    for work in works:
        launches.setdefault(_signature(work), []).append(work)
    for (param_dtype, grad_dtype, exp_avg_dtype, exp_avg_sq_dtype, is_aligned), group in launches.items():
        device = group[0].param.device
        table = torch.tensor([[w.param.data_ptr(), w.grad.data_ptr(), w.exp_avg.data_ptr(), w.exp_avg_sq.data_ptr(),
                               w.param.numel(), w.key, 0 if w.amax is None else w.amax.data_ptr()] for w in group],
                             dtype=torch.int64)
        hyper = torch.tensor([w.hyper for w in group], dtype=torch.float32)
        # NOTE: non-blocking from pageable memory is staged at once and waits for no queued GPU work
        table, hyper = table.to(device, non_blocking=True), hyper.to(device, non_blocking=True)
        chunks = program_table(tuple(w.param.numel() for w in group), device, block * blocks_per_program)
        adamw_update_kernel[(chunks.numel() // 2,)](
            table, chunks, hyper, hyper if grad_scale is None else grad_scale,
            hyper if found_inf is None else found_inf, HAS_GRAD_SCALE=grad_scale is not None,
            HAS_FOUND_INF=found_inf is not None, HAS_AMAX=any(w.amax is not None for w in group),
            ROW=ROW, PARAM_DTYPE=TRITON_DTYPES[param_dtype],
            GRAD_DTYPE=TRITON_DTYPES[grad_dtype],
            EXP_AVG_DTYPE=TRITON_DTYPES[exp_avg_dtype], EXP_AVG_SQ_DTYPE=TRITON_DTYPES[exp_avg_sq_dtype],
            ALIGNED=is_aligned, BLOCK=block, BLOCKS_PER_PROGRAM=blocks_per_program, num_warps=num_warps)
