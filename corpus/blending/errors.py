"""The error every blend mistake raises (one class, so the schema and the schedule it holds share it)."""

from __future__ import annotations

from corpus.core.errors import ConfigError


class BlendError(ConfigError):
    """A blend file (or a blend built in Python) is wrong; the message names file, line, key, fix."""
