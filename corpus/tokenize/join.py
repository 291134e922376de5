"""Joining the parts of a run into its outputs, in order, while later parts are still being written.

A thread appends each finished part to the run's outputs as soon as every part before it is in: the ``.bin`` by the
kernel (:mod:`corpus.indexed.append`), lengths as they are, document indices shifted, the skipped-records list with
line numbers made whole (a part cut inside a JSONL file numbers its lines from the cut; the joiner knows how many
lines came before, from the parts before it). A part's files are deleted as soon as it is joined (its ``.bin`` is
still being copied from the descriptor the copy holds open), so the parts never take much more disk than the parts
being written, and nothing is left to delete at the end. Every ``--checkpoint-interval`` the joiner makes the outputs
durable and records how many parts are in (the run's checkpoint): a run resumed after a crash reopens the outputs
there, writes again the parts joined after it (their files are gone) and joins the rest.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Callable

from corpus.tokenize.outputs import Outputs
from corpus.tokenize.part import PartResult, fresh_counters
from corpus.tokenize.plan import Part
from corpus.tokenize.stats import Counters


def parts_folder(stage: str) -> Path:
    """Where the parts of the run writing ``stage`` keep their files: next to the outputs, removed at the end."""
    return Path(f"{stage}.tokenize-parts")


def part_prefix(stage: str, index: int) -> str:
    """The prefix of part ``index``'s files."""
    return str(parts_folder(stage) / f"{index:05d}")


def remove_parts(stage: str) -> None:
    shutil.rmtree(parts_folder(stage), ignore_errors=True)


def remove_part(stage: str, index: int) -> None:
    """Delete every file of part ``index`` (its outputs and its checkpoint)."""
    for path in parts_folder(stage).glob(f"{index:05d}[._]*"):
        path.unlink(missing_ok=True)


class Joiner:
    """Appends finished parts to ``outputs`` in order, in a thread (see the module docstring)."""

    def __init__(self, stage: str, outputs: Outputs, parts: list[Part], state: dict | None, interval: float,
                 save: Callable[[dict], None]) -> None:
        """``state``: the run's checkpoint to continue from (None: nothing joined yet); ``save(state)`` records a
        checkpoint of the run (after the outputs were made durable)."""
        self.stage, self.outputs, self.parts, self.interval, self.save = stage, outputs, parts, interval, save
        self.joined = state["joined"] if state else 0
        self.counters = Counters(**state["counters"]) if state else fresh_counters(list(outputs.writers))
        self.line_ends: dict[str, int] = dict(state["line_ends"]) if state else {}
        """Per JSONL file, the number of the last line joined so far."""
        self.peak_rss_kb = 0
        self._finished: dict[int, PartResult] = {}
        self._last_checkpoint = time.monotonic()
        self._wake = threading.Condition()
        self._stopping = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="blendforge-join", daemon=True)
        self._thread.start()

    @property
    def done(self) -> bool:
        return self.joined == len(self.parts)

    def offer(self, index: int, result: PartResult) -> None:
        """A part finished: join it once the parts before it are in."""
        with self._wake:
            self._finished[index] = result
            self._wake.notify()

    def _next(self) -> PartResult | None:
        with self._wake:
            while not self._stopping and self.joined not in self._finished:
                self._wake.wait()
            return None if self._stopping else self._finished.pop(self.joined)

    def _run(self) -> None:
        try:
            while not self.done:
                result = self._next()
                if result is None:
                    return
                self._join(self.parts[self.joined], result)
                if time.monotonic() - self._last_checkpoint >= self.interval:
                    self.checkpoint()
        except BaseException as error:  # noqa: BLE001 - raised in the run's thread by :meth:`raise_error`
            self.error = error

    def _join(self, part: Part, result: PartResult) -> None:
        first = part.slices[0]
        shift = (first.file.path, self.line_ends.get(first.file.path, 0)) if first.relative_lines else None
        self.outputs.append_written(part_prefix(self.stage, part.index), result.outputs, shift)
        for piece, last_line in zip(part.slices, result.lines):
            if piece.file.format == "jsonl":
                self.line_ends[piece.file.path] = last_line + (shift[1] if piece is first and shift else 0)
        self.counters = self.counters.plus(result.counters)
        self.peak_rss_kb = max(self.peak_rss_kb, result.peak_rss_kb)
        self.joined += 1
        remove_part(self.stage, part.index)

    def record(self) -> dict:
        """The run's checkpoint fields the joiner owns."""
        return {"joined": self.joined, "counters": self.counters.to_dict(), "line_ends": self.line_ends}

    def checkpoint(self, phase: str = "running") -> None:
        """Make the outputs durable, then record the run's progress."""
        self.save({"phase": phase, **self.record(), **self.outputs.checkpoint()})
        self._last_checkpoint = time.monotonic()

    def raise_error(self) -> None:
        """Raise what stopped the joining thread, if anything did."""
        if self.error is not None:
            raise self.error

    def wait(self) -> None:
        """Wait until every part is joined (or the thread failed: then raise its error)."""
        self._thread.join()
        self.raise_error()

    def stop(self) -> None:
        """Stop the thread after the part it is joining (the outputs stay as they are, for ``--resume``)."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join()
