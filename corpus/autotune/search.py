"""``corpus autotune-workers``: the fastest ``workers`` / ``batch_size`` / ``threads_per_worker`` for this
machine, this tokenizer and this input, measured before a long ``corpus tokenize`` run.

    sample (first --max-documents records, read once) -> trials (the real pipeline, one fresh process
        group each, outputs in a temporary folder) -> steady-state rates -> noise -> recommendation

The search is staged so every candidate of every list is measured without running the whole grid:
each worker count (processes writing parts of the input) with ``corpus tokenize``'s default batch size and
threads for it, then each batch size at the fastest, then each thread count there, then the fastest
configuration again (``repeats`` times) to measure the noise. Nothing is written outside the temporary
folder, which is removed on success, error, Ctrl-C, SIGTERM or SIGHUP.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
import signal
import tempfile
import time
from contextlib import contextmanager
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Iterator, Sequence

from corpus.autotune.errors import TrialError
from corpus.autotune.report import AutotuneResult, Candidate, Run, recommend, run_rates, typical
from corpus.autotune.sample import Sample, write_sample
from corpus.autotune.trial import MIN_BATCHES_PER_WORKER, lanes, route_signals, run_trial
from corpus.core.cores import available_cores
from corpus.core.errors import ConfigError, UserError
from corpus.core.typed_config import knob
from corpus.tokenize.config import TokenizeConfig

log = logging.getLogger(__name__)

#: Batch sizes tried when none are given (``corpus tokenize``'s default 1000, a quarter and 4x).
DEFAULT_BATCH_SIZES = (250, 1000, 4000)
#: More trials than this is a sweep nobody should wait for: narrow the candidate lists.
MAX_TRIALS = 40


def default_workers(cores: int) -> list[int]:
    """1, 2, 4, ... below ``cores``, then ``cores`` (``corpus tokenize``'s default)."""
    return [2**i for i in range(cores.bit_length()) if 2**i < cores] + [cores]


def parse_candidates(values: Sequence[str | int], flag: str) -> list[int]:
    """Counts given as separate words (``1 2 4``, Megatron's form), commas (``1,2,4``) or both."""
    words = [word for value in values for word in str(value).replace(",", " ").split()]
    numbers = []
    for word in words:
        try:
            numbers.append(int(word))
        except ValueError:
            raise ConfigError(f"{flag}: {word!r} is not a whole number (give e.g. {flag} 1 2 4 8)") from None
    return numbers


def _tokenize_default(name: str) -> int:
    return next(f.default for f in fields(TokenizeConfig) if f.name == name)


def _check_candidates(flag: str, values: list[int], least: int, most: int, why: str) -> None:
    """Each value at least ``least``, at most ``most`` (``why`` says why), and given once."""
    if not values:
        raise ConfigError(f"{flag}: give at least one value")
    for value in values:
        if value < least:
            raise ConfigError(f"{flag}: {value} is not allowed, every value must be at least {least}")
        if value > most:
            raise ConfigError(f"{flag}: {value} is too many: {why} (use at most {most})")
    repeated = sorted({value for value in values if values.count(value) > 1})
    if repeated:
        raise ConfigError(f"{flag}: {', '.join(map(str, repeated))} given more than once; list each value once")


@dataclass
class AutotuneConfig:
    """What to tune and how long to spend on it."""

    tokenize: TokenizeConfig = knob(
        MISSING, "The run to tune: inputs, json keys, EOD and tokenizer. Its workers, batch size and threads are what "
        "gets tuned; its output prefix only appears in the recommendation (nothing is written there).")
    workers_to_check: list[int] | None = knob(
        None, "Process counts to measure, e.g. 1 2 4 or 1,2,4 (default: 1, 2, 4, ... up to the cores available), "
        "each with corpus tokenize's default threads for it.", "--workers-to-check")
    batch_sizes_to_check: list[int] | None = knob(
        None, f"Batch sizes to measure (default: {' '.join(map(str, DEFAULT_BATCH_SIZES))}, those the sample can "
        "fill).", "--batch-sizes-to-check")
    threads_per_worker_to_check: list[int] | None = knob(
        None, "Library threads per worker to try at the fastest workers and batch size (default: half and double "
        "corpus tokenize's default there).", "--threads-per-worker-to-check")
    max_documents: int = knob(100_000, "Records of the sample every trial runs on (the first ones of the input, "
                              "read once).", "--max-documents")
    time_budget: float | None = knob(
        None, "About how long the whole sweep may take, in seconds, shared evenly by the trials still to run; trials "
        "stop early to fit, but each still times a minimal steady window (default: each runs the whole sample).",
        "--time-budget", metavar="SECONDS")
    repeats: int = knob(2, "Extra runs of the fastest configuration, to measure the noise.", "--repeats")
    temp_dir: str | None = knob(
        None, "Where the temporary folder goes (default: the system's; use the output file system to include its "
        "write speed).", "--temp-dir")

    def __post_init__(self) -> None:
        if not isinstance(self.tokenize, TokenizeConfig):
            raise ConfigError(f"tokenize must be a TokenizeConfig, not {type(self.tokenize).__name__}")
        if self.max_documents < 1:
            raise ConfigError(f"--max-documents must be at least 1 (got {self.max_documents})")
        if self.time_budget is not None and not self.time_budget > 0:
            raise ConfigError(f"--time-budget must be a positive number of seconds (got {self.time_budget})")
        if self.repeats < 0:
            raise ConfigError(f"--repeats must be 0 or more (got {self.repeats})")
        if self.temp_dir is not None and not os.path.isdir(self.temp_dir):
            raise ConfigError(f"--temp-dir {self.temp_dir}: no such directory")
        self._check_lists()

    def _check_lists(self) -> None:
        for name in ("workers_to_check", "batch_sizes_to_check", "threads_per_worker_to_check"):
            if getattr(self, name) is not None:  # a command line's words ("1 2 4", "1,2,4") become counts
                setattr(self, name, parse_candidates(getattr(self, name), "--" + name.replace("_", "-")))
        cores = available_cores()
        largest_batch = max(1, self.max_documents // MIN_BATCHES_PER_WORKER)
        if self.workers_to_check is None:
            self.workers_to_check = default_workers(cores)
        if self.batch_sizes_to_check is None:
            self.batch_sizes_to_check = [b for b in DEFAULT_BATCH_SIZES if b <= largest_batch] or [largest_batch]
        cores_why = f"this process may use {cores} core(s), more cannot be faster"
        _check_candidates("--workers-to-check", self.workers_to_check, 1, cores, cores_why)
        if self.threads_per_worker_to_check is not None:
            _check_candidates("--threads-per-worker-to-check", self.threads_per_worker_to_check, 1, cores, cores_why)
        _check_candidates("--batch-sizes-to-check", self.batch_sizes_to_check, 1, largest_batch,
                          f"a trial needs {MIN_BATCHES_PER_WORKER} batches or more of the --max-documents "
                          f"{self.max_documents:,} sample (or raise --max-documents)")
        if self.planned_trials() > MAX_TRIALS:
            raise ConfigError(
                f"{self.planned_trials()} trials planned ({len(self.workers_to_check)} worker counts, "
                f"{len(self.batch_sizes_to_check)} batch sizes, {self._thread_trials()} thread counts, "
                f"{self.repeats} repeats): more than {MAX_TRIALS}; check fewer values, e.g. "
                f"--workers-to-check {' '.join(map(str, default_workers(cores)))}")

    def _thread_trials(self) -> int:
        """Trials of the thread stage: one per given count, else half and double the default."""
        return len(self.threads_per_worker_to_check) if self.threads_per_worker_to_check else 2

    def planned_trials(self) -> int:
        """Trials of the staged search (fewer when candidates coincide or the sample is too small)."""
        return len(self.workers_to_check) + len(self.batch_sizes_to_check) - 1 + self._thread_trials() + self.repeats


class _Sweep:
    """Runs trials on the sample, keeps their rates, shares the time budget, names what it skips."""

    def __init__(self, config: AutotuneConfig, sample: Sample, folder: Path, began: float) -> None:
        self.config, self.sample, self.folder = config, sample, folder
        self.deadline = began + config.time_budget if config.time_budget else None
        self.runs: dict[Candidate, list[Run]] = {}
        self.not_measured: dict[Candidate, str] = {}
        self.trials = 0
        self.skipped_records = 0
        self.messages: set[str] = set()

    def too_small(self, candidate: Candidate) -> str | None:
        """Why the sample cannot keep ``candidate``'s workers busy long enough to time them, or None."""
        documents, workers = self.sample.documents, candidate.workers
        batches = math.ceil(documents / candidate.batch_size)
        needed = MIN_BATCHES_PER_WORKER * lanes(workers)
        if batches >= needed:
            return None
        largest = documents // needed
        fix = f"batch sizes of {largest} or less" if largest else "a larger input"
        more = "" if self.sample.whole_input else " or raise --max-documents"
        who = f"{workers} worker(s) need"
        return (f"the sample's {documents:,} documents make {batches} batch(es) of {candidate.batch_size:,}, and "
                f"{who} {needed} or more (check {fix}{more})")

    def fastest(self) -> Candidate:
        """The measured configuration with the highest median MB/s."""
        return max(self.runs, key=lambda candidate: typical(self.runs[candidate]).mb_per_s)

    def _trial_deadline(self) -> float | None:
        """Now plus an even share of the budget left over the trials still planned."""
        if self.deadline is None:
            return None
        now = time.monotonic()
        return now + max(0.0, self.deadline - now) / max(1, self.config.planned_trials() - self.trials)

    def _trial_config(self, candidate: Candidate, folder: Path) -> TokenizeConfig:
        return self.config.tokenize.replace(
            inputs=[self.sample.path], output_prefix=str(folder / "out"), workers=candidate.workers,
            batch_size=candidate.batch_size, threads_per_worker=candidate.threads_per_worker, on_error="skip",
            resume=False, quiet=True, stats_json=None, shard_index=0, num_shards=1,
            sample_records=0)  # a trial's output is thrown away: checking it would only skew its clock

    def measure(self, candidate: Candidate, again: bool = False) -> None:
        """Run one trial of ``candidate`` (unless already measured, or ``again``) and keep its rates."""
        if (candidate in self.runs and not again) or candidate in self.not_measured:
            return
        problem = self.too_small(candidate)
        if problem is None:
            folder = Path(tempfile.mkdtemp(prefix="trial-", dir=self.folder))
            try:
                report = run_trial(self._trial_config(candidate, folder), self._trial_deadline())
            except TrialError as error:
                raise UserError(f"the trial {candidate} failed:\n{error}") from None
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            self.trials += 1
            self.skipped_records = max(self.skipped_records, report.skipped)
            self._relay(report.messages)
            run = run_rates(report, candidate.workers)
            problem = None if run else "too few batches were timed"
        if problem:
            self.not_measured[candidate] = problem
            log.info("not measured: %s: %s", candidate, problem)
            return
        self.runs.setdefault(candidate, []).append(run)
        log.info("trial %d: %s: %.2f MB/s, %.0f docs/s, %.0f tokens/s, peak RSS %.0f MB", self.trials, candidate,
                 run.mb_per_s, run.docs_per_s, run.tokens_per_s, run.peak_rss_mb)

    def _relay(self, messages: list[str]) -> None:
        """Log what trial processes said, each line once (every trial would repeat the same warning)."""
        for message in messages:
            if message not in self.messages:
                self.messages.add(message)
                log.warning("trial: %s", message)


def _default_threads(config: AutotuneConfig, workers: int) -> int:
    """The threads ``corpus tokenize --workers N`` uses when not told (the cores shared out)."""
    return config.tokenize.replace(threads_per_worker=None).threads_for(workers)


def _thread_counts(config: AutotuneConfig, fastest: Candidate) -> list[int]:
    """The given thread counts, else half and double the default at the fastest worker count."""
    if config.threads_per_worker_to_check:
        return config.threads_per_worker_to_check
    default = _default_threads(config, fastest.workers)
    return sorted({max(1, default // 2), min(available_cores(), default * 2)} - {default})


def _stages(sweep: _Sweep) -> None:
    """Workers (each with its default threads), then batch size, then threads, then repeats of the fastest."""
    config = sweep.config
    batches = config.batch_sizes_to_check
    default_batch = _tokenize_default("batch_size")
    batch0 = default_batch if default_batch in batches else batches[0]
    for count in config.workers_to_check:
        threads = _default_threads(config, count)
        fits = [size for size in batches if sweep.too_small(Candidate(count, size, threads)) is None]
        sweep.measure(Candidate(count, batch0 if batch0 in fits or not fits else max(fits), threads))
    if not sweep.runs:
        reasons = "\n".join(f"  {c}: {reason}" for c, reason in sweep.not_measured.items())
        raise UserError(f"nothing could be measured:\n{reasons}")
    fastest = sweep.fastest()
    for size in batches:
        sweep.measure(dataclasses.replace(fastest, batch_size=size))
    fastest = sweep.fastest()
    for count in _thread_counts(config, fastest):
        sweep.measure(dataclasses.replace(fastest, threads_per_worker=count))
    fastest = sweep.fastest()
    for _ in range(config.repeats):
        sweep.measure(fastest, again=True)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextmanager
def _scratch(parent: str | None) -> Iterator[Path]:
    """A temporary folder for the sample and the trials' outputs, removed however the sweep ends:
    SIGTERM and SIGHUP (unless ignored, e.g. under nohup) interrupt like Ctrl-C, and further signals
    are ignored during the removal so it cannot stop halfway."""
    folder = Path(tempfile.mkdtemp(prefix="corpus-autotune-", dir=parent))
    terminations = [number for number in (signal.SIGTERM, signal.SIGHUP) if signal.getsignal(number) == signal.SIG_DFL]
    try:
        with route_signals(_interrupt, terminations):
            yield folder
    finally:
        with route_signals(signal.SIG_IGN, (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)):
            shutil.rmtree(folder, ignore_errors=True)


def autotune(config: AutotuneConfig) -> AutotuneResult:
    """Measure the candidate configurations on a sample of ``config.tokenize``'s input and recommend one.

    Raises :class:`UserError` when nothing can be measured or a trial fails, ``KeyboardInterrupt``
    on Ctrl-C, SIGTERM or SIGHUP; in every case the trials' processes are gone and nothing is left on disk.
    """
    began = time.monotonic()
    with _scratch(config.temp_dir) as folder:
        sample = write_sample(config.tokenize, config.max_documents, folder / "sample.jsonl")
        if sample.documents == 0:
            raise UserError(f"{', '.join(config.tokenize.inputs)}: no records to measure on")
        log.info("sample: %d documents, %.1f MB; %d trials planned", sample.documents, sample.bytes / 1e6,
                 config.planned_trials())
        sweep = _Sweep(config, sample, folder, began)
        _stages(sweep)
    rows, best, noise, noise_runs = recommend(sweep.runs)
    best_config = config.tokenize.replace(workers=best.workers, batch_size=best.batch_size,
                                          threads_per_worker=best.threads_per_worker)
    return AutotuneResult(rows, best, best_config, noise, noise_runs, list(sweep.not_measured.items()), sample,
                          time.monotonic() - began, sweep.skipped_records)
