"""``trainer``: train GPT models from blend files. A thin skin over the ``trainer`` package."""

from __future__ import annotations

import logging

import click

from cli.app import CONTEXT, Group, version_option
from cli.trainer_export import export
from cli.trainer_plot import plot
from cli.trainer_run import run


@click.group(cls=Group, context_settings=CONTEXT)
@version_option("trainer")
def main() -> None:
    """Train GPT models on blends of token files."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")


main.add_command(run)
main.add_command(export)
main.add_command(plot)


if __name__ == "__main__":
    main()
