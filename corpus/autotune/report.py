"""What ``corpus autotune-workers`` concludes from its trials: the rates of each configuration, the
measurement noise, the recommendation, and the table a person reads.

Speed is input MB/s over each trial's steady window (what decides how long a corpus of a given size
takes); docs/s and tokens/s come from the same window. Noise is the spread of the repeated runs of the
fastest configuration, never less than :data:`NOISE_FLOOR`: every configuration within it of the
fastest counts as equally fast, and among those the fewest workers (then threads, then memory) win,
because they leave cores and memory to everything else on the machine.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from statistics import median

from corpus.autotune.sample import Sample
from corpus.autotune.trial import TrialReport, steady_window
from corpus.tokenize.config import TokenizeConfig

#: Smallest relative difference treated as real (timer and scheduler jitter on a quiet machine).
NOISE_FLOOR = 0.02
#: Steady windows shorter than this (seconds) get a note: start-up effects and jitter weigh too much.
SHORT_WINDOW_S = 2.0


@dataclass(frozen=True)
class Candidate:
    """One pipeline configuration to measure."""

    workers: int
    batch_size: int
    threads_per_worker: int

    def __str__(self) -> str:
        return f"workers={self.workers} batch_size={self.batch_size} threads_per_worker={self.threads_per_worker}"


@dataclass(frozen=True)
class Run:
    """The rates of one trial over its steady window."""

    docs_per_s: float
    mb_per_s: float
    tokens_per_s: float
    peak_rss_mb: float
    """Main process peak + the other workers x the largest worker's peak (each process's own kernel-kept peak)."""
    timed_s: float
    """Length of the steady window the rates come from."""
    startup_s: float
    """From the trial's process start to its first batch written: what a run pays once (interpreter,
    tokenizer load, encoder check, worker spawn), left out of the rates."""


def run_rates(report: TrialReport, workers: int) -> Run | None:
    """The rates of a trial, or None when it timed too few batches to say anything."""
    window = steady_window(len(report.points), workers, report.finished)
    if window is None:
        return None
    (t0, docs0, bytes0, tokens0), (t1, docs1, bytes1, tokens1) = report.points[window[0]], report.points[window[1]]
    seconds = t1 - t0
    if seconds <= 0:
        return None
    return Run((docs1 - docs0) / seconds, (bytes1 - bytes0) / 1e6 / seconds, (tokens1 - tokens0) / seconds,
               report.main_rss_mb + (workers - 1) * report.worker_rss_mb, seconds,
               report.points[0][0] - report.launched)


def typical(runs: list[Run]) -> Run:
    """Median rates of repeated runs of one configuration, and the largest peak RSS seen."""
    return Run(median(r.docs_per_s for r in runs), median(r.mb_per_s for r in runs),
               median(r.tokens_per_s for r in runs), max(r.peak_rss_mb for r in runs),
               median(r.timed_s for r in runs), median(r.startup_s for r in runs))


@dataclass(frozen=True)
class Measured(Run):
    """One measured configuration: its median rates (see :class:`Run`), as ``--json`` prints it."""

    workers: int
    batch_size: int
    threads_per_worker: int
    runs: int
    """Trials of this configuration (the fastest is repeated to measure the noise)."""
    within_noise: bool
    """As fast as the fastest configuration, given the noise."""

    def to_dict(self) -> dict:
        """The configuration first, then its rates."""
        return {"workers": self.workers, "batch_size": self.batch_size,
                "threads_per_worker": self.threads_per_worker, **dataclasses.asdict(self)}


def noise_of(runs: dict[Candidate, list[Run]]) -> tuple[float, int]:
    """Relative spread (max - min) / median of the MB/s of the most repeated configuration (at least
    :data:`NOISE_FLOOR`), and how many runs it rests on."""
    repeated = max(runs.values(), key=len)
    speeds = [r.mb_per_s for r in repeated]
    spread = (max(speeds) - min(speeds)) / median(speeds) if len(speeds) > 1 else 0.0
    return max(NOISE_FLOOR, spread), len(speeds)


def recommend(runs: dict[Candidate, list[Run]]) -> tuple[list[Measured], Measured, float, int]:
    """Rows sorted fastest first (MB/s), the recommended row, the noise and the runs it rests on."""
    noise, noise_runs = noise_of(runs)
    rates = {candidate: typical(measured) for candidate, measured in runs.items()}
    fastest = max(rate.mb_per_s for rate in rates.values())
    rows = [Measured(**vars(rate), **vars(candidate), runs=len(runs[candidate]),
                     within_noise=rate.mb_per_s >= fastest * (1 - noise)) for candidate, rate in rates.items()]
    rows.sort(key=lambda row: (-row.mb_per_s, row.workers, row.threads_per_worker))
    best = min((row for row in rows if row.within_noise),
               key=lambda row: (row.workers, row.threads_per_worker, row.peak_rss_mb, -row.mb_per_s))
    return rows, best, noise, noise_runs


_COLUMNS = (("workers", "{:,}"), ("batch size", "{:,}"), ("threads", "{:,}"), ("docs/s", "{:,.0f}"),
            ("MB/s", "{:,.2f}"), ("tokens/s", "{:,.0f}"), ("peak RSS MB", "{:,.0f}"), ("start s", "{:,.1f}"),
            ("runs", "{}"))


@dataclass
class AutotuneResult:
    """Everything ``corpus autotune-workers`` found; ``best_config`` is the run to launch."""

    trials: list[Measured]
    best: Measured
    best_config: TokenizeConfig
    noise: float
    noise_runs: int
    not_measured: list[tuple[Candidate, str]]
    sample: Sample
    seconds: float
    skipped_records: int

    def to_dict(self) -> dict:
        """The ``--json`` object (the CLI adds ``command``)."""
        return {"trials": [row.to_dict() for row in self.trials], "best": self.best.to_dict(),
                "noise": self.noise, "noise_runs": self.noise_runs,
                "not_measured": [{**vars(c), "reason": reason} for c, reason in self.not_measured],
                "sample": {"documents": self.sample.documents, "bytes": self.sample.bytes,
                           "whole_input": self.sample.whole_input},
                "seconds": self.seconds}

    def _table(self) -> list[str]:
        cells = [[name for name, _ in _COLUMNS] + [""]]
        for row in self.trials:
            values = (row.workers, row.batch_size, row.threads_per_worker, row.docs_per_s, row.mb_per_s,
                      row.tokens_per_s, row.peak_rss_mb, row.startup_s, row.runs)
            mark = "<- best" if row is self.best else "within noise" if row.within_noise else ""
            cells.append([fmt.format(value) for (_, fmt), value in zip(_COLUMNS, values)] + [mark])
        widths = [max(len(line[i]) for line in cells) for i in range(len(_COLUMNS))]
        return ["  ".join(cell.rjust(width) for cell, width in zip(line, widths)) + "  " + line[-1] for line in cells]

    def report(self) -> str:
        """The table, fastest first, and what it rests on."""
        sample = self.sample
        where = "the whole input" if sample.whole_input else "the first documents of the input"
        basis = (f"spread of {self.noise_runs} runs of the fastest, at least {NOISE_FLOOR:.0%}" if self.noise_runs > 1
                 else "assumed: no configuration was run twice")
        lines = self._table() + [
            "",
            f"sample: {sample.documents:,} documents, {sample.bytes / 1e6:,.1f} MB of JSONL ({where}), read once; "
            f"rates leave out each trial's start-up, its first batch per worker and the final drain",
            f"noise: {self.noise:.1%} ({basis}); within it, fewer workers win",
        ]
        shortest = min(row.timed_s for row in self.trials)
        if shortest < SHORT_WINDOW_S:
            lines.append(f"note: some trials were timed over only {shortest:.2f} s; for steadier numbers give a "
                         "larger sample (--max-documents) or more time (--time-budget)")
        lines += [f"not measured: {c}: {reason}" for c, reason in self.not_measured]
        if self.skipped_records:
            lines.append(f"note: the sample has {self.skipped_records:,} bad record(s); corpus tokenize stops at the "
                         "first one unless given --on-error skip")
        lines.append(f"took {self.seconds:,.1f} s")
        return "\n".join(lines)
