"""Pipeline parallelism on ``torch.distributed.pipelining``: one ``PipelineStage`` per model chunk of
this rank, driven by ``Schedule1F1B`` (one chunk per rank) or ``ScheduleInterleaved1F1B`` (virtual
stages).

The schedules split a batch along its first dimension; the trainer's micro-batches come from the
loader already cut, and carry more than a tensor per sample (``cu_seqlens`` spans a whole micro-batch).
So the schedule is handed micro-batch *indices* (``arange(n)`` split into ``[i]``) as the first stage's
input, as a keyword every stage receives, and as the loss target; each stage looks its micro-batch up in
the step's :class:`MicroBatches`. Stage shapes are given up front (static metadata), so no stage runs
a trial forward pass that would fire the gradient hooks of data parallelism.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B

from trainer.fp8 import FP8Engine
from trainer.model.gpt import GPT, residual_dtype
from trainer.parallel.state import ParallelState
from trainer.runtime.device import Precision


class MicroBatches:
    """The step's micro-batches on the device, the token count the losses are divided by, and the loss sums
    [1 + sources] the last stage recorded."""

    def __init__(self) -> None:
        self.batches: list[dict[str, torch.Tensor]] = []
        self.tokens = 1.0
        self.loss_sums: list[torch.Tensor] = []

    def set(self, batches: list[dict[str, torch.Tensor]], device: torch.device, tokens: float) -> None:
        """Take the step's ``batches`` (moved to ``device``); losses will be divided by ``tokens``.

        NOTE: pinned first on CUDA, so the copies queue behind the GPU's work instead of waiting for it."""
        pin = device.type == "cuda"
        self.batches = [{key: (value.pin_memory() if pin else value).to(device, non_blocking=True)
                         for key, value in batch.items()} for batch in batches]
        self.tokens, self.loss_sums = tokens, []


class ChunkModule(nn.Module):
    """A model chunk as a pipeline stage sees it: ``forward(inputs, micro)`` where ``micro`` indexes the
    step's micro-batches (the first chunk embeds its tokens; later ones take the previous hidden states).
    The last chunk returns the micro-batch's token loss sum, then with ``num_sources`` each source's part of
    it ([1 + num_sources], :meth:`GPT.loss_sum`: the fused chunked loss at TP 1, the vocab-parallel one
    otherwise), the others their hidden states.

    NOTE: autocast (and the FP8 context) is entered here, around the forward pass and the loss only,
    so the schedules' backward passes run outside it, as in a run without pipelining."""

    def __init__(self, chunk: GPT, feed: MicroBatches, precision: Precision, fp8: FP8Engine,
                 num_sources: int = 0) -> None:
        super().__init__()
        self.chunk, self.feed, self.precision, self.fp8 = chunk, feed, precision, fp8
        self.num_sources = num_sources

    def forward(self, inputs: torch.Tensor | None, micro: torch.Tensor | int) -> torch.Tensor:
        batch = self.feed.batches[int(micro)]
        tokens = batch["tokens"] if self.chunk.stage.first else inputs
        with self.precision.autocast(), self.fp8.parts.autocast():
            if self.chunk.stage.last:  # NOTE: 1-D: the schedules concatenate the last stage's outputs
                return self.chunk.loss_sum(batch, tokens, self.num_sources)
            return self.chunk(tokens, batch["position_ids"], batch.get("cu_seqlens"))


def _stage_shapes(module: ChunkModule, parallel: ParallelState, micro_batch_size: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Meta tensors of a stage's input and output: the micro-batch index on the first stage, hidden states
    [micro, S (/ TP under sequence parallelism), d] in the residual dtype between stages, the fp32 loss sums
    [1 + sources] last."""
    chunk = module.chunk
    sequence = chunk.seq_length // (parallel.tp_size if parallel.sequence_parallel else 1)
    hidden = torch.empty(micro_batch_size, sequence, chunk.config.hidden_size, device="meta", requires_grad=True,
                         dtype=residual_dtype(chunk.config, module.precision.dtype))
    index = torch.empty(1, dtype=torch.int64, device="meta")
    loss_sum = torch.empty(1 + module.num_sources, dtype=torch.float32, device="meta", requires_grad=True)
    return (index if chunk.stage.first else hidden), (loss_sum if chunk.stage.last else hidden)


def build_schedule(modules: list[ChunkModule], stage_indices: list[int], parallel: ParallelState,
                   micro_batches: int, micro_batch_size: int,
                   loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
    """The 1F1B schedule of this rank's chunks (interleaved when it holds more than one)."""
    num_stages = parallel.pp_size * parallel.vpp_size
    stages = []
    for module, index in zip(modules, stage_indices):
        inputs, outputs = _stage_shapes(module, parallel, micro_batch_size)
        stages.append(PipelineStage(module, index, num_stages, parallel.device, input_args=(inputs,),
                                    output_args=(outputs,), group=parallel.group("pp")))
    if len(stages) == 1:
        return Schedule1F1B(stages[0], micro_batches, loss_fn=loss_fn, scale_grads=False)
    return ScheduleInterleaved1F1B(stages, micro_batches, loss_fn=loss_fn, scale_grads=False)
