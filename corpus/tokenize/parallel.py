"""A run of several parts: processes write them side by side while a thread joins them in order.

Parts are handed out in input order to whichever process asks first, so the first parts are joined while later
ones are written and the processes finish together; while the input is checked against the reference library, which
only this process holds, the first part waits for this process's thread, so that the check covers the run's first
records. Progress is the sum of every part's counters. A bad record under ``--on-error fail``
stops the run with the first bad record in input order (the parts before the failing one are finished first, since
one of them may hold an earlier one), naming its true line; any other failure stops it at once, keeping every
checkpoint for ``--resume``.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Callable

from corpus.tokenize.ending import failing_cleanly, finish
from corpus.tokenize.errors import BadRecordError, WorkerDied
from corpus.tokenize.job import Job
from corpus.tokenize.join import Joiner, part_prefix, parts_folder
from corpus.tokenize.outputs import Outputs
from corpus.tokenize.pool import Event, PartPool
from corpus.tokenize.progress import Progress
from corpus.tokenize.stats import Counters
from corpus.tokenize.worker import BatchEncoder

#: Seconds between looks at the joiner and the progress when no worker says anything.
_POLL_S = 0.2


class _Run:
    """The event loop of a run of several parts (see the module docstring)."""

    def __init__(self, job: Job, state: dict | None, on_batch: Callable | None) -> None:
        self.job, self.on_batch = job, on_batch
        parts_folder(job.stage).mkdir(parents=True, exist_ok=True)
        self.outputs = Outputs(job.stage, job.keys, job.dtype, state)
        self.joiner = Joiner(job.stage, self.outputs, job.parts, state, job.config.checkpoint_interval, job.save)
        if state is None:
            self.joiner.checkpoint()
        self.start = self.joiner.counters
        self.waiting = deque(range(self.joiner.joined, len(job.parts)))
        self.first_for_this_process = job.input_check is not None
        """The first waiting part is kept for this process's thread (see the module docstring)."""
        self.running: set[int] = set()
        """The parts being written."""
        self.counters: dict[int, Counters] = {}
        self.failures: dict[int, BaseException] = {}
        self.worker_rss_kb = 0

    def total(self) -> Counters:
        total = self.start
        for counters in self.counters.values():
            total = total.plus(counters)
        return total

    def handle(self, pool: PartPool, event: Event) -> None:
        if event.kind == "ready":
            index = self.next_part(pool.is_local(event.worker))
            if index is not None:
                self.running.add(index)
                pool.assign(event.worker, self.job.task(index, part_prefix(self.job.stage, index)))
        elif event.kind == "progress":
            self.counters[event.part], peak_rss_kb = event.value
            self.worker_rss_kb = max(self.worker_rss_kb, peak_rss_kb)
        elif event.kind == "done":
            self.running.remove(event.part)
            self.counters[event.part] = event.value.counters
            self.worker_rss_kb = max(self.worker_rss_kb, event.value.peak_rss_kb)
            self.joiner.offer(event.part, event.value)
        elif event.kind == "failed":
            self.running.discard(event.part)
            if not isinstance(event.value, BadRecordError):
                raise event.value
            self.failures[event.part] = event.value
        else:
            raise WorkerDied(f"a tokenize worker ({pool.describe(event.worker)}) ended abruptly (out of memory or "
                             "killed?); rerun with --resume to continue from the last checkpoints")

    def next_part(self, local: bool) -> int | None:
        """The part for a worker that asks for one (``local``: this process's thread), or None: none is left, or
        the run is failing."""
        if self.failures or not self.waiting:
            return None
        if local or not self.first_for_this_process:
            self.first_for_this_process = False
            return self.waiting.popleft()
        if len(self.waiting) == 1:
            return None
        index = self.waiting[1]
        del self.waiting[1]
        return index

    def first_failure(self) -> BaseException | None:
        """The bad record to report, once no part before the first failing one is still running."""
        if not self.failures:
            return None
        first = min(self.failures)
        return None if any(index < first for index in self.running) else self.failures[first]

    def loop(self, pool: PartPool, progress: Progress) -> None:
        while not self.joiner.done:
            for event in pool.events(_POLL_S):
                self.handle(pool, event)
            self.joiner.raise_error()
            failure = self.first_failure()
            if failure is not None:
                raise failure
            total = self.total()
            progress.update(total)
            if self.on_batch:
                self.on_batch(total, self.worker_rss_kb)
        self.joiner.wait()


def write_parts(job: Job, state: dict | None, on_batch: Callable | None) -> tuple[Counters, Counters, int]:
    """Write the outputs of a run of several parts from ``state`` on; returns the counters, the counters at the
    start and the workers' largest peak RSS (KB)."""
    run = _Run(job, state, on_batch)
    progress = Progress(sum(part.size for part in job.parts), run.start, job.config.quiet, job.config.log_interval,
                        Path(job.prefix).name)
    check = job.input_check
    pool = job.pool
    pool.add_local(BatchEncoder(job.spec(), job.tokenizer), check.offer if check else None)

    def stop() -> None:
        pool.close()
        run.joiner.stop()

    try:
        with failing_cleanly(job, run.outputs, run.total, stop):
            run.loop(pool, progress)
            pool.close()
            finish(job, run.outputs, run.joiner.counters, run.joiner.record())
    finally:
        progress.close()
    return run.joiner.counters, run.start, max(run.worker_rss_kb, run.joiner.peak_rss_kb)
