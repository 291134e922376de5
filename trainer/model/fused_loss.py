"""Output layer and cross-entropy fused and chunked over tokens (``--cross-entropy-loss-fusion``).

The plain path materialises the logits [tokens, vocab] in bf16, an fp32 copy of them for the loss and
the gradient of that copy: ~12 bytes per logit, 6.4 GB at 16k tokens × 32k vocabulary and 25 GB at
Llama-3's 128k. Here the tokens go through in chunks: each chunk's logits are computed, turned into
its loss and, when a gradient is wanted, straight into the gradients of the hidden states and of the
output weight (``softmax − one-hot`` never outlives its chunk). The backward pass only scales what the
forward pass stored, in place. The GEMMs are the same three as the plain path's, so the speed is too.
Each token's masked loss is kept (4 bytes a token), so per-source sums need no second pass.

NOTE: a single tensor-parallel shard of the vocabulary is assumed (``tp_size == 1``); the
vocabulary-parallel loss needs the max and sum of every shard's logits first.
"""

from __future__ import annotations

from typing import Callable

import torch

#: ``(logits, labels, mask, want_grad) -> (masked token losses, d loss sum / d logits or None)`` of one chunk.
ChunkLoss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], tuple[torch.Tensor, "torch.Tensor | None"]]

#: Logits held at once per chunk (fp32): 2^27 elements = 512 MiB.
CHUNK_ELEMENTS = 2**27


def chunk_rows(vocab: int) -> int:
    """Tokens per chunk for a vocabulary: as many as fit :data:`CHUNK_ELEMENTS` logits, a multiple of 128."""
    return max(128, (CHUNK_ELEMENTS // vocab) // 128 * 128)


def chunk_loss_and_grad(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor,
                        want_grad: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Masked loss of each token of one chunk and, if wanted, d(their sum)/d(logits) in the logits' dtype.

    Written as whole-tensor expressions (no in-place steps) so that torch.compile turns it into one
    reduction (the log-sum-exp) and one pass that writes the gradient straight in the logits' dtype:
    the fp32 copies of the logits the eager ops make never reach memory."""
    logits32 = logits.float()
    lse = torch.logsumexp(logits32, dim=-1)
    target = logits32.gather(1, labels[:, None]).squeeze(1)
    loss = (lse - target) * mask
    if not want_grad:
        return loss, None
    is_label = torch.arange(logits.shape[1], device=logits.device)[None, :] == labels[:, None]
    grad = (torch.exp(logits32 - lse[:, None]) - is_label.float()) * mask[:, None]
    return loss, grad.to(logits.dtype)


def accumulate_product(total: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, first: bool = False) -> None:
    """``total += a @ b`` (``total = a @ b`` when ``first``: its old contents are ignored, so it needs no zeroing)
    as one GEMM that adds its fp32 accumulator into ``total`` (no product tensor, no add kernel) where it can: same
    dtypes, or on CUDA an fp32 ``total`` and bf16 ``a``, ``b``."""
    beta = 0 if first else 1  # NOTE: beta 0 never reads ``total``: garbage (even NaN) in it cannot propagate
    if total.dtype == a.dtype:
        total.addmm_(a, b, beta=beta)
    elif total.is_cuda and total.dtype == torch.float32:
        torch.addmm(total, a, b, beta=beta, out_dtype=torch.float32, out=total)
    elif first:
        total.copy_(a @ b)
    else:
        total += a @ b


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """sum over tokens of ``mask · CE(hidden @ weight.T, labels)`` with gradients computed in the forward, and
    (no gradient) each token's term of it."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor,
                compute_dtype: torch.dtype, chunk_loss: ChunkLoss) -> torch.Tensor:
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        want_grad = want_hidden or want_weight
        w = weight.to(compute_dtype)
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        grad_weight = torch.empty_like(weight) if want_weight else None  # NOTE: the first chunk overwrites it
        losses = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        rows = chunk_rows(weight.shape[0])
        for start in range(0, hidden.shape[0], rows):
            h = hidden[start:start + rows].to(compute_dtype)
            loss, grad = chunk_loss(h @ w.t(), labels[start:start + rows], mask[start:start + rows], want_grad)
            losses[start:start + rows] = loss
            if grad is not None:
                if want_hidden:
                    grad_hidden[start:start + rows] = grad @ w
                if want_weight:
                    accumulate_product(grad_weight, grad.t(), h, first=start == 0)
        # NOTE: on ctx, not save_for_backward: backward drops them, so the weight's gradient it scales in place
        # is taken as the parameter's .grad with no copy (no other reference is left)
        ctx.grads = [grad_hidden, grad_weight]
        ctx.mark_non_differentiable(losses)
        return losses.sum(), losses

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_total: torch.Tensor, _grad_losses: torch.Tensor | None):
        grads, ctx.grads = ctx.grads, None
        for grad in grads:
            if grad is not None:  # NOTE: a one-tensor foreach op reads the 0-d factor on the device and moves 16
                # bytes at a time, where ``grad * grad_total`` goes element by element
                torch._foreach_mul_([grad], grad_total.to(grad.dtype))
        return grads[0], grads[1], None, None, None, None


def fused_token_losses(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, loss_mask: torch.Tensor,
                       chunk_loss: ChunkLoss = chunk_loss_and_grad) -> tuple[torch.Tensor, torch.Tensor]:
    """What ``token_loss_sum(hidden @ weight.T, labels, loss_mask)`` returns (fp32, 0-d), without the logits, and
    each token's masked loss [B, S] (no gradient: what per-source sums read).

    ``hidden`` [B, S, d] (final-norm output), ``weight`` [vocab, d]; the logits are computed in the
    autocast dtype when autocast is on, else in ``hidden``'s dtype. ``chunk_loss`` is
    :func:`chunk_loss_and_grad` or its compiled form (:func:`compile_chunk_loss`)."""
    kind = hidden.device.type
    compute = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else hidden.dtype
    with torch.autocast(kind, enabled=False):  # NOTE: dtypes are explicit inside; autocast would re-cast them
        total, losses = _ChunkedLinearCrossEntropy.apply(hidden.flatten(0, 1), weight, labels.flatten(),
                                                         loss_mask.flatten().float(), compute, chunk_loss)
    return total, losses.view(labels.shape)



def compile_chunk_loss() -> ChunkLoss:
    """:func:`chunk_loss_and_grad` compiled (static shapes: a run's chunks have at most two, the full one
    and the last), what ``--compile`` uses beside the compiled blocks."""
    return torch.compile(chunk_loss_and_grad, dynamic=False)
