"""Progress of a tokenize run: a live rich bar on a terminal, periodic log lines otherwise.

Rates are over this process's own work (a resumed run starts its clock at the checkpoint); the ETA
comes from input bytes, the only total known before reading.
"""

from __future__ import annotations

import logging
import sys
import time
from datetime import timedelta

from corpus.tokenize.stats import Counters

log = logging.getLogger("corpus.tokenize.run")


def _rates(counters: Counters, start: Counters, seconds: float) -> tuple[float, float, float]:
    seconds = max(seconds, 1e-9)
    return ((counters.records_read - start.records_read) / seconds,
            (counters.input_bytes - start.input_bytes) / 1e6 / seconds,
            (counters.total_tokens - start.total_tokens) / seconds)


class Progress:
    """Reports progress of ``total_bytes`` of input; ``update`` is cheap to call after every batch."""

    def __init__(self, total_bytes: int, start: Counters, quiet: bool, log_interval: float, label: str) -> None:
        self.total_bytes, self.label, self.log_interval = total_bytes, label, log_interval
        self.start = Counters(**{**start.to_dict(), "tokens": dict(start.tokens)})
        self.began = self.last_log = time.monotonic()
        self.bar = None
        if not quiet and sys.stderr.isatty():
            self._start_bar()
        self.logging = not quiet and self.bar is None

    def _start_bar(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        self.bar = RichProgress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>5.1f}%"),
                                TextColumn("{task.fields[rates]}"), TimeRemainingColumn(),
                                console=Console(stderr=True), refresh_per_second=4)
        self.bar.start()
        self.task = self.bar.add_task(self.label, total=max(self.total_bytes, 1), completed=self.start.input_bytes,
                                      rates="")

    def update(self, counters: Counters) -> None:
        now = time.monotonic()
        docs, megabytes, tokens = _rates(counters, self.start, now - self.began)
        if self.bar is not None:
            rates = f"{docs:,.0f} docs/s {megabytes:.1f} file MB/s {tokens:,.0f} tok/s"
            self.bar.update(self.task, completed=counters.input_bytes, rates=rates)
        elif self.logging and now - self.last_log >= self.log_interval:
            self.last_log = now
            done = counters.input_bytes / max(self.total_bytes, 1)
            left = (self.total_bytes - counters.input_bytes) / 1e6 / megabytes if megabytes > 0 else 0
            log.info("%s: %.1f%% of %.1f MB, %s records (%.0f docs/s), %.2f file MB/s, %.0f tokens/s, ETA %s",
                     self.label, 100 * done, self.total_bytes / 1e6, f"{counters.records_read:,}", docs, megabytes,
                     tokens, timedelta(seconds=round(left)))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
