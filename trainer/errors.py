"""Errors the trainer raises for people: each says what went wrong, where, and which knob fixes it.

All derive from :class:`corpus.core.errors.CorpusError`, so the CLI prints the message alone and exits 1.
"""

from __future__ import annotations

from corpus.core.errors import CorpusError


class TrainerError(CorpusError):
    """Base class of the trainer's user-facing errors."""


class ConfigError(TrainerError, ValueError):
    """A training configuration (YAML file, flag or preset) is invalid; the message names the key or flag."""


class CheckpointError(TrainerError):
    """A checkpoint cannot be saved or loaded (missing, incomplete, or incompatible with this run)."""


class TrainingDiverged(TrainerError, FloatingPointError):
    """The loss or gradient norm became NaN/inf; the step was not applied and no checkpoint was written."""


class OutOfMemory(TrainerError, MemoryError):
    """The device ran out of memory; the message names the knobs that reduce memory use."""
