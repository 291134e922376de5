"""``trainer export --hf DIR --load CKPT``: a checkpoint as a transformers Llama model; its flags come from
:class:`~trainer.config.commands.ExportConfig`."""

from __future__ import annotations

import click

from cli.config_options import build_config, config_options, given_values
from trainer.config.commands import ExportConfig

#: What the command does differently from the generated options: paths checked by click before anything runs.
SETTINGS = {"out_dir": {"type": click.Path(file_okay=False)}, "load": {"type": click.Path(exists=True)}}


@click.command("export", params=config_options(ExportConfig, settings=SETTINGS))
@click.pass_context
def export(ctx: click.Context, **options) -> None:
    """Export a checkpoint for transformers (Llama architecture)."""
    from trainer.checkpoint.export import export_hf

    config: ExportConfig = build_config(ExportConfig, given_values(ctx, options))
    files = export_hf(config.load, config.out_dir, config.dtype)
    click.echo(f"wrote {', '.join(files)} to {config.out_dir}")
