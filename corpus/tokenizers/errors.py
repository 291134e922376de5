"""The tokenizers' errors that callers tell apart: a text that cannot be encoded (the pipeline applies its
``--on-error`` policy to the record), a tokenizer that cannot be written as Hugging Face files (an export goes on
without them). A wrong tokenizer option is a :class:`~corpus.core.errors.ConfigError`."""

from __future__ import annotations

from corpus.core.errors import UserError


class TokenizeError(UserError):
    """A text could not be encoded (e.g. NullTokenizer input that is not integers).

    ``index`` is the position of the offending text in the batch given to ``encode_batch`` so the
    pipeline can name the record and apply its ``--on-error`` policy.
    """

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(reason)
        self.index = index
        self.reason = reason


class NotExportable(UserError):
    """The tokenizer cannot be written as Hugging Face files (no text form, a converter missing, other ids); the
    message says why and what to do instead."""
