"""One training step's passes over this rank's model chunks, whatever the layout: the micro-batches
go through the 1F1B pipeline schedule (PP > 1) or one after another, the gradients are reduced over the
data-parallel group, and the loss, token count and gradient norm are reduced so that every rank
reports the numbers of the whole global batch.

The loss of a micro-batch is its token loss sum divided by the unmasked tokens of the *global* batch
(counted over the DP group), so the summed gradients equal those of one big batch; the loss lives on
the last pipeline stage and is summed over the DP group and sent to every rank in one all-reduce.

With ``num_sources`` (per-source telemetry) each of those numbers becomes a vector, the whole batch's
first, then each source's part: the token counts are summed on the host and reduced in the same all-reduce
as the total, the loss sums ride in the last stage's output and the same all-reduce as the loss. No
collective and no wait for the device are added.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from trainer.config.schema import ParallelConfig
from trainer.fp8 import FP8Engine
from trainer.model.gpt import GPT, source_sums
from trainer.model.layers import ShardedWeight
from trainer.parallel.state import ParallelState
from trainer.parallelize.data_parallel import GradReducer
from trainer.parallelize.pipeline import ChunkModule, MicroBatches, build_schedule
from trainer.runtime.device import Precision


def _parameters(chunks: list[GPT], parallel: ParallelState) -> list[tuple[torch.nn.Parameter, bool]]:
    """Every parameter of the chunks in forward order, with whether it is replicated over the TP group."""
    return [(param, parallel.tp_size > 1 and not isinstance(module, ShardedWeight))
            for chunk in chunks for module in chunk.modules() for param in module.parameters(recurse=False)]


class StepEngine:
    """Forward/backward passes, gradient reduction and the cross-rank sums of a step."""

    def __init__(self, chunks: list[GPT], stage_indices: list[int], parallel: ParallelState, precision: Precision,
                 fp8: FP8Engine, config: ParallelConfig, micro_batches: int, micro_batch_size: int,
                 num_sources: int = 0) -> None:
        self.chunks, self.parallel, self.fp8, self.num_sources = chunks, parallel, fp8, num_sources
        self.feed = MicroBatches()
        self.modules = [ChunkModule(chunk, self.feed, precision, fp8, num_sources) for chunk in chunks]
        self.reducer = GradReducer(_parameters(chunks, parallel), parallel, config, micro_batches)
        self.reducer.install_forward_waits([module for chunk in chunks for module in chunk.modules()])
        self.schedule = None
        if parallel.pp_size > 1:
            self.schedule = build_schedule(self.modules, stage_indices, parallel, micro_batches, micro_batch_size,
                                           self._loss)

    def _loss(self, sums: torch.Tensor, micro: torch.Tensor | int) -> torch.Tensor:
        """The last stage's loss sums [1 + sources] of micro-batch ``micro`` (recorded); the first, the loss sum,
        divided by the global batch's tokens."""
        self.feed.loss_sums.append(sums.detach())
        return sums[0] / self.feed.tokens

    def _run(self, batches: list[dict[str, torch.Tensor]], tokens: float, backward: bool) -> None:
        self.feed.set(batches, self.parallel.device, tokens)
        if self.schedule is not None:
            micro = torch.arange(len(batches))
            run = self.schedule.step if backward else self.schedule.eval
            run(micro, micro=micro, target=micro)
            return
        for micro in range(len(batches)):
            loss = self._loss(self.modules[0](None, micro), micro)
            if backward:
                loss.backward()

    def _summed(self, value: torch.Tensor, dimension: str | None = None) -> torch.Tensor:
        """``value`` summed over the ranks of ``dimension`` (``dp``…; None: the whole world), where it is when
        it stays on this rank (on the device otherwise)."""
        if (self.parallel.world_size if dimension is None else getattr(self.parallel, f"{dimension}_size")) > 1:
            value = value.to(self.parallel.device)
            dist.all_reduce(value, group=None if dimension is None else self.parallel.group(dimension))
        return value

    def _global_loss_sums(self) -> torch.Tensor:
        """Sum of the token losses of the global batch, then of each source's ([1 + sources], on the device);
        last stage, TP rank 0 of each DP replica contribute."""
        local = torch.zeros(1 + self.num_sources, dtype=torch.float32, device=self.parallel.device)
        if self.feed.loss_sums and self.parallel.tp_rank == 0:
            local = torch.stack(self.feed.loss_sums).sum(0)
        return self._summed(local)

    def token_counts(self, batches: list[dict[str, torch.Tensor]]) -> list[float]:
        """Unmasked tokens of the global batch, then of each source in it (this rank's micro-batches summed over
        the DP group, in one all-reduce)."""
        def counts(batch: dict[str, torch.Tensor]) -> torch.Tensor:
            mask = batch["loss_mask"].double()
            if not self.num_sources:
                return mask.sum().reshape(1)
            return torch.cat([mask.sum().reshape(1), source_sums(mask, batch["source_ids"], self.num_sources)])

        local = sum(counts(batch) for batch in batches)
        return self._summed(local, "dp").tolist()  # NOTE: host tensors on one rank: no wait for the GPU

    def global_tokens(self, batches: list[dict[str, torch.Tensor]]) -> float:
        """Unmasked tokens of the global batch (this rank's micro-batches summed over the DP group), at least 1."""
        return max(1.0, self.token_counts(batches)[0])

    def forward_backward(self, batches: list[dict[str, torch.Tensor]], tokens: float) -> torch.Tensor:
        """Gradients of the step's ``batches`` (loss divided by ``tokens``), reduced over DP; returns the
        global batch's loss sum, then each source's ([1 + sources], on the device: reading it would wait for the
        backward pass)."""
        self.reducer.start_step()
        with self.fp8.parts.step_context(self.chunks):
            self._run(batches, tokens, backward=True)
        self.fp8.parts.after_backward(self.chunks)
        self.reducer.finish()
        return self._global_loss_sums()

    @torch.no_grad()
    def evaluate(self, batches: list[dict[str, torch.Tensor]]) -> float:
        """Loss sum of ``batches`` (one global batch) over every rank, forward passes only."""
        self._run(batches, 1.0, backward=False)
        return float(self._global_loss_sums()[0])

    def world_max(self, value: float) -> float:
        """The largest ``value`` over every rank (one process: ``value`` itself, with no wait for the GPU)."""
        if self.parallel.world_size == 1:
            return float(value)
        tensor = torch.tensor(float(value), dtype=torch.float64, device=self.parallel.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return float(tensor)

    def any_rank(self, flag: bool) -> bool:
        """Whether ``flag`` is set on any rank (so that every rank stops at the same step)."""
        return self.world_max(float(flag)) > 0
