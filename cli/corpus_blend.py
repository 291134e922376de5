"""``corpus blend FILE``: check a blend, plan it, prebuild its index maps, or print its samples.

No torch is imported on this path, so a lookup in a warm cache takes well under a second.
"""

from __future__ import annotations

import json

import click

from cli.config_options import build_config, config_options, given_values
from corpus.blending.request import BlendRequest
from corpus.core.errors import ConfigError

#: What ``corpus blend`` does differently from the generated options: values parsed from their spelling.
SETTINGS = {"sample_range": {"type": str}, "file": {"type": click.Path(dir_okay=False)}}


@click.command("blend", params=config_options(BlendRequest, settings=SETTINGS))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (one JSON line per sample).")
@click.pass_context
def blend(ctx: click.Context, as_json: bool, **options) -> None:
    """Validate blend FILE and plan, prebuild or show its samples."""
    from corpus.blending import report as blend_report
    from corpus.blending.schema import load_blend

    try:
        request: BlendRequest = build_config(BlendRequest, given_values(ctx, options))
    except ConfigError as error:  # a combination of flags that cannot be run: a usage error, as click's own
        raise click.UsageError(str(error)) from None
    config = load_blend(request.file, seq_length=request.seq_length, seed=request.seed,
                        storage_options=request.storage_options)
    counts, split = request.counts(), request.split
    if request.sample_range is not None:
        requested = counts.of(split) if counts else None
        for sample in blend_report.show_samples(config, split, requested, *request.sample_range,
                                                decode=not request.ids):
            click.echo(json.dumps(sample, separators=(",", ":")) if as_json else _sample_line(sample))
    elif request.build:
        result = blend_report.prebuild(config, counts, request.required)
        click.echo(json.dumps(result) if as_json else "\n".join(
            f"{name}: {r['samples']:,} samples, {r['entries_built']} cache "
            f"entr{'y' if r['entries_built'] == 1 else 'ies'} "
            f"built, {r['seconds']} s" for name, r in result.items()))
    else:
        reports = blend_report.dry_run(config, counts, request.required)
        click.echo(json.dumps(blend_report.report_to_json(reports)) if as_json
                   else blend_report.format_report(reports, config))


def _sample_line(sample: dict) -> str:
    """One line per sample: where its documents start, then its text (newlines escaped, so each sample stays
    one line) or its ids."""
    tokens = sample["tokens"]
    if "text" in sample:
        shown = json.dumps(sample["text"], ensure_ascii=False)
    else:
        shown = " ".join(map(str, tokens[:12])) + (" … " + " ".join(map(str, tokens[-4:])) if len(tokens) > 16 else "")
    starts = ",".join(f"{at}" + (f"(+{offset})" if offset else "") for at, _, offset, _ in sample["documents"])
    padding = f", padding {sample['padding']}" if sample["padding"] else ""
    phase = f"phase {sample['phase']} " if "phase" in sample else ""
    return (f"{sample['index']:>8} {phase}{sample['source']:<16} [documents at {starts}{padding}] {len(tokens)} "
            f"tokens: {shown}")
