"""``trainer``: train GPT models from blend files. A thin skin over the ``trainer`` package."""

from __future__ import annotations

import logging

import click

from cli.app import CONTEXT, Group, version_option


@click.group(cls=Group, context_settings=CONTEXT, lazy={
    "run": "cli.trainer_run:run", "export": "cli.trainer_export:export", "plot": "cli.trainer_plot:plot"})
@version_option("trainer")
def main() -> None:
    """Train GPT models on blends of token files."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")


if __name__ == "__main__":
    main()
