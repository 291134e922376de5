"""The tokenize run's errors that callers tell apart: a bad record or an encoder mismatch ends a run's part with a
report, a resume that cannot continue starts over, a worker that died names ``--resume``."""

from __future__ import annotations

from corpus.core.errors import UserError
from corpus.readers import describe_location


class BadRecordError(UserError):
    """A bad input record under ``--on-error fail``. ``location`` and ``reason`` say where and what; a location in a
    slice numbered from its start (:attr:`corpus.readers.Slice.relative_lines`) carries that slice's ``start``."""

    def __init__(self, location: dict, reason: str, prefix: str, slice_start: int | None = None,
                 message: str | None = None) -> None:
        self.location, self.reason, self.prefix, self.slice_start = location, reason, prefix, slice_start
        super().__init__(message or bad_record_message(location, reason, prefix))

    def __reduce__(self):  # raised in a worker process, re-raised in the run's
        return type(self), (self.location, self.reason, self.prefix, self.slice_start, str(self))


def bad_record_message(location: dict, reason: str, prefix: str) -> str:
    """What a bad record under ``--on-error fail`` says: where, why, and how to go on."""
    return (f"{describe_location(location)}: {reason} (--on-error skip skips bad records and lists them in "
            f"{prefix}.skipped.jsonl)")


class EncoderMismatch(UserError):
    """The fast encoder wrote other ids than the reference library gives for the same records."""


class WorkerDied(UserError):
    """A worker process ended abruptly (killed, out of memory): an encoder here, or a part's (``pool``)."""


class ResumeError(UserError):
    """``--resume`` cannot continue the interrupted run (different options or inputs, damaged state)."""
