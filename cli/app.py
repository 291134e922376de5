"""The command groups' shared behaviour: every :class:`~corpus.core.errors.UserError` a command raises is caught
here, in one place, and printed as ``Error: <message>`` with exit status 1 — never a traceback."""

from __future__ import annotations

from typing import Callable

import click

from corpus.core.errors import UserError
from corpus.indexed.sidecar import tool_version

#: What every group of this project shows in ``--help``.
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}


class Group(click.Group):
    """A click group whose commands' user errors end in one line and exit status 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as error:
            raise click.ClickException(str(error)) from None


def version_option(program: str) -> Callable:
    """``--version``: the installed blendforge version (the one every sidecar records), as ``PROGRAM, version X``."""
    return click.version_option(tool_version(), "--version", prog_name=program,
                                message="%(prog)s (blendforge), version %(version)s")
