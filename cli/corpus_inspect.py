"""``corpus inspect``: parse the flags into an :class:`~corpus.inspect.run.InspectConfig`, call
:func:`~corpus.inspect.run.inspect`, print a terminal report (rich) or JSON; exit 1 when ``--check``
found problems, 3 when ``--deep`` could not verify some contents (no checksums recorded)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from cli.config_options import build_config, config_options, given_values
from corpus.core.errors import UserError
from corpus.indexed import strip_suffix
from corpus.inspect.run import InspectConfig, Inspection, inspect
from corpus.inspect.show import ShownDocument
from corpus.inspect.summary import InspectReport

#: Width of the longest histogram bar, in characters.
BAR_WIDTH = 40
#: Sidecar values longer than this are shortened in the terminal (``--json`` has them whole).
VALUE_WIDTH = 100
#: Sidecar keys left out of the terminal view: the rebuild recipe repeats the tokenizer record.
HIDDEN_KEYS = ("tokenizer.config",)
_EIGHTHS = " ▏▎▍▌▋▊▉"


def _size(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:,} {unit}" if unit == "B" else f"{count:,.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def _bar(count: int, peak: int) -> str:
    eighths = round(BAR_WIDTH * 8 * count / peak) if peak else 0
    return "█" * (eighths // 8) + (_EIGHTHS[eighths % 8] if eighths % 8 else "")


def _aligned(rows: list[tuple[str, str]], indent: str = "") -> list[str]:
    """``key  value`` lines with the values in one column (no padding after them, unlike a rich table)."""
    width = max((len(key) for key, _ in rows), default=0)
    return [f"{indent}{key:<{width}}  {value}".rstrip() for key, value in rows]


def _histogram(report: InspectReport) -> list[str]:
    edges, counts = report.histogram.edges, report.histogram.counts
    peak = max(counts, default=0)
    labels = [str(low) if high - low == 1 else f"{low:,}–{high - 1:,}" for low, high in zip(edges, edges[1:])]
    width = max(map(len, labels), default=0)
    return [f"  {label:>{width}} [cyan]{_bar(count, peak):<{BAR_WIDTH}}[/] {count:,}"
            for label, count in zip(labels, counts)]


def _flatten(meta: dict, parent: str = "") -> list[tuple[str, str]]:
    rows = []
    for key in sorted(meta):
        name, value = f"{parent}{key}", meta[key]
        if value is None or name in HIDDEN_KEYS:
            continue
        if isinstance(value, dict) and value:
            rows.extend(_flatten(value, name + "."))
            continue
        text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
        rows.append((name, text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 1] + "…"))
    return rows


def _summary(report: InspectReport) -> list[str]:
    rows = [
        ("format", f"MMIDIDX version {report.version}, dtype {report.dtype}"),
        ("counts", f"{report.num_sequences:,} sequences, {report.num_documents:,} documents "
                   f"({report.empty_documents:,} empty), {report.num_tokens:,} tokens"),
        ("files", f"{report.idx_file} {_size(report.idx_bytes)}, {report.bin_file} {_size(report.bin_bytes)}"),
    ]
    if report.lengths is not None:
        s = report.lengths
        rows.append(("tokens/doc", f"min {s.min:,}  median {s.median:,.1f}  mean {s.mean:,.1f}  "
                                   f"p99 {s.p99:,.1f}  max {s.max:,}"))
    rows.append(("sidecar", "none (written by Megatron or another tool)" if report.meta is None else ""))
    lines = _aligned(rows, "  ")
    return lines + _aligned(_flatten(report.meta or {}), "    ")


def _print_document(console: Console, document: ShownDocument) -> None:
    console.print(f"[dim]── document {document.index} · {document.num_tokens:,} tokens ──[/]")
    if document.ids is not None:
        for sequence in document.ids:
            console.print(" ".join(map(str, sequence)), markup=False, highlight=False)
    if document.text is not None:
        console.print(document.text, markup=False, highlight=False)


def _print(console: Console, inspection: Inspection) -> None:
    console.print(f"[bold]{escape(inspection.prefix)}[/]")
    if inspection.report is not None:
        for line in _summary(inspection.report):
            console.print(escape(line))
        if inspection.report.histogram.counts:
            console.print("  document lengths (tokens):")
            for line in _histogram(inspection.report):
                console.print(line)
    for document in inspection.documents or []:
        _print_document(console, document)
    if inspection.problems is not None:
        if inspection.unverified:
            console.print(f"[yellow]check: contents not verified[/]: the sidecar records no checksum of the "
                          f"{' and '.join('.' + kind for kind in inspection.unverified)}, so --deep could not compare "
                          f"them (corpus add-checksums {escape(inspection.prefix)} records them once the pair is "
                          "known to be good)")
        elif not inspection.problems:
            console.print("[green]check: no problems[/]")
        for problem in inspection.problems:
            console.print(f"[red]problem[/] {escape(str(problem))}")


#: What ``corpus inspect`` does differently from the generated options: values parsed from their spelling, and the
#: tokenizer optional (each sidecar names one).
SETTINGS = {"show": {"type": str}, "plot": {"type": click.Path(dir_okay=False, path_type=Path)},
            "tokenizer.type": {"required": False, "help": next(
                field for field in dataclasses.fields(InspectConfig) if field.name == "tokenizer").metadata["help"]}}
#: The tokenizer flags that matter for decoding (the tokenize-only ones, such as --encoder, are left out).
FIELDS = (*(f.name for f in dataclasses.fields(InspectConfig) if f.name != "tokenizer"),
          *(f"tokenizer.{name}" for name in ("type", "model", "vocab_file", "merge_file")))


@click.command("inspect", params=config_options(InspectConfig, only=FIELDS, settings=SETTINGS))
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: one object for one named pair, a list for several (or a glob/directory).")
@click.pass_context
def inspect_command(ctx: click.Context, as_json: bool, **options) -> None:
    """Look inside .bin/.idx pairs: header, counts, length statistics, sidecar, documents, problems.

    DATASETS are prefixes, .idx/.bin paths, globs or directories, local or s3:// URLs.
    """
    config: InspectConfig = build_config(InspectConfig, given_values(ctx, options))
    datasets = config.datasets
    inspections = inspect(config)
    if as_json:
        payload = [inspection.to_dict() for inspection in inspections]
        # NOTE: the shape follows what was typed, not what a glob happened to match.
        single = len(datasets) == 1 and len(inspections) == 1 and inspections[0].prefix == strip_suffix(datasets[0])
        click.echo(json.dumps(payload[0] if single else payload, indent=2, sort_keys=True))
    else:
        console = Console(soft_wrap=True)
        if not console.is_terminal:  # piped or captured: never wrap or cut a line
            console.width = 100_000
        for inspection in inspections:
            _print(console, inspection)
    failed = [i for i in inspections if i.problems]
    if failed:
        total = sum(problem.count for i in failed for problem in i.problems)
        raise click.ClickException(f"check failed: {total} problem(s) in {len(failed)} of {len(inspections)} file(s)")
    unverified = [i for i in inspections if i.unverified]
    if unverified:
        raise Unverified(f"check found no problems, but the contents of {len(unverified)} of {len(inspections)} "
                         "file(s) were not verified: their sidecars record no checksums (corpus add-checksums)")


class Unverified(UserError):
    """``--check --deep`` found no problem but could not compare some pair's contents: exit status 3, told apart
    from a failed check (1) and a clean one (0)."""

    exit_code = 3

