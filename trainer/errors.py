"""The trainer's errors that are not a config mistake (those are :class:`corpus.core.errors.ConfigError`):
each says what went wrong, where, and which knob fixes it. All derive from :class:`corpus.core.errors.UserError`,
so the CLI prints the message alone and exits 1."""

from __future__ import annotations

from corpus.core.errors import UserError


class CheckpointError(UserError):
    """A checkpoint cannot be saved or loaded (missing, incomplete, or incompatible with this run)."""


class TrainingDiverged(UserError, FloatingPointError):
    """The loss or gradient norm became NaN/inf; the step was not applied and no checkpoint was written."""


class OutOfMemory(UserError, MemoryError):
    """The device ran out of memory; the message names the knobs that reduce memory use."""
