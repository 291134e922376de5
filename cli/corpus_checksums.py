"""``corpus add-checksums``: record checksums in the sidecars of pairs written without them; its arguments come from
:class:`~corpus.inspect.checksums.AddChecksumsConfig`."""

from __future__ import annotations

import click

from cli.config_options import build_config, config_options, given_values
from corpus.inspect.checksums import AddChecksumsConfig, add_checksums


@click.command("add-checksums", params=config_options(AddChecksumsConfig))
@click.pass_context
def add_checksums_command(ctx: click.Context, **options) -> None:
    """Record the checksums `corpus inspect --check --deep` compares in the sidecars of pairs written without them.

    DATASETS are prefixes, .idx/.bin paths, globs or directories. Each pair must pass every check first; checksums
    already recorded are compared, never replaced; each sidecar is replaced atomically.
    """
    config: AddChecksumsConfig = build_config(AddChecksumsConfig, given_values(ctx, options))
    for result in add_checksums(config.datasets):
        if not result.added:
            click.echo(f"{result.prefix}: checksums already recorded and matching")
        else:
            files = " and ".join(f".{kind}" for kind in result.added)
            where = "a new sidecar" if result.new_sidecar else "the sidecar"
            click.echo(f"{result.prefix}: recorded the checksums of the {files} in {where}")
