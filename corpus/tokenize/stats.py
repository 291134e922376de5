"""Counters of a tokenize run and the statistics reported at the end (summary, ``--stats-json``)."""

from __future__ import annotations

import dataclasses
import json
import resource
from dataclasses import dataclass, field
from pathlib import Path

from corpus.core.atomic_write import write_atomically
from corpus.core.disk import OutputError, guard


@dataclass
class Counters:
    """Running totals; saved in every checkpoint so a resumed run reports the whole job."""

    records_read: int = 0
    """Records seen (blank lines are not records)."""
    records_written: int = 0
    """Records written as one document in every key's output."""
    records_skipped: int = 0
    """Bad records skipped (``--on-error skip``), each listed in ``P.skipped.jsonl``."""
    blank_lines: int = 0
    input_bytes: int = 0
    """Input file bytes done, as stored (compressed for .gz/.zst and Parquet): the basis of file MB/s and the ETA."""
    record_bytes: int = 0
    """The records read, decompressed (JSONL lines; Parquet: the keys' text): the basis of record MB/s, what
    ``corpus autotune-workers`` measures."""
    tokens: dict[str, int] = field(default_factory=dict)
    """Tokens written per json key, EOD included."""

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens.values())

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def plus(self, other: "Counters") -> "Counters":
        """The totals of two consecutive stretches of input (two parts of a run)."""
        sums = {name: getattr(self, name) + getattr(other, name) for name in
                ("records_read", "records_written", "records_skipped", "blank_lines", "input_bytes", "record_bytes")}
        tokens = {key: self.tokens.get(key, 0) + other.tokens.get(key, 0) for key in {**self.tokens, **other.tokens}}
        return Counters(**sums, tokens=tokens)


@dataclass
class RunStats:
    """What a finished run did and how fast (rates over this process's own work, so they stay
    meaningful after a resume)."""

    counters: Counters
    seconds: float
    rate_records: int
    rate_bytes: int
    rate_tokens: int
    rate_record_bytes: int
    input_bytes_total: int
    encoder: str
    encoder_reason: str
    shard: dict
    outputs: list[str]
    resumed: bool
    peak_rss_mb: float
    peak_worker_rss_mb: float
    skipped_file: str | None = None
    processes: int = 1
    """Processes that wrote the run (this one included), or that encoded its one part."""
    parts: int = 1
    """Parts the input was cut into."""
    startup_seconds: float = 0.0
    """Of ``seconds``, the start-up: inputs listed, tokenizer built, fast encoder checked."""

    @property
    def documents_per_second(self) -> float:
        return self.rate_records / self.seconds if self.seconds else 0.0

    @property
    def megabytes_per_second(self) -> float:
        """Input file MB/s (compressed bytes for .gz/.zst and Parquet)."""
        return self.rate_bytes / 1e6 / self.seconds if self.seconds else 0.0

    @property
    def record_megabytes_per_second(self) -> float:
        """Decompressed record MB/s (the figure ``corpus autotune-workers`` reports)."""
        return self.rate_record_bytes / 1e6 / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.rate_tokens / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data.update(documents_per_second=self.documents_per_second, megabytes_per_second=self.megabytes_per_second,
                    record_megabytes_per_second=self.record_megabytes_per_second,
                    tokens_per_second=self.tokens_per_second)
        return data

    def summary(self) -> str:
        """The human summary printed at the end of ``corpus tokenize``."""
        c = self.counters
        lines = [
            f"records: {c.records_read:,} read, {c.records_written:,} written, {c.records_skipped:,} skipped"
            + (f" (listed in {self.skipped_file})" if self.skipped_file else "")
            + (f", {c.blank_lines:,} blank lines ignored" if c.blank_lines else ""),
            "tokens: " + ", ".join(f"{key} {count:,}" for key, count in c.tokens.items()),
            f"speed: {self.megabytes_per_second:.2f} MB/s of input files, {self.record_megabytes_per_second:.2f} MB/s "
            f"of records decompressed, {self.documents_per_second:,.0f} docs/s, "
            f"{self.tokens_per_second:,.0f} tokens/s over {self.seconds:.1f} s ({self.startup_seconds:.1f} s start-up)"
            + (" (this resumed part)" if self.resumed else ""),
            f"encoder: {self.encoder_reason}",
            "outputs: " + ", ".join(self.outputs),
        ]
        return "\n".join(lines)


def own_peak_rss_kb() -> int:
    """Peak resident memory of this process itself, in KB: ``VmHWM`` where Linux has it.

    NOTE: not ``ru_maxrss``, which Linux carries over from the parent through fork and exec (and
    multiprocessing's spawn): a run started from a 1.6 GB process would report 1.6 GB.
    """
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def peak_rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    """Peak resident memory of this process (:func:`own_peak_rss_kb`) or, with ``RUSAGE_CHILDREN``, of
    its largest waited-for child (which includes what the child inherited at its start), in MB."""
    if who == resource.RUSAGE_SELF:
        return own_peak_rss_kb() / 1024
    return resource.getrusage(who).ru_maxrss / 1024


def write_stats_json(path: str, stats: RunStats) -> None:
    """Write ``--stats-json`` atomically."""
    target = Path(path)
    try:
        with guard(target):
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(target, json.dumps(stats.to_dict(), indent=2) + "\n")
    except OutputError as error:
        raise error.for_command("--stats-json") from None
