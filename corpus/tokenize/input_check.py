"""The user's own input checked while the run proceeds, off its critical path.

The check of a tokenizer (:mod:`corpus.tokenizers.select`) covers hard cases and special strings and is
cached; this one covers the text at hand. The first records the fast encoder writes (up to a record and a
byte budget; larger records are skipped) are encoded again by the reference library in one spawned
process, started before the fast encoder is even built so that loading the reference overlaps the
start-up, and compared with what was written. A difference stops the run before anything is final
(:class:`EncoderMismatch`, naming the records that differ), and is remembered so the next run with this
tokenizer takes the reference library.
"""

from __future__ import annotations

import logging
import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import numpy as np

from corpus.core.errors import UserError
from corpus.readers import ColumnPayload, LinePayload, RawBatch, describe_location, extract
from corpus.tokenize.worker import EncodedBatch, WorkerSpec, encode_in_worker, pack, start_worker
from corpus.tokenizers import TokenizerConfig

log = logging.getLogger(__name__)

#: Differing records named in the error.
SHOWN = 3


class EncoderMismatch(UserError):
    """The fast encoder wrote other ids than the reference library gives for the same records."""


@dataclass
class _Pending:
    """Records of one batch sent to the reference: where they are, and what the fast encoder wrote."""

    batch: RawBatch
    picks: list[int]
    """Their indices in the batch."""
    tokens: list[list[np.ndarray]]
    """``tokens[k][j]``: what was written for key k of pick j."""
    future: Future


def _subset(payload: LinePayload | ColumnPayload, picks: list[int]) -> LinePayload | ColumnPayload:
    """The records ``picks`` of a payload, as a payload."""
    if isinstance(payload, LinePayload):
        return LinePayload([payload.lines[index] for index in picks])
    columns = [None if column is None else [column[index] for index in picks] for column in payload.columns]
    return ColumnPayload(columns, payload.problems, len(picks))


def _record_bytes(payload: LinePayload | ColumnPayload, index: int) -> int:
    if isinstance(payload, LinePayload):
        return len(payload.lines[index])
    return sum(len(column[index] or "") for column in payload.columns if column is not None)


def _written(result: EncodedBatch, good: list[int], picks: list[int]) -> list[list[np.ndarray]]:
    """What was written for each key of each pick (``good``: the batch's records that were written)."""
    position = {index: j for j, index in enumerate(good)}
    rows = []
    for flat, lengths in zip(result.tokens, result.lengths):
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        rows.append([flat[offsets[position[index]]:offsets[position[index] + 1]] for index in picks])
    return rows


class InputCheck:
    """The reference library's ids for the first records of a run, compared with the fast encoder's."""

    def __init__(self, tokenizer: TokenizerConfig, keys: list[str], records: int, max_bytes: int) -> None:
        """Start the reference process now (it loads the library while the run starts up); :meth:`expect`
        must follow once the fast encoder is chosen."""
        self.keys = tuple(keys)
        self.records_left, self.bytes_left = records, max_bytes
        self.checked_records = self.checked_bytes = 0
        self.pending: list[_Pending] = []
        self.unavailable = ""
        """Why the reference process could not check (empty while it can)."""
        self.differences: list[tuple[str, str]] = []
        """(where, what) of each record that differs: ``("data.jsonl:17", "...")``."""
        self.fast_name, self.eod, self.dtype = "", None, np.dtype(np.int64)
        # Unpacked ids (no EOD, int64): the run's EOD and dtype are known only once its tokenizer is built.
        spec = WorkerSpec(tokenizer.replace(encoder="reference"), 1, self.keys, None, "int64")
        self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=start_worker,
                                         initargs=(spec,))
        try:
            self._pool.submit(int)  # a first task makes the pool start its process at once
        except BrokenProcessPool as error:
            self._abandon(error)

    def expect(self, fast_name: str, eod: int | None, dtype: np.dtype) -> None:
        """The fast encoder's name and how the run packs its documents (EOD, dtype)."""
        self.fast_name, self.eod, self.dtype = fast_name, eod, np.dtype(dtype)

    def offer(self, batch: RawBatch, result: EncodedBatch) -> None:
        """Send some of the batch's written records to the reference (until the budget is spent), and
        compare what came back; raises :class:`EncoderMismatch` at the first difference found."""
        if self.records_left > 0 and self.bytes_left > 0:
            self._send(batch, result)
        self._compare(wait=False)

    def _send(self, batch: RawBatch, result: EncodedBatch) -> None:
        bad = {index for index, _ in result.bad}
        good = [index for index in range(len(batch.payload)) if index not in bad]
        picks = []
        for index in good:
            size = _record_bytes(batch.payload, index)
            if size <= self.bytes_left and len(picks) < self.records_left:
                picks.append(index)
                self.bytes_left -= size
                self.checked_bytes += size
        if not picks:
            return
        self.records_left -= len(picks)
        self.checked_records += len(picks)
        try:
            future = self._pool.submit(encode_in_worker, _subset(batch.payload, picks))
        except BrokenProcessPool as error:
            return self._abandon(error)
        self.pending.append(_Pending(batch, picks, _written(result, good, picks), future))

    def _abandon(self, error: Exception) -> None:
        """The reference process could not run: say so, and check nothing more (the tokenizer's check stands)."""
        self.unavailable = f"the reference process failed ({type(error).__name__}: {error})"
        log.warning("input check not run: %s; a script calling tokenize() must guard its start with "
                    "`if __name__ == \"__main__\":` (the check runs in a spawned process)", self.unavailable)
        self.records_left = self.bytes_left = 0
        self.pending.clear()

    def _compare(self, wait: bool) -> None:
        while self.pending and (wait or self.pending[0].future.done()):
            item = self.pending.pop(0)
            try:
                reference = item.future.result()
            except BrokenProcessPool as error:
                return self._abandon(error)
            self._differences(item, reference)
        if self.differences:
            raise EncoderMismatch(self.describe_difference())

    def _differences(self, item: _Pending, reference: EncodedBatch) -> None:
        for index, reason in reference.bad:
            self.differences.append((self._where(item, index), f"the reference library refused it ({reason})"))
        refused = {index for index, _ in reference.bad}
        kept = [j for j in range(len(item.picks)) if j not in refused]
        for k, key in enumerate(self.keys):
            flat, lengths = pack(reference.tokens[k], reference.lengths[k], self.dtype, self.eod)
            offsets = np.concatenate(([0], np.cumsum(lengths)))
            for row, j in enumerate(kept):
                want, got = flat[offsets[row]:offsets[row + 1]], item.tokens[k][j]
                if not np.array_equal(want, got):
                    self.differences.append((self._where(item, j), self._describe(item, j, key, got, want)))

    def _where(self, item: _Pending, j: int) -> str:
        return describe_location(item.batch.location(item.batch.numbers[item.picks[j]]))

    def _describe(self, item: _Pending, j: int, key: str, got: np.ndarray, want: np.ndarray) -> str:
        text = extract(_subset(item.batch.payload, [item.picks[j]]), [key]).texts[0][0]
        position = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        return (f"key {key}, text {text[:60]!r}: token {position} is "
                f"{got[position:position + 4].tolist()} from {self.fast_name}, {want[position:position + 4].tolist()} "
                "from the reference")

    def describe_difference(self) -> str:
        """The error a difference raises: the records that differ and what to do."""
        shown = "; ".join(f"{where} ({what})" for where, what in self.differences[:SHOWN])
        more = f" (and {len(self.differences) - SHOWN} more)" if len(self.differences) > SHOWN else ""
        return (f"the fast encoder ({self.fast_name}) and the reference library give different ids for {shown}{more}. "
                "Nothing was written; rerun (later runs with this tokenizer take the reference library), or pass "
                "--encoder reference")

    def remembered(self) -> str:
        """The reason later runs give for taking the reference library."""
        return f"gigatoken ids differed from the reference library at {self.differences[0][0]} in an earlier run"

    def finish(self) -> str:
        """Wait for every comparison (raising :class:`EncoderMismatch` on a difference) and say what was checked."""
        try:
            self._compare(wait=True)
        finally:
            self.close()
        if self.unavailable:
            return f"input check: not run ({self.unavailable})"
        return (f"input check: ids identical to the reference on the first {self.checked_records} records "
                f"({self.checked_bytes / 1e6:.1f} MB) of this run")

    def close(self) -> None:
        """Stop the reference process (pending comparisons are dropped)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
