"""Cross-entropy over vocabulary-parallel logits: each TP rank holds ``[tokens, vocab / TP]`` and the
full-vocabulary logits never exist on one rank (Megatron's ``vocab_parallel_cross_entropy``).

Three all-reduces of one number per token (the max, the target's logit, the sum of exponentials)
give every rank the exact per-token loss; the backward is local: ``softmax − one_hot(target)``
restricted to the rank's slice of the vocabulary.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from trainer.parallel.collectives import TensorParallel


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, tp: TensorParallel) -> torch.Tensor:
        local_vocab = logits.shape[-1]
        start = tp.rank * local_vocab
        largest = logits.max(dim=-1).values
        dist.all_reduce(largest, op=dist.ReduceOp.MAX, group=tp.group)
        shifted = logits - largest.unsqueeze(-1)
        outside = (target < start) | (target >= start + local_vocab)
        local_target = (target - start).masked_fill(outside, 0)
        target_logit = shifted.gather(-1, local_target.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        dist.all_reduce(target_logit, group=tp.group)
        exp = shifted.exp_()
        sum_exp = exp.sum(dim=-1)
        dist.all_reduce(sum_exp, group=tp.group)
        softmax = exp.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(softmax, local_target, outside)
        return sum_exp.log() - target_logit

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        softmax, local_target, outside = ctx.saved_tensors
        grad_logits = softmax  # NOTE: reused in place; the saved tensor is not needed again
        grad_logits.scatter_add_(-1, local_target.unsqueeze(-1), (outside.to(softmax.dtype) - 1.0).unsqueeze(-1))
        return grad_logits.mul_(grad.unsqueeze(-1)), None, None


def token_losses(logits: torch.Tensor, labels: torch.Tensor, tp: TensorParallel | None = None) -> torch.Tensor:
    """Per-token cross-entropy (fp32) of ``logits`` [..., vocab / TP] against ``labels`` [...]."""
    flat = logits.float().flatten(0, -2)
    if tp is None or tp.size == 1:
        losses = F.cross_entropy(flat, labels.flatten(), reduction="none")
    else:
        losses = _VocabParallelCrossEntropy.apply(flat, labels.flatten(), tp)
    return losses.view(labels.shape)
