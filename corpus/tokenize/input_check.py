"""The user's own input checked while the run proceeds, off its critical path.

The check of a tokenizer (:mod:`corpus.tokenizers.select`) covers hard cases and special strings and is
cached; this one covers the text at hand. The first records the fast encoder writes (up to a record and a
byte budget; larger records are skipped) are encoded again by the reference library in a thread beside
the pipeline and compared with what was written. A difference stops the run before anything is final
(:class:`EncoderMismatch`, naming the records that differ), and is remembered so the next run with this
tokenizer takes the reference library. It runs where the reference is loaded anyway (the first run with a
tokenizer, whose check is not cached yet) and, with ``--check-input``, on every run: loading the reference
is the start-up the cached check saves (bench/RESULTS.md has both).

NOTE: a thread, not a process: loading the reference holds the GIL (HF tokenizers, tiktoken), which a
spawned process would avoid, but a process costs an interpreter start and imports on top of the load, on
cores the pipeline keeps busy, and needs a ``__main__`` guard in every script calling :func:`tokenize`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from queue import SimpleQueue

import numpy as np

from corpus.readers import ColumnPayload, LinePayload, RawBatch, describe_location, extract
from corpus.tokenize.errors import EncoderMismatch
from corpus.tokenize.worker import BatchEncoder, EncodedBatch, WorkerSpec, pack
from corpus.tokenizers import TextTokenizer, TokenizerConfig, build_tokenizer

log = logging.getLogger(__name__)

#: Differing records named in the error.
SHOWN = 3


@dataclass
class _Pending:
    """Records of one batch for the reference: where they are, and what the fast encoder wrote."""

    batch: RawBatch
    picks: list[int]
    """Their indices in the batch."""
    tokens: list[list[np.ndarray]]
    """``tokens[k][j]``: what was written for key k of pick j."""


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

    def __init__(self, reference: TextTokenizer | TokenizerConfig, keys: list[str], records: int, max_bytes: int,
                 fast_name: str, eod: int | None, dtype: np.dtype) -> None:
        """Start the thread. ``reference``: the reference tokenizer, or its config (the thread loads it);
        ``fast_name``: the encoder checked; ``eod`` and ``dtype``: how the run packs its documents."""
        self.keys = tuple(keys)
        self.records_left, self.bytes_left = records, max_bytes
        self.checked_records = self.checked_bytes = 0
        self.unavailable = ""
        """Why the reference could not check (empty while it can)."""
        self.differences: list[tuple[str, str]] = []
        """(where, what) of each record that differs: ``("data.jsonl:17", "...")``."""
        self.fast_name, self.eod, self.dtype = fast_name, eod, np.dtype(dtype)
        self._queue: SimpleQueue = SimpleQueue()
        self._stopped = False
        self._thread = threading.Thread(target=self._work, args=(reference,), name="blendforge-input-check",
                                        daemon=True)
        self._thread.start()

    def _work(self, reference: TextTokenizer | TokenizerConfig) -> None:
        """The thread: the reference's ids for every queued item, compared as they come."""
        try:
            if isinstance(reference, TokenizerConfig):
                reference = build_tokenizer(reference.replace(encoder="reference"))
            # Unpacked ids (no EOD, int64), packed as the run packs when compared.
            encoder = BatchEncoder(WorkerSpec(reference.config, 1, self.keys, None, "int64"), reference)
        except Exception as error:  # noqa: BLE001 - the run goes on, unchecked, and says so
            self.unavailable = f"the reference library could not be built ({type(error).__name__}: {error})"
            return
        try:
            while (item := self._queue.get()) is not None and not self._stopped:
                self._differences(item, encoder.encode(_subset(item.batch.payload, item.picks)))
        except Exception as error:  # noqa: BLE001 - as above
            self.unavailable = f"the reference library failed ({type(error).__name__}: {error})"

    def offer(self, batch: RawBatch, result: EncodedBatch) -> None:
        """Queue some of the batch's written records for the reference (until the budget is spent); raises
        :class:`EncoderMismatch` once a difference was found."""
        if self.records_left > 0 and self.bytes_left > 0:
            self._send(batch, result)
        self._raise_found()

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
        if picks:
            self.records_left -= len(picks)
            self.checked_records += len(picks)
            self._queue.put(_Pending(batch, picks, _written(result, good, picks)))

    def _raise_found(self) -> None:
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
        self._queue.put(None)
        self._thread.join()
        self._raise_found()
        if self.unavailable:
            log.warning("input check not run: %s", self.unavailable)
            return f"input check: not run ({self.unavailable})"
        return (f"input check: ids identical to the reference on the first {self.checked_records} records "
                f"({self.checked_bytes / 1e6:.1f} MB) of this run")

    def close(self) -> None:
        """Stop the thread after its current item (what is still queued is dropped)."""
        self._stopped = True
        self._queue.put(None)
