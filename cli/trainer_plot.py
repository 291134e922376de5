"""``trainer plot RUN --out curves.png``: each blend source's training and validation loss against the tokens
trained, from a run's ``--metrics-jsonl``; ``--json`` prints where each source ended. Its flags come from
:class:`~trainer.config.commands.PlotConfig`."""

from __future__ import annotations

import json

import click

from cli.config_options import build_config, config_options, given_values
from trainer.config.commands import PlotConfig

#: What the command does differently from the generated options: paths checked by click before anything runs.
SETTINGS = {"run": {"type": click.Path(exists=True)}, "out": {"type": click.Path(dir_okay=False)}}


@click.command("plot", params=config_options(PlotConfig, settings=SETTINGS))
@click.option("--json", "as_json", is_flag=True,
              help="Print the per-source summary as JSON (last loss, validation loss, tokens, share vs weight).")
@click.pass_context
def plot(ctx: click.Context, as_json: bool, **options) -> None:
    """Per-source loss curves of a run. RUN_DIR_OR_METRICS: its --metrics-jsonl file, or the folder holding it."""
    from corpus.core.figures import require_image
    from trainer.run.curves import format_summary, metrics_file, read_curves, summary, write_curves

    config: PlotConfig = build_config(PlotConfig, given_values(ctx, options))
    if config.out:
        require_image(config.out, "trainer plot --out")  # before reading anything
    curves = read_curves(metrics_file(config.run))
    if config.out:
        write_curves(curves, config.out)
    result = summary(curves)
    click.echo(json.dumps(result) if as_json else format_summary(result) + (f"\nwrote {config.out}" if config.out
                                                                             else ""))
