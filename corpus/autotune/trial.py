"""One trial of ``corpus autotune-workers``: the real pipeline, one configuration, in a fresh process.

    python -m corpus.autotune.trial < request.json > report.json

:func:`run_trial` starts this module in a session of its own, so the trial's process and its pool
workers form one process group that can be killed as a whole (Ctrl-C, errors), and each trial starts
clean: its peak RSS is its own (VmHWM, never lowered within a process) and its tokenizer
thread pool is sized by its own ``threads_per_worker``. The request is ``{"config": <TokenizeConfig
as a dict>, "deadline": <time.monotonic() value or null>}``; the reply is a :class:`TrialReport`.

The trial times every batch as the pipeline writes it; :func:`steady_window` then leaves out the
warm-up (the first batch of each worker: process start, tokenizer load, cold caches) and the drain
(the last batch of each worker, when workers run out of work), which a long run never sees.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from corpus.autotune.errors import TrialError
from corpus.core.errors import UserError
from corpus.tokenize.config import TokenizeConfig, config_from_mapping
from corpus.tokenize.stats import Counters, peak_rss_mb

#: Batches per worker a trial needs: one warm-up, two timed, one drain.
MIN_BATCHES_PER_WORKER = 4
#: Timed batches per worker before a trial may stop at its deadline.
TIMED_BATCHES_PER_WORKER = MIN_BATCHES_PER_WORKER - 2
#: Seconds to wait for the killed processes of a trial to be gone (workers dying, orphans reaped).
GONE_TIMEOUT_S = 10.0
#: The signals that stop a sweep (``corpus.autotune.search`` turns SIGTERM and SIGHUP into Ctrl-C).
STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class TrialReport:
    """What one trial measured: ``points[i]`` = (monotonic seconds, records, input bytes, tokens) after
    batch i was written; ``finished``: the whole sample was tokenized (else the deadline stopped it)."""

    points: list[tuple[float, int, int, int]]
    finished: bool
    main_rss_mb: float
    """Peak RSS of the trial's main process (reader, writers, the start-up tokenizer)."""
    worker_rss_mb: float
    """Peak RSS of its largest worker process (0 with one process)."""
    skipped: int
    """Bad records of the sample (skipped, so the trial still measures)."""
    messages: list[str] = field(default_factory=list)
    """What the trial process logged (warnings such as a missing optional encoder)."""
    launched: float = 0.0
    """``time.monotonic()`` when the trial process was started (the clock is system-wide)."""


def lanes(workers: int) -> int:
    """Batches encoded at once: one per worker process."""
    return max(1, workers)


def steady_window(batches: int, workers: int, finished: bool) -> tuple[int, int] | None:
    """``(start, end)``: time from the end of batch ``start`` to the end of batch ``end``, leaving out
    one batch per lane at the start (warm-up) and, when the run went to the end, at the end (drain).
    None when too few batches remain for ``TIMED_BATCHES_PER_WORKER`` timed batches per lane."""
    parallel = lanes(workers)
    start = parallel - 1
    end = batches - 1 - (parallel if finished else 0)
    return (start, end) if end - start >= TIMED_BATCHES_PER_WORKER * parallel else None


class _DeadlineReached(Exception):
    """The trial's share of the time budget is used and its steady window is long enough. Private: it unwinds the
    pipeline from its batch hook, and the trial catches it as a normal end."""


class _BatchClock:
    """The pipeline's ``on_batch`` hook: a point per batch that held records; stops at the deadline."""

    def __init__(self, workers: int, deadline: float | None) -> None:
        self.workers, self.deadline = workers, deadline
        self.points: list[tuple[float, int, int, int]] = []
        self.skipped = 0
        self.worker_rss_kb = 0

    def __call__(self, counters: Counters, worker_rss_kb: int) -> None:
        self.worker_rss_kb = worker_rss_kb
        if self.points and counters.records_read == self.points[-1][1]:
            return
        now = time.monotonic()
        self.points.append((now, counters.records_read, counters.input_bytes, counters.total_tokens))
        self.skipped = counters.records_skipped
        if self.deadline is not None and now >= self.deadline and steady_window(len(self.points), self.workers, False):
            raise _DeadlineReached


def _measure(config: TokenizeConfig, deadline: float | None) -> TrialReport:
    """Run the pipeline under the clock (in the trial process)."""
    from corpus.tokenize.run import tokenize

    clock = _BatchClock(config.workers, deadline)
    try:
        tokenize(config, on_batch=clock)
        finished = True
    except _DeadlineReached:
        finished = False
    # NOTE: each worker's own VmHWM, as it reported it with its batches: not RUSAGE_CHILDREN, whose
    # maxrss starts at what the trial process held when the worker was forked (tokenizer included).
    worker_rss_mb = clock.worker_rss_kb / 1024 if config.processes > 1 else 0.0
    return TrialReport(clock.points, finished, peak_rss_mb(), worker_rss_mb, clock.skipped)


def main() -> int:
    """Entry point of the trial process: request on stdin, report on stdout, a person's error on stderr."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    request = json.loads(sys.stdin.buffer.read())
    try:
        report = _measure(config_from_mapping(request["config"]), request["deadline"])
    except UserError as error:
        print(error, file=sys.stderr)
        return 2
    json.dump(dataclasses.asdict(report), sys.stdout)
    return 0


def _environment() -> dict[str, str]:
    """This process's environment, with the folder holding ``corpus`` first on the import path."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


def _kill_group(process: subprocess.Popen) -> None:
    """Kill whatever is left of the trial's process group (its workers too), reap the trial, and keep
    killing (up to :data:`GONE_TIMEOUT_S`) until the kernel has no process of the group left, so none
    outlives the autotuner — a worker forked while the group was being killed included."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
    deadline = time.monotonic() + GONE_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.01)


@contextmanager
def route_signals(handler, signals: Sequence[int]) -> Iterator[None]:
    """Route ``signals`` to ``handler`` for a while (main thread only: elsewhere Python cannot set
    handlers, and signals reach the main thread anyway)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, handler) for number in signals}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def _signals_held(held: list[int]) -> AbstractContextManager[None]:
    """A while in which the stopping signals (Ctrl-C, SIGTERM, SIGHUP) are recorded in ``held`` instead of
    acted on; ignored ones stay ignored, and one with a handler not set from Python is left alone."""
    handled = [number for number in STOPPING_SIGNALS if signal.getsignal(number) not in (signal.SIG_IGN, None)]
    return route_signals(lambda signum, frame: held.append(signum), handled)


def run_trial(config: TokenizeConfig, deadline: float | None) -> TrialReport:
    """Measure ``config`` in a trial process; on any exception (Ctrl-C included) its whole process
    group is killed before the exception goes on, so no worker outlives the trial."""
    request = json.dumps({"config": dataclasses.asdict(config), "deadline": deadline}).encode()
    launched = time.monotonic()
    held: list[int] = []
    process = None
    try:
        # NOTE: a Ctrl-C inside Popen, after its fork, raised before `process` existed: the new trial ran on
        # with nobody to kill it (seen in CI). Held until `process` exists, such a signal is acted on here.
        with _signals_held(held):
            process = subprocess.Popen([sys.executable, "-m", "corpus.autotune.trial"], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_environment(),
                                       start_new_session=True)
        for signum in held:
            signal.raise_signal(signum)
        out, err = process.communicate(request)
    finally:
        if process is not None:
            _kill_group(process)
    messages = err.decode(errors="replace").strip().splitlines()
    if process.returncode != 0:
        raise TrialError("\n".join(messages[-20:]) or f"the trial process exited with status {process.returncode}")
    return TrialReport(**{**json.loads(out), "messages": messages, "launched": launched})


if __name__ == "__main__":
    sys.exit(main())
