"""``--manual-gc``: when Python collects garbage during a run."""

from __future__ import annotations

import contextlib
import gc
import logging
from typing import Iterator

from trainer.config.schema import TrainingConfig

log = logging.getLogger(__name__)


class GarbageCollection:
    """``--manual-gc``: Python's automatic collector stays off while the loop runs; :meth:`after_step` and
    :meth:`before_pause` collect at the points the flags name.

    Why (Megatron's reason for the flag): the loop waits for the GPU each step (loss, gradient norm), so a
    collection stalls the step it falls in, on a different step on each rank, and under data parallelism
    every rank waits for the slowest (on one GPU it changes nothing measurable: bench/RESULTS.md)."""

    def __init__(self, config: TrainingConfig) -> None:
        self.enabled, self.interval = config.manual_gc, config.manual_gc_interval

    def after_step(self, step: int) -> None:
        """Collect after step ``step`` when it is a multiple of ``--manual-gc-interval``."""
        if self.enabled and self.interval and step % self.interval == 0:
            gc.collect()

    def before_pause(self) -> None:
        """Collect before an evaluation or a checkpoint, which wait anyway."""
        if self.enabled:
            gc.collect()


@contextlib.contextmanager
def garbage_collection(config: TrainingConfig) -> Iterator[GarbageCollection]:
    """The run's :class:`GarbageCollection`; the automatic collector is off inside under ``--manual-gc``
    (restored on exit)."""
    collection = GarbageCollection(config)
    was_enabled = gc.isenabled()
    if collection.enabled:
        gc.collect()
        gc.disable()
        log.info("garbage collection: manual (every %s)", f"{collection.interval} steps" if collection.interval
                 else "evaluation and checkpoint")
    try:
        yield collection
    finally:
        if was_enabled:
            gc.enable()
