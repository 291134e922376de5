"""The command groups' shared behaviour: every :class:`~corpus.core.errors.UserError` a command raises is caught
here, in one place, and printed as ``Error: <message>`` with its exit status (1 unless it says otherwise) — never a
traceback; so is a package missing that an extra of blendforge installs (torch for ``trainer run`` in a data-only
install), with the pip command."""

from __future__ import annotations

import importlib
from typing import Callable

import click

from corpus.core.errors import UserError
from corpus.core.optional import install_hint
from corpus.indexed.sidecar import tool_version

#: What every group of this project shows in ``--help``.
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}


class Group(click.Group):
    """A click group whose commands' user errors end in one line and exit status 1.

    ``lazy`` maps command names to ``"module:attribute"``: such a command's module is imported only when the
    command runs or help lists it, so ``corpus tokenize`` does not pay for inspect's and autotune's imports."""

    def __init__(self, *args, lazy: dict[str, str] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy and name not in self.commands:
            module, attribute = self.lazy[name].split(":")
            self.add_command(getattr(importlib.import_module(module), attribute), name)
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as error:
            failure = click.ClickException(str(error))
            failure.exit_code = error.exit_code
            raise failure from None
        except ModuleNotFoundError as error:  # ``trainer run`` in a data-only install: name the extra to add
            hint = install_hint(error.name or "")
            if hint is None:
                raise
            raise click.ClickException(f"{ctx.info_name} {ctx.invoked_subcommand} needs {error.name.split('.')[0]}, "
                                       f"which is not installed: {hint}") from None


def version_option(program: str) -> Callable:
    """``--version``: the installed blendforge version (the one every sidecar records), as ``PROGRAM, version X``."""
    return click.version_option(tool_version(), "--version", prog_name=program,
                                message="%(prog)s (blendforge), version %(version)s")
