"""Writing one part of a run: read its slices, encode them, write its ``.bin/.idx`` outputs, checkpoint.

A run of one part writes straight into its outputs (:mod:`corpus.tokenize.run` finalizes them); a part of a run of
several writes files of its own that the run joins in order (:mod:`corpus.tokenize.join`). Either way the part keeps
a checkpoint beside its files (where its reading resumes, the sizes of its files, its counters), saved only after
its files were made durable, so a part resumed after ``kill -9`` ends byte-identical to one never stopped.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from corpus.indexed.handover import file_crc32
from corpus.readers import RawBatch, ReadOptions, read_slices
from corpus.tokenize import resume_state as checkpoints
from corpus.tokenize.errors import BadRecordError, ResumeError
from corpus.tokenize.executor import encode_in_pool, encode_inline
from corpus.tokenize.outputs import Outputs, output_prefix_for
from corpus.tokenize.plan import Part
from corpus.tokenize.stats import Counters
from corpus.tokenize.worker import BatchEncoder, EncodedBatch, WorkerSpec

log = logging.getLogger(__name__)

#: ``report(counters, peak_rss_kb)`` after each batch written: the part's counters so far and the encoding
#: process's peak RSS.
Report = Callable[[Counters, int], None]
#: ``offer(batch, result)``: a written batch handed to the input check (:mod:`corpus.tokenize.input_check`).
Offer = Callable[[RawBatch, EncodedBatch], None]


@dataclass(frozen=True)
class PartTask:
    """Everything a process needs to write one part exactly as the run decided (picklable)."""

    part: Part
    prefix: str
    """Where the part's files go: the run's own output prefix (one part), or the part's prefix in the run's parts
    folder."""
    spec: WorkerSpec
    batch_size: int
    batch_bytes: int
    on_error: str
    checkpoint_interval: float
    run_prefix: str
    """The run's output prefix, named in messages (the skipped-records list)."""
    encoder_processes: int = 0
    """0: encode in this process (threads); N: in N encoder processes beside this one's reading."""


@dataclass
class PartResult:
    """What a finished part wrote (its checkpoint once done): its counters, its outputs as
    :meth:`corpus.tokenize.outputs.Outputs.written` handed them over (counts and the checksum of every file), the number
    of the last line of each of its slices in the slice's own numbering (JSONL), and its process's peak RSS."""

    counters: Counters
    outputs: dict = field(default_factory=dict)
    lines: list[int] = field(default_factory=list)
    peak_rss_kb: int = 0

    def record(self) -> dict:
        return {"counters": self.counters.to_dict(), "outputs": self.outputs, "lines": self.lines,
                "peak_rss_kb": self.peak_rss_kb}

    @classmethod
    def from_record(cls, record: dict) -> "PartResult":
        return cls(Counters(**record["counters"]), record["outputs"], record["lines"], record["peak_rss_kb"])


def fresh_counters(keys: tuple[str, ...] | list[str]) -> Counters:
    """The counters of nothing written yet, one token count per key."""
    return Counters(tokens=dict.fromkeys(keys, 0))


class PartWriting:
    """Ordered writing of one part: the bad-record policy, counters, checkpoints."""

    def __init__(self, task: PartTask, outputs: Outputs, state: dict | None, save: Callable[[dict], None],
                 offer: Offer | None = None) -> None:
        """``save(state)``: record a checkpoint (after the outputs were made durable); ``offer``: hand each written
        batch to the input check."""
        self.task, self.outputs, self.save, self.offer = task, outputs, save, offer
        self.counters = Counters(**state["counters"]) if state else fresh_counters(task.spec.keys)
        self.lines = list(state.get("lines", [])) if state else []
        self.lines += [0] * (len(task.part.slices) - len(self.lines))
        self.last_checkpoint = time.monotonic()
        self.worker_rss_kb = 0

    def _bad(self, batch: RawBatch, result: EncodedBatch) -> list[tuple[dict, str]]:
        found = [(batch.location(batch.numbers[index]), reason) for index, reason in result.bad]
        if batch.read_error:
            found.append((batch.location(batch.error_number), batch.read_error))
        return found

    def consume(self, batch: RawBatch, result: EncodedBatch) -> None:
        """Write one encoded batch (or stop at its first bad record under ``--on-error fail``)."""
        bad = self._bad(batch, result)
        if bad and self.task.on_error == "fail":
            piece = self.task.part.slices[batch.slice_index]
            raise BadRecordError(*bad[0], self.task.run_prefix, piece.start if piece.relative_lines else None)
        for location, reason in bad:
            self.outputs.skipped.add(location, reason)
        self.outputs.add(result.tokens, result.lengths)
        if self.offer:
            self.offer(batch, result)
        counters = self.counters
        counters.records_read += len(batch.payload) + bool(batch.read_error)
        counters.records_skipped += len(bad)
        counters.records_written += len(batch.payload) - len(result.bad)
        counters.blank_lines += batch.blank_lines
        counters.input_bytes = batch.progress
        counters.record_bytes += batch.record_bytes
        for key, flat in zip(self.task.spec.keys, result.tokens):
            counters.tokens[key] += len(flat)
        self.lines[batch.slice_index] = batch.lines_read
        self.worker_rss_kb = max(self.worker_rss_kb, result.peak_rss_kb)
        if time.monotonic() - self.last_checkpoint >= self.task.checkpoint_interval:
            self.checkpoint(vars(batch.resume))

    def checkpoint(self, resume: dict, phase: str = "running") -> None:
        """Make the outputs durable, then record where to resume (in that order)."""
        self.save({"phase": phase, "resume": resume, "counters": self.counters.to_dict(), "lines": self.lines,
                   **self.outputs.checkpoint()})
        self.last_checkpoint = time.monotonic()

    def hand_over(self) -> PartResult:
        """End the part: its outputs handed over for the join (flushed and closed), with what it counted."""
        return PartResult(self.counters, self.outputs.written(), self.lines, self.worker_rss_kb)


def encoded_batches(task: PartTask, encoder: BatchEncoder, state: dict | None
                    ) -> Iterator[tuple[RawBatch, EncodedBatch]]:
    """The part's batches from its checkpoint on, encoded, in input order."""
    batches = read_slices(list(task.part.slices), ReadOptions(list(task.spec.keys), task.batch_size,
                                                              task.batch_bytes),
                          checkpoints.resume_point(state) if state else None)
    if task.encoder_processes:
        return encode_in_pool(batches, task.spec, task.encoder_processes)
    return encode_inline(batches, encoder)


def write_part(writing: PartWriting, encoder: BatchEncoder, state: dict | None, report: Report | None = None) -> None:
    """Read, encode and write the part from ``state`` on (a fresh part when None: a part stopped before its first
    checkpoint has none, and is written from the start again)."""
    for batch, result in encoded_batches(writing.task, encoder, state):
        writing.consume(batch, result)
        if report:
            report(writing.counters, writing.worker_rss_kb)


def intact(prefix: str, written: dict) -> bool:
    """Whether a done part's files still hold what it handed over (their crc32s; a record without them, of an
    earlier version, is taken as not intact: the part is written again)."""
    try:
        files = [(f"{prefix}.skipped.jsonl.partial", written["skipped"]["crc32"])]
        for key, record in written["writers"].items():
            key_prefix = output_prefix_for(prefix, key)
            files += [(f"{key_prefix}.{name}.partial", digest) for name, digest in record["crc32"].items()]
        return all(file_crc32(path) == digest for path, digest in files)
    except (KeyError, FileNotFoundError):
        return False


def run_part(task: PartTask, encoder: BatchEncoder, report: Report | None = None, offer: Offer | None = None
             ) -> PartResult:
    """Write one part of a run of several into its own files (continuing from its checkpoint when it has one) and
    mark it done; a part found done already is not written again. Its files stay under their partial names for
    the join."""
    state = _part_state(task)
    if state is not None and state["phase"] == "done":
        result = PartResult.from_record(state["result"])
        if intact(task.prefix, result.outputs):
            return result
        log.warning("part %d of %s: its files differ from what it recorded (the machine went down?); writing it "
                    "again", task.part.index, task.run_prefix)
        state = None
    outputs = Outputs(task.prefix, list(task.spec.keys), encoder.dtype, state, part=True)
    writing = PartWriting(task, outputs, state, lambda record: checkpoints.save(task.prefix, record), offer)
    try:
        write_part(writing, encoder, state, report)
    except BadRecordError:
        outputs.abort()
        raise
    except BaseException:
        outputs.close()
        raise
    result = writing.hand_over()
    # NOTE: neither the files nor this record are synced (a part takes seconds; fsyncs on a busy disk would add a
    # good share of that): a killed process leaves them in the page cache, and after a machine that went down the
    # run finds the record missing or unreadable, or the files' checksums changed, and writes the part again.
    checkpoints.save(task.prefix, {"phase": "done", "result": result.record()}, durable=False)
    return result


def _part_state(task: PartTask) -> dict | None:
    """The part's checkpoint, or None to write it from the start (none yet, or one a machine going down left
    unreadable: its record of being done is not synced)."""
    try:
        return checkpoints.load(task.prefix)
    except ResumeError:
        log.warning("part %d of %s: its checkpoint %s is unreadable (the machine went down?); writing the part "
                    "again", task.part.index, task.run_prefix, checkpoints.state_path(task.prefix))
        return None
