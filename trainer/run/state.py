"""The :class:`Run`: what the training loop touches that cannot be derived from the config — the built
components (:mod:`trainer.run.build` makes them) and the progress (step, last checkpoint, loader iterators)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from corpus.blending.mixing.mixer import OnlineMixer
from trainer.config.schema import TrainConfig
from trainer.fp8 import FP8Engine
from trainer.model.gpt import GPT
from trainer.optim.schedule import LRSchedule
from trainer.parallel.state import ParallelState
from trainer.parallelize.engine import StepEngine
from trainer.run.data import TrainData
from trainer.run.telemetry import SourceTelemetry
from trainer.runtime.device import Precision


@dataclass
class Run:
    """What the loop touches that cannot be derived from the config: the built components and the progress."""

    config: TrainConfig
    parallel: ParallelState
    precision: Precision
    data: TrainData
    engine: StepEngine  # all of this rank's chunks, the pipeline schedule, gradient reduction
    optimizer: torch.optim.Optimizer
    schedule: LRSchedule
    flops_per_token: float
    peak_tflops: float | None
    iteration: int = 0
    checkpoint_dir: Path | None = None  # the last checkpoint written or loaded
    checkpoint_iteration: int | None = None
    iterators: dict = field(default_factory=dict)
    compiled: bool = False  # the blocks run through torch.compile (they compile during the first step)
    compile_cache: Path | None = None  # --compile-cache's file for this rank, when the blocks are compiled
    telemetry: SourceTelemetry | None = None  # per-source counts (None under --log-per-source off)
    mixer: OnlineMixer | None = None  # the train weights' online mixer (None: the blend's weights are fixed)

    @property
    def model(self) -> GPT:
        """This rank's first model chunk (the whole model without pipeline parallelism)."""
        return self.engine.chunks[0]

    @property
    def fp8(self) -> FP8Engine:
        """The run's GEMM backend (plain bf16/fp32 unless ``--fp8-format``)."""
        return self.engine.fp8

    @property
    def global_batch_size(self) -> int:
        """Samples per optimizer step over all ranks (``--global-batch-size``, default micro batch × DP)."""
        return self.config.training.global_batch_size or self.config.training.micro_batch_size * self.parallel.dp_size

    @property
    def accumulation(self) -> int:
        """Micro-batches per step on each data-parallel rank."""
        return self.global_batch_size // (self.config.training.micro_batch_size * self.parallel.dp_size)

    def batches(self, split: str):
        """The (persistent) micro-batch iterator of ``split``."""
        if split not in self.iterators:
            self.iterators[split] = iter(self.data.loaders[split])
        return self.iterators[split]
