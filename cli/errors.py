"""Turn errors meant for people into a one-line message and a non-zero exit, never a traceback."""

from __future__ import annotations

import functools
from typing import Callable, TypeVar

import click

from corpus.core.errors import CorpusError

F = TypeVar("F", bound=Callable)


def friendly_errors(command: F) -> F:
    """Decorate a click command so a :class:`CorpusError` prints ``error: <message>`` and exits 1."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except CorpusError as error:
            raise click.ClickException(str(error)) from None

    return wrapper  # type: ignore[return-value]
