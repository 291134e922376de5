"""One chunk of the fused loss (:mod:`trainer.cross_entropy`) in one pass over its logits: a Triton program per
token loads the token's whole row of logits once, keeps it in registers, and writes the token's loss and the row's
gradient ``(softmax − one-hot) · mask`` over the logits in place.

Compiled by Inductor, the same formula (:func:`trainer.cross_entropy.chunk_loss_and_grad`) is a looped reduction
(the log-sum-exp: one read of the logits) and then a pointwise pass (a second read and the write): 3 logit-sized
transfers where this kernel needs 2. The row must fit in registers: vocabularies up to :data:`MAX_VOCAB`
(the 1.3b preset's 32,768 ids); larger ones (Llama-3's 128,256) keep the compiled formula.
``bench/loss_kernel.py`` times both on the GPU.

Imported only on CUDA (or under Triton's interpreter in the tests): CPU builds of torch come without Triton.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

#: The largest vocabulary whose row of fp32 logits a program holds in registers: 32,768 values take half of an
#: SM's 65,536 registers (the exponentials replace the logits), so one program runs per SM.
MAX_VOCAB = 32768

#: Warps per program (``bench/loss_kernel.py`` sweeps them): a row of 32,768 logits is 32 fp32 values a thread.
NUM_WARPS = 32


@triton.jit
def chunk_loss_kernel(logits_ptr, labels_ptr, mask_ptr, losses_ptr, vocab, row_stride, WANT_GRAD: tl.constexpr,
                      BLOCK: tl.constexpr):
    """Program ``r``: ``losses[r] = mask[r] · (logsumexp(row) − row[label])`` and, with ``WANT_GRAD``, the row
    overwritten with ``mask[r] · (softmax(row) − one_hot(label))`` in its own dtype (fp32 arithmetic)."""
    row = tl.program_id(0).to(tl.int64)
    columns = tl.arange(0, BLOCK)
    inside = columns < vocab
    pointers = logits_ptr + row * row_stride + columns
    logits = tl.load(pointers, mask=inside, other=float("-inf")).to(tl.float32)
    label = tl.load(labels_ptr + row)
    weight = tl.load(mask_ptr + row)
    is_label = columns == label
    target = tl.sum(tl.where(is_label, logits, 0.0), axis=0)
    largest = tl.max(logits, axis=0)
    exponentials = tl.exp(logits - largest)
    total = tl.sum(exponentials, axis=0)
    tl.store(losses_ptr + row, (largest + tl.log(total) - target) * weight)
    if WANT_GRAD:
        grad = exponentials * (weight / total) - tl.where(is_label, weight, 0.0)
        tl.store(pointers, grad.to(logits_ptr.dtype.element_ty), mask=inside)


def one_pass_chunk_loss(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, want_grad: bool, *,
                        num_warps: int = NUM_WARPS) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:data:`trainer.cross_entropy.ChunkLoss` in one launch: the masked loss sum (fp32, 0-d, on the device) and,
    if wanted, d(loss)/d(logits), written over ``logits`` (their last use: the caller's chunk is done with them).
    ``logits`` [tokens, vocab ≤ :data:`MAX_VOCAB`] with contiguous rows, ``labels`` [tokens] int64, ``mask``
    [tokens] fp32; ``num_warps`` sets the launch. The per-token losses are summed by torch (no atomics: the same
    sum every run)."""
    tokens, vocab = logits.shape
    if vocab > MAX_VOCAB or logits.stride(1) != 1:
        raise ValueError(f"one_pass_chunk_loss takes rows of at most {MAX_VOCAB} contiguous logits, got shape "
                         f"{tuple(logits.shape)} with strides {logits.stride()}")
    losses = torch.empty(tokens, dtype=torch.float32, device=logits.device)
    chunk_loss_kernel[(tokens,)](logits, labels, mask, losses, vocab, logits.stride(0), WANT_GRAD=want_grad,
                                 BLOCK=triton.next_power_of_2(vocab), num_warps=num_warps)
    return losses.sum(), (logits if want_grad else None)
