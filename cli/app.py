"""The command groups' shared behaviour: every :class:`~corpus.core.errors.UserError` a command raises is caught
here, in one place, and printed as ``Error: <message>`` with exit status 1 — never a traceback."""

from __future__ import annotations

import click

from corpus.core.errors import UserError

#: What every group of this project shows in ``--help``.
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}


class Group(click.Group):
    """A click group whose commands' user errors end in one line and exit status 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as error:
            raise click.ClickException(str(error)) from None
