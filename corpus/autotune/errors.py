"""The autotuner's error that its sweep tells apart: one trial failed (the sweep names the candidate)."""

from __future__ import annotations

from corpus.core.errors import UserError


class TrialError(UserError):
    """A trial process failed (bad tokenizer file, crash); the message carries its own."""
