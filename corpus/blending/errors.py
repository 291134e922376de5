"""The blended datasets' error that callers tell apart: a sample asked for out of order (an ``IndexError``, as
indexing past what a sequence holds is)."""

from __future__ import annotations

from corpus.core.errors import UserError


class DrawError(UserError, IndexError):
    """A blended sample of an online split asked for out of order (before what it holds, or at a weight change
    past it)."""
