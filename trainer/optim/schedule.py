"""Learning-rate schedule: linear warmup, then a named decay to ``min_lr``.

The rate is a pure function of the step number, so a resumed run needs no scheduler state beyond the
step (the checkpoint records the schedule's settings only to warn when they change).
"""

from __future__ import annotations

import math
from typing import Callable

from corpus.core.errors import ConfigError
from trainer.config.schema import DecayStyle, OptimConfig

#: progress in [0, 1] → fraction of the way from --lr down to --min-lr; one entry per name of ``DecayStyle``.
DECAY_STYLES: dict[DecayStyle, Callable[[float], float]] = {
    "constant": lambda progress: 0.0,
    "linear": lambda progress: progress,
    "cosine": lambda progress: 0.5 * (1.0 - math.cos(math.pi * progress)),
}


class LRSchedule:
    """``lr(step)`` for 1-based optimizer steps: step 1 is the first update."""

    def __init__(self, config: OptimConfig, train_iters: int) -> None:
        self.peak, self.floor, self.init = config.lr, config.min_lr, config.lr_warmup_init
        self.warmup = config.lr_warmup_iters
        self.decay_iters = config.lr_decay_iters or train_iters
        self.style = config.lr_decay_style
        self.decay = DECAY_STYLES[self.style]
        if self.warmup > self.decay_iters:
            raise ConfigError(f"--lr-warmup-iters {self.warmup} exceeds the decay length {self.decay_iters} "
                              "(--lr-decay-iters, default --train-iters)")

    def __call__(self, step: int) -> float:
        if step <= self.warmup:
            return self.init + (self.peak - self.init) * step / self.warmup
        span = self.decay_iters - self.warmup
        progress = min(1.0, (step - self.warmup) / span) if span else 1.0
        return self.peak - (self.peak - self.floor) * self.decay(progress)

    def describe(self) -> dict:
        """The settings that define the curve (saved with checkpoints)."""
        return {"peak": self.peak, "min": self.floor, "init": self.init, "warmup": self.warmup,
                "decay_iters": self.decay_iters, "style": self.style}
