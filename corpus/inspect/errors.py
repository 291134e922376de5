"""The inspector's error that ``corpus inspect`` tells apart from a finding: a dataset cannot be inspected as
asked."""

from __future__ import annotations

from corpus.core.errors import UserError


class InspectError(UserError):
    """A dataset cannot be inspected as asked (unreadable sidecar, bad option combination)."""
