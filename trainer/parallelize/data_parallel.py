"""Data parallelism: bucketed gradient reduction (overlapped with the backward pass when asked), the
ZeRO-1 distributed optimizer's partition, the global gradient norm (clipping itself happens inside the
optimizer step: ``trainer.optim.optimizer.clipped_step``).

With several DP replicas, gradients live in flat per-bucket buffers (each parameter's ``.grad`` is a
view into one), so a bucket is reduced by one collective with no copy, as DDP's
``gradient_as_bucket_view`` does. With one, nothing travels and the gradients stay the tensors autograd
makes: no zeroed buffer for every step's gradients to be added into (that zeroing and adding is a few percent
of a step; bench/RESULTS.md). Buckets follow the reverse parameter order, roughly the order the
backward pass produces gradients; with
``--overlap-grad-reduce`` a bucket is reduced as soon as its last gradient of the step has been
accumulated (a post-accumulate-grad hook counts ``params × micro-batches`` arrivals), else all after the
backward pass. Buckets are launched in index order so every rank issues the same collectives.

ZeRO-1 (``--use-distributed-optimizer``): every bucket has an owner among the DP ranks (greedy by size);
its gradients are *reduced to* the owner, only the owner keeps optimizer state for it and steps it, and
the updated weights are *broadcast* from the owner (after the step, or — ``--overlap-param-gather`` —
waited for by each module's forward pre-hook). The traffic equals one all-reduce, as with Megatron's
reduce-scatter + all-gather, and optimizer state stays whole per parameter, so checkpoints reshard
to any DP size.

``--accumulate-allreduce-grads-in-fp32`` with bf16 weights: the buckets are fp32 (also at one DP replica),
each parameter's ``main_grad`` (Megatron's name) is a view into one, and a post-accumulate-grad hook adds
every micro-batch's bf16 ``.grad`` into it and drops the ``.grad``: the sum over micro-batches and the DP
reduction round once, in fp32. The optimizer reads ``main_grad`` where a parameter has one
(:func:`trainer.optim.adamw.gradient_of`).

Parameters replicated over the TP group (the norm weights) sit in their own buckets: under sequence
parallelism each TP rank saw only its slice of the sequence, so their gradients are first summed over
the TP group; and the gradient norm counts them once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from trainer.config.schema import ParallelConfig
from trainer.kernels.grad_norm import sum_of_squares_function
from trainer.parallel.state import ParallelState

DEFAULT_BUCKET = 40_000_000  # parameters; Megatron's default (at least 1M × DP)


@dataclass
class Bucket:
    """Parameters whose gradients travel in one collective."""

    params: list[nn.Parameter]
    grad: torch.Tensor | None  # flat gradients, each param's .grad a view into it (None: one DP replica)
    views: list[torch.Tensor]  # those views, re-attached every step
    data: torch.Tensor | None  # flat weights (ZeRO-1 only, for the broadcast)
    tp_replicated: bool  # same weight on every TP rank (norms)
    owner: int = -1  # DP rank stepping these parameters (ZeRO-1), -1: every rank
    pending: int = 0  # gradient arrivals still expected this step
    launched: bool = False
    work: dist.Work | None = None
    gather: dist.Work | None = field(default=None, repr=False)


def _split(params: list[nn.Parameter], size: int) -> list[list[nn.Parameter]]:
    groups, current, count = [], [], 0
    for param in params:
        if current and count + param.numel() > size:
            groups.append(current)
            current, count = [], 0
        current.append(param)
        count += param.numel()
    return groups + [current] if current else groups


def _owners(sizes: list[int], dp_size: int) -> list[int]:
    """Greedy balance: biggest bucket first, to the least loaded DP rank (ties to the lower rank)."""
    load, owners = [0] * dp_size, [0] * len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        owners[index] = min(range(dp_size), key=lambda rank: (load[rank], rank))
        load[owners[index]] += sizes[index]
    return owners


class GradReducer:
    """Gradient buffers, their reduction over the DP group, the global norm, clipping and (ZeRO-1) the
    weight broadcast, for the parameters of this rank's model chunks."""

    def __init__(self, params: list[tuple[nn.Parameter, bool]], parallel: ParallelState, config: ParallelConfig,
                 micro_batches: int) -> None:
        """``params``: (parameter, replicated over the TP group) in forward order."""
        self.parallel, self.micro_batches = parallel, micro_batches
        low_precision = any(param.dtype != torch.float32 for param, _ in params)
        self.main_grads = config.accumulate_allreduce_grads_in_fp32 and low_precision
        self.flat = parallel.dp_size > 1 or self.main_grads
        self.zero = config.use_distributed_optimizer and self.flat
        self.overlap_grad = config.overlap_grad_reduce and parallel.dp_size > 1
        self.overlap_param = config.overlap_param_gather and self.zero
        self.dp_group = parallel.group("dp") if parallel.dp_size > 1 else None
        self.bucket_size = self._bucket_size(config, sum(p.numel() for p, _ in params))
        ordered = list(reversed(params))
        self.buckets = [self._bucket(group, replicated) for replicated in (False, True)
                        for group in _split([p for p, r in ordered if r == replicated], self.bucket_size)]
        if self.zero:
            sizes = [sum(p.numel() for p in bucket.params) for bucket in self.buckets]
            for bucket, owner in zip(self.buckets, _owners(sizes, parallel.dp_size)):
                bucket.owner = owner
        self._bucket_of = {id(p): bucket for bucket in self.buckets for p in bucket.params}
        self._sum_of_squares = sum_of_squares_function(parallel.device)
        self._next = 0
        if self.overlap_grad or self.main_grads:
            for param, _ in params:
                param.register_post_accumulate_grad_hook(self._accumulated)
        self.start_step()

    def _bucket_size(self, config: ParallelConfig, total: int) -> int:
        if config.ddp_bucket_size:
            return config.ddp_bucket_size
        size = max(DEFAULT_BUCKET, 1_000_000 * self.parallel.dp_size) if self.overlap_grad else total
        # NOTE: ZeRO-1 owns whole buckets; several per DP rank keep the optimizer state balanced.
        return min(size, math.ceil(total / (4 * self.parallel.dp_size))) if self.zero else size

    def _bucket(self, params: list[nn.Parameter], tp_replicated: bool) -> Bucket:
        if not self.flat:
            return Bucket(params, None, [], None, tp_replicated)
        numel, reference = sum(p.numel() for p in params), params[0]
        grad = torch.zeros(numel, dtype=torch.float32 if self.main_grads else reference.dtype, device=reference.device)
        data = torch.empty(numel, dtype=reference.dtype, device=reference.device) if self.zero else None
        offset, views = 0, []
        for param in params:
            size = param.numel()
            if data is not None:
                data[offset:offset + size].copy_(param.detach().flatten())
                param.data = data[offset:offset + size].view_as(param)
            views.append(grad[offset:offset + size].view_as(param))
            offset += size
        return Bucket(params, grad, views, data, tp_replicated)

    def owned(self, bucket: Bucket) -> bool:
        """Whether this rank steps ``bucket``'s parameters."""
        return bucket.owner in (-1, self.parallel.dp_rank)

    def optimizer_parameters(self) -> list[nn.Parameter]:
        """The parameters this rank's optimizer updates (all of them without ZeRO-1)."""
        return [p for bucket in self.buckets if self.owned(bucket) for p in bucket.params]

    def start_step(self) -> None:
        """Zero the gradients (drop them, with one DP replica) and re-arm the arrival counts for a step of
        ``micro_batches`` micro-batches."""
        for bucket in self.buckets:
            if bucket.grad is None:
                for param in bucket.params:
                    param.grad = None
            else:
                bucket.grad.zero_()
                for param, view in zip(bucket.params, bucket.views):
                    if self.main_grads:
                        param.main_grad, param.grad = view, None
                    else:
                        param.grad = view  # NOTE: robust to a zero_grad(set_to_none=True) elsewhere
            bucket.pending = len(bucket.params) * self.micro_batches
            bucket.launched, bucket.work = False, None
        self._next = 0

    def _accumulated(self, param: nn.Parameter) -> None:
        """A micro-batch's gradient of ``param`` is in: add it to the fp32 ``main_grad`` (and drop it) under
        ``--accumulate-allreduce-grads-in-fp32``; count its arrival under ``--overlap-grad-reduce``."""
        if self.main_grads:
            param.main_grad.add_(param.grad)
            param.grad = None
        if self.overlap_grad:
            self._arrived(param)

    def _arrived(self, param: nn.Parameter) -> None:
        bucket = self._bucket_of[id(param)]
        bucket.pending -= 1
        # NOTE: TP-replicated buckets wait for finish(): under sequence parallelism they need a TP sum first.
        while self._next < len(self.buckets) and self.buckets[self._next].pending == 0 \
                and not self.buckets[self._next].tp_replicated:
            self._launch(self.buckets[self._next])
            self._next += 1

    def _grads(self, bucket: Bucket) -> list[torch.Tensor]:
        """The gradient tensors of ``bucket``: its flat buffer, or each parameter's own."""
        return [bucket.grad] if bucket.grad is not None else [p.grad for p in bucket.params if p.grad is not None]

    def _launch(self, bucket: Bucket) -> None:
        if bucket.tp_replicated and self.parallel.sequence_parallel:
            for grad in self._grads(bucket):
                dist.all_reduce(grad, group=self.parallel.group("tp"))
        if self.dp_group is not None:
            if self.zero:
                bucket.work = dist.reduce(bucket.grad, dst=self.parallel.dp_global_rank(bucket.owner),
                                          group=self.dp_group, async_op=True)
            else:
                bucket.work = dist.all_reduce(bucket.grad, group=self.dp_group, async_op=True)
        bucket.launched = True

    def finish(self) -> None:
        """Complete the gradient reduction of the step (launch what the backward pass did not, wait all)."""
        for bucket in self.buckets:
            if not bucket.launched:
                self._launch(bucket)
        for bucket in self.buckets:
            if bucket.work is not None:
                bucket.work.wait()
                bucket.work = None

    def _counted(self, bucket: Bucket) -> bool:
        """Whether this rank's copy of ``bucket`` enters the global norm: one copy per TP/DP replica."""
        holder = self.owned(bucket) if self.zero else self.parallel.dp_rank == 0
        return holder and (not bucket.tp_replicated or self.parallel.tp_rank == 0)

    def global_norm(self) -> torch.Tensor:
        """The global gradient norm over TP × PP × DP, each gradient counted once, as a 0-d fp32 tensor on
        the device (read without waiting: clipping happens inside the optimizer step,
        :func:`trainer.optim.optimizer.clipped_step`)."""
        counted = [grad for bucket in self.buckets if self._counted(bucket) for grad in self._grads(bucket)]
        square = self._sum_of_squares(counted) if counted else torch.zeros((), device=self.parallel.device)
        if self.parallel.world_size > 1:
            dist.all_reduce(square)
        return square.sqrt()

    def gather_weights(self) -> None:
        """ZeRO-1: broadcast every bucket's updated weights from its owner (asynchronously under
        ``--overlap-param-gather``; :meth:`wait_weights` or the forward pre-hooks complete it)."""
        if not self.zero:
            return
        for bucket in self.buckets:
            bucket.gather = dist.broadcast(bucket.data, src=self.parallel.dp_global_rank(bucket.owner),
                                           group=self.dp_group, async_op=True)
        if not self.overlap_param:
            self.wait_weights()

    def wait_weights(self, module: nn.Module | None = None) -> None:
        """Wait for the weight broadcasts of ``module``'s own parameters (all of them when None)."""
        buckets = self.buckets if module is None else [self._bucket_of[id(p)] for p in module.parameters(recurse=False)]
        for bucket in buckets:
            if bucket.gather is not None:
                bucket.gather.wait()
                bucket.gather = None

    def install_forward_waits(self, modules: list[nn.Module]) -> None:
        """``--overlap-param-gather``: each module waits for its own weights just before its forward."""
        if not self.overlap_param:
            return
        for module in modules:
            if any(True for _ in module.parameters(recurse=False)):
                module.register_forward_pre_hook(lambda m, args: self.wait_weights(m))
