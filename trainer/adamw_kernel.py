"""One Triton kernel launch per optimizer step for :class:`trainer.adamw.LowPrecisionAdamW` on CUDA.

Every parameter's weight, gradient and moments are read once and written once, in whichever of fp32 and
bf16 they are held, the bf16 results stored with stochastic rounding from the same 32-bit hash as
:func:`trainer.adamw.random_bits` (unsigned 32-bit arithmetic here, int64 masked to 32 bits there: the
same bits, so the kernel and the tensor-code update agree but where a compiler's fused multiply-add moves
an fp32 result by an ulp; a test holds them to that).

One launch for all parameters (a table of their addresses, as apex's multi-tensor apply), not one per
parameter: on an H200 the per-parameter launches of a 1.3B model cost ~79 µs of Python each, 11.6 ms a
step against 8 ms of GPU work, and the GPU waited; ``torch.compile`` of the tensor code was slower still
(Inductor computes the hash in int64, and every call pays Dynamo's guards): bench/train_h200.md, sixth run.
A skipped step (``found_inf`` set: a non-finite loss or gradient) writes nothing.

Imported only where the fused update is asked for (CUDA): CPU builds of torch come without Triton.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from trainer.adamw import Work

#: Elements per program (memory-bound: large enough to keep loads wide, small enough for many programs).
BLOCK = 2048

#: Byte alignment every address of an aligned launch has (lets Triton load 16 bytes at a time).
ALIGNMENT = 16


@triton.jit
def _hash32(x):
    """:func:`trainer.adamw.random_bits`'s hash of uint32 positions."""
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 16)
    x = x * 0x5BD1E995
    return x ^ (x >> 15)


@triton.jit
def _pointer(row, column, DTYPE: tl.constexpr, ALIGNED: tl.constexpr):
    """The ``column`` address of a table row as a pointer to ``DTYPE``."""
    address = tl.load(row + column)
    if ALIGNED:
        address = tl.multiple_of(address, 16)
    return address.to(tl.pointer_type(DTYPE))


@triton.jit
def _store(pointer, offsets, mask, value, noise):
    """``value`` (fp32) stored as is, or rounded to bf16 up or down by ``noise`` (16 random bits)."""
    if pointer.dtype.element_ty == tl.bfloat16:
        value = ((value.to(tl.uint32, bitcast=True) + noise) & 0xFFFF0000).to(tl.float32, bitcast=True)
    tl.store(pointer + offsets, value.to(pointer.dtype.element_ty), mask=mask)


@triton.jit
def adamw_update_kernel(table_ptr, blocks_ptr, hyper_ptr, grad_scale_ptr, found_inf_ptr,
                        HAS_GRAD_SCALE: tl.constexpr, HAS_FOUND_INF: tl.constexpr, PARAM_DTYPE: tl.constexpr,
                        EXP_AVG_DTYPE: tl.constexpr, EXP_AVG_SQ_DTYPE: tl.constexpr, ALIGNED: tl.constexpr,
                        BLOCK: tl.constexpr):
    """One ``BLOCK`` of one tensor per program: ``blocks`` holds (tensor, block) pairs, the table one row per
    tensor (param, grad, exp_avg, exp_avg_sq addresses, element count, hash key), ``hyper`` 7 floats per
    tensor."""
    if HAS_FOUND_INF:
        if tl.load(found_inf_ptr) != 0:
            return
    tensor = tl.load(blocks_ptr + 2 * tl.program_id(0)).to(tl.int64)
    block = tl.load(blocks_ptr + 2 * tl.program_id(0) + 1).to(tl.int64)
    row = table_ptr + tensor * 6
    param_ptr = _pointer(row, 0, PARAM_DTYPE, ALIGNED)
    grad_ptr = _pointer(row, 1, PARAM_DTYPE, ALIGNED)
    exp_avg_ptr = _pointer(row, 2, EXP_AVG_DTYPE, ALIGNED)
    exp_avg_sq_ptr = _pointer(row, 3, EXP_AVG_SQ_DTYPE, ALIGNED)
    offsets = block * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < tl.load(row + 4)
    hyper = hyper_ptr + tensor * 7
    lr, beta1, beta2, eps = tl.load(hyper), tl.load(hyper + 1), tl.load(hyper + 2), tl.load(hyper + 3)
    weight_decay, correction1, correction2_sqrt = tl.load(hyper + 4), tl.load(hyper + 5), tl.load(hyper + 6)
    grad = tl.load(grad_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    if HAS_GRAD_SCALE:
        grad = grad * tl.div_rn(1.0, tl.load(grad_scale_ptr))
    first = tl.load(exp_avg_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    second = tl.load(exp_avg_sq_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    weight = tl.load(param_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    first = first + (1.0 - beta1) * (grad - first)  # torch's lerp for weights below 0.5
    second = second * beta2 + grad * grad * (1.0 - beta2)
    weight = weight * (1.0 - lr * weight_decay)
    denominator = tl.sqrt_rn(second) * tl.div_rn(1.0, correction2_sqrt) + eps
    weight = weight - tl.div_rn(first, denominator) * tl.div_rn(lr, correction1)
    position = (offsets * 2).to(tl.uint32) + tl.load(row + 5).to(tl.uint32)
    bits, more_bits = _hash32(position), _hash32(position + 1)
    _store(param_ptr, offsets, mask, weight, bits & 0xFFFF)
    _store(exp_avg_ptr, offsets, mask, first, bits >> 16)
    _store(exp_avg_sq_ptr, offsets, mask, second, more_bits & 0xFFFF)


def _signature(work: Work) -> tuple:
    """What one launch needs alike: the dtypes, and whether every address is 16-byte aligned."""
    tensors = (work.param, work.grad, work.exp_avg, work.exp_avg_sq)
    aligned = all(t.data_ptr() % ALIGNMENT == 0 for t in tensors)
    return work.param.dtype, work.exp_avg.dtype, work.exp_avg_sq.dtype, aligned


_TRITON_DTYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16}

#: Block tables by (device, element counts): the parameters' sizes do not change between steps.
_BLOCKS: dict[tuple, torch.Tensor] = {}


def _blocks(numels: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """``[tensor index, block index]`` of every program (int32, flattened), built once per set of sizes."""
    if (device, numels) not in _BLOCKS:
        counts = torch.tensor([triton.cdiv(n, BLOCK) for n in numels], device=device)
        tensor = torch.repeat_interleave(torch.arange(len(numels), device=device), counts)
        first_block = torch.cumsum(counts, 0) - counts
        block = torch.arange(tensor.numel(), device=device) - first_block[tensor]
        _BLOCKS[(device, numels)] = torch.stack([tensor, block], dim=1).to(torch.int32).reshape(-1)
    return _BLOCKS[(device, numels)]


def update(works: list[Work], grad_scale: torch.Tensor | None, found_inf: torch.Tensor | None) -> None:
    """:func:`trainer.adamw.update_slice` of every ``Work``, one launch per :func:`_signature` (gradients
    divided by ``grad_scale`` when given; nothing written when ``found_inf`` is nonzero)."""
    launches: dict[tuple, list[Work]] = {}
    for work in works:
        if work.grad.dtype != work.param.dtype:
            raise ValueError(f"gradient dtype {work.grad.dtype} differs from its parameter's ({work.param.dtype})")
        launches.setdefault(_signature(work), []).append(work)
    for (param_dtype, exp_avg_dtype, exp_avg_sq_dtype, aligned), group in launches.items():
        device = group[0].param.device
        table = torch.tensor([[w.param.data_ptr(), w.grad.data_ptr(), w.exp_avg.data_ptr(), w.exp_avg_sq.data_ptr(),
                               w.param.numel(), w.key] for w in group], dtype=torch.int64)
        hyper = torch.tensor([w.hyper for w in group], dtype=torch.float32)
        # NOTE: non-blocking from pageable memory is staged at once and waits for no queued GPU work
        table, hyper = table.to(device, non_blocking=True), hyper.to(device, non_blocking=True)
        blocks = _blocks(tuple(w.param.numel() for w in group), device)
        adamw_update_kernel[(blocks.numel() // 2,)](
            table, blocks, hyper, hyper if grad_scale is None else grad_scale,
            hyper if found_inf is None else found_inf, HAS_GRAD_SCALE=grad_scale is not None,
            HAS_FOUND_INF=found_inf is not None, PARAM_DTYPE=_TRITON_DTYPES[param_dtype],
            EXP_AVG_DTYPE=_TRITON_DTYPES[exp_avg_dtype], EXP_AVG_SQ_DTYPE=_TRITON_DTYPES[exp_avg_sq_dtype],
            ALIGNED=aligned, BLOCK=BLOCK, num_warps=8)
