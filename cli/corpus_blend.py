"""``corpus blend FILE``: check a blend, plan it, prebuild its index maps, or print its samples.

No torch is imported on this path, so a lookup in a warm cache takes well under a second.
"""

from __future__ import annotations

import json

import click

from cli.options import storage_options_from, storage_options_option
from corpus.blending.index_maps import SPLIT_NAMES


def _parse_range(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    try:
        start, stop = (int(part) for part in value.split(":"))
    except ValueError:
        raise click.BadParameter(f"{value!r}: write START:STOP, e.g. 0:8") from None
    if not 0 <= start < stop:
        raise click.BadParameter(f"{value!r}: need 0 <= START < STOP")
    return start, stop


@click.command("blend")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--split", "split", type=click.Choice(SPLIT_NAMES), default="train", show_default=True,
              help="Split for --num-samples and --show-samples.")
@click.option("--num-samples", type=click.IntRange(min=0),
              help="Samples asked of --split (what the trainer asks: train-iters x global batch for train).")
@click.option("--train-iters", type=click.IntRange(min=1),
              help="With --global-batch-size: every split's count, as Megatron computes it.")
@click.option("--global-batch-size", type=click.IntRange(min=1), help="Samples per optimizer step (all ranks).")
@click.option("--eval-interval", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Steps between evaluations (valid count, with --train-iters).")
@click.option("--eval-iters", type=click.IntRange(min=0), default=100, show_default=True,
              help="Batches per evaluation (valid and test counts, with --train-iters).")
@click.option("--seq-length", type=click.IntRange(min=2),
              help="Override the blend's seq_length (as the trainer's does).")
@click.option("--seed", type=click.IntRange(min=0), help="Override the blend's seed.")
@click.option("--dry-run", is_flag=True,
              help="Plan only (the default action): documents, tokens, weights, epochs, samples.")
@click.option("--build", is_flag=True, help="Build every index map the request needs (offline; no GPU, no torch).")
@click.option("--show-samples", "sample_range", callback=_parse_range, metavar="A:B",
              help="Print samples A..B-1 of --split as the trainer sees them, decoded with the sources' tokenizer, "
              "with where each document starts (+N: N tokens into it) and the padding.")
@click.option("--ids", is_flag=True, help="With --show-samples: print raw token ids instead of text.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (one JSON line per sample).")
@storage_options_option
def blend(file: str, split: str, num_samples: int | None, train_iters: int | None, global_batch_size: int | None,
          eval_interval: int, eval_iters: int, seq_length: int | None, seed: int | None, dry_run: bool, build: bool,
          sample_range: tuple[int, int] | None, ids: bool, as_json: bool, storage_options: str | None) -> None:
    """Validate blend FILE and plan, prebuild or show its samples."""
    from corpus.blending import report as blend_report
    from corpus.blending.datasets import SampleCounts, megatron_sample_counts
    from corpus.blending.schema import load_blend

    if dry_run + build + (sample_range is not None) > 1:
        raise click.UsageError("choose one of --dry-run, --build and --show-samples")
    if ids and sample_range is None:
        raise click.UsageError("--ids prints the ids of shown samples: add --show-samples A:B")
    if (train_iters is None) != (global_batch_size is None):
        raise click.UsageError("--train-iters and --global-batch-size go together")
    if num_samples is not None and train_iters is not None:
        raise click.UsageError("give --num-samples or --train-iters/--global-batch-size, not both")
    config = load_blend(file, seq_length=seq_length, seed=seed, storage_options=storage_options_from(storage_options))
    counts = (megatron_sample_counts(train_iters, global_batch_size, eval_interval, eval_iters) if train_iters
              else SampleCounts(**{split: num_samples}) if num_samples is not None else None)
    required = (split,) if num_samples is not None else ("train",)
    if sample_range is not None:
        requested = counts.of(split) if counts else None
        for sample in blend_report.show_samples(config, split, requested, *sample_range, decode=not ids):
            click.echo(json.dumps(sample, separators=(",", ":")) if as_json else _sample_line(sample))
    elif build:
        if counts is None:
            raise click.UsageError("--build needs --num-samples or --train-iters/--global-batch-size")
        result = blend_report.prebuild(config, counts, required)
        click.echo(json.dumps(result) if as_json else "\n".join(
            f"{name}: {r['samples']:,} samples, {r['entries_built']} cache "
            f"entr{'y' if r['entries_built'] == 1 else 'ies'} "
            f"built, {r['seconds']} s" for name, r in result.items()))
    else:
        reports = blend_report.dry_run(config, counts, required)
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
