"""The errors of the ``.bin/.idx`` format and its sidecar that callers tell apart: a malformed pair (the inspector
reports it as a finding), a sidecar that cannot be read (a reader goes on without it), a spec that matches no pair
(a blend names its key)."""

from __future__ import annotations

import os

from corpus.core.errors import UserError


class IndexFormatError(UserError, ValueError):
    """A ``.bin/.idx`` pair is malformed or inconsistent.

    ``path`` is the offending file; the message says what is wrong and, where possible, how to fix it.
    """

    def __init__(self, path: str | os.PathLike, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class SidecarError(UserError, ValueError):
    """A sidecar is not valid JSON, not an object, or holds values of the wrong type."""

    def __init__(self, path: str | os.PathLike, problem: str) -> None:
        self.path, self.problem = str(path), problem
        super().__init__(f"{path}: {problem}; delete it or re-run corpus tokenize")


class PrefixNotFound(UserError, FileNotFoundError):
    """A user-given dataset spec matched no ``.idx`` file."""
