"""``trainer plot RUN --out curves.png``: each blend source's training and validation loss against the tokens
trained, from a run's ``--metrics-jsonl``; ``--json`` prints where each source ended."""

from __future__ import annotations

import json

import click


@click.command("plot")
@click.argument("run", metavar="RUN_DIR_OR_METRICS", type=click.Path(exists=True))
@click.option("--out", type=click.Path(dir_okay=False),
              help="Image to write the curves to (type from its suffix: .png, .svg, .pdf…); needs matplotlib "
                   "(pip install 'blendforge[plot]').")
@click.option("--json", "as_json", is_flag=True,
              help="Print the per-source summary as JSON (last loss, validation loss, tokens, share vs weight).")
def plot(run: str, out: str | None, as_json: bool) -> None:
    """Per-source loss curves of a run. RUN_DIR_OR_METRICS: its --metrics-jsonl file, or the folder holding it."""
    from corpus.core.figures import require_image
    from trainer.run.curves import format_summary, metrics_file, read_curves, summary, write_curves

    if out:
        require_image(out, "trainer plot --out")  # before reading anything
    curves = read_curves(metrics_file(run))
    if out:
        write_curves(curves, out)
    result = summary(curves)
    click.echo(json.dumps(result) if as_json else format_summary(result) + (f"\nwrote {out}" if out else ""))
