"""Clean early stops: preemption signals (SIGTERM, SIGUSR1), ``--exit-duration-in-mins`` and
``--exit-interval`` become a request the loop polls between steps, so the step in flight finishes and a
checkpoint is written."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

from trainer.config.schema import TrainingConfig

log = logging.getLogger(__name__)


@dataclass
class StopRequest:
    """Why the loop should save and stop early: SIGTERM (preemption), ``--exit-duration-in-mins`` or
    ``--exit-interval``."""

    deadline: float | None
    interval: int | None
    reason: str | None = None
    _previous: dict = field(default_factory=dict)

    def check(self, step: int) -> str | None:
        """The reason to stop after ``step``, or None to go on."""
        if self.reason is None and self.deadline is not None and time.monotonic() >= self.deadline:
            self.reason = "--exit-duration-in-mins reached"
        if self.reason is None and self.interval and step % self.interval == 0:
            self.reason = f"--exit-interval {self.interval} reached"
        return self.reason


@contextlib.contextmanager
def stop_on_signals(config: TrainingConfig) -> Iterator[StopRequest]:
    """Turn SIGTERM/SIGUSR1 into a :class:`StopRequest` the loop polls between steps (so the step in
    flight finishes and a checkpoint is written); restores the previous handlers on exit."""
    minutes = config.exit_duration_in_mins
    request = StopRequest(None if minutes is None else time.monotonic() + 60.0 * minutes, config.exit_interval)

    def handler(number: int, frame: object) -> None:
        request.reason = f"received {signal.Signals(number).name}"
        log.warning("%s: finishing this step, saving a checkpoint, then exiting", request.reason)

    if threading.current_thread() is threading.main_thread():  # signal handlers can only be set there
        for number in (signal.SIGTERM, signal.SIGUSR1):
            request._previous[number] = signal.signal(number, handler)
    try:
        yield request
    finally:
        for number, previous in request._previous.items():
            signal.signal(number, previous)
