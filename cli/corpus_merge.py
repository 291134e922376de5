"""``corpus merge``: concatenate many ``.bin/.idx`` pairs into one; its flags come from
:class:`~corpus.indexed.merge.MergeConfig`."""

from __future__ import annotations

import click

from cli.config_options import build_config, config_options, given_values
from corpus.indexed.merge import MergeConfig, merge


@click.command("merge", params=config_options(MergeConfig))
@click.pass_context
def merge_command(ctx: click.Context, **options) -> None:
    """Concatenate many .bin/.idx pairs into one, streaming, in the order given."""
    config: MergeConfig = build_config(MergeConfig, given_values(ctx, options))
    result = merge(config.inputs, config.output_prefix, config.storage_options)
    click.echo(
        f"merged {len(result.inputs)} inputs into {result.output_prefix}: "
        f"{result.num_documents} documents, {result.num_sequences} sequences, {result.num_tokens} tokens"
    )
