"""``corpus inspect``: parse the flags into an :class:`~corpus.inspect.InspectConfig`, call
:func:`~corpus.inspect.inspect`, print a terminal report (rich) or JSON; exit 1 when ``--check``
found problems."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cli.errors import friendly_errors
from corpus.indexed import strip_suffix
from corpus.inspect import Inspection, InspectConfig, InspectReport, inspect
from corpus.inspect_show import DocumentRange, ShownDocument

#: Width of the longest histogram bar, in characters.
BAR_WIDTH = 40
#: Sidecar values longer than this are shortened in the terminal (``--json`` has them whole).
VALUE_WIDTH = 100
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


def _histogram(report: InspectReport) -> Table:
    table = Table.grid(padding=(0, 1))
    edges, counts = report.histogram.edges, report.histogram.counts
    peak = max(counts, default=0)
    for low, high, count in zip(edges, edges[1:], counts):
        label = str(low) if high - low == 1 else f"{low:,}–{high - 1:,}"
        table.add_row(label, f"[cyan]{_bar(count, peak)}[/]", f"{count:,}")
    table.columns[0].justify = table.columns[2].justify = "right"
    return table


def _flatten(meta: dict, parent: str = "") -> list[tuple[str, str]]:
    rows = []
    for key in sorted(meta):
        name, value = f"{parent}{key}", meta[key]
        if isinstance(value, dict) and value:
            rows.extend(_flatten(value, name + "."))
            continue
        text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
        rows.append((name, text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 1] + "…"))
    return rows


def _summary(report: InspectReport) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_row("format", f"MMIDIDX version {report.version}, dtype {report.dtype}")
    table.add_row("counts", f"{report.num_sequences:,} sequences, {report.num_documents:,} documents "
                            f"({report.empty_documents:,} empty), {report.num_tokens:,} tokens")
    table.add_row("files", f"{escape(report.idx_file)} {_size(report.idx_bytes)}, "
                           f"{escape(report.bin_file)} {_size(report.bin_bytes)}")
    if report.lengths is not None:
        s = report.lengths
        table.add_row("tokens/doc", f"min {s.min:,}  median {s.median:,.1f}  mean {s.mean:,.1f}  "
                                    f"p99 {s.p99:,.1f}  max {s.max:,}")
    table.add_row("sidecar", "none (written by Megatron or another tool)" if report.meta is None else "")
    for key, value in _flatten(report.meta or {}):
        table.add_row(f"  [dim]{escape(key)}[/]", escape(value))
    return table


def _print_document(console: Console, document: ShownDocument) -> None:
    console.rule(f"document {document.index} · {document.num_tokens:,} tokens", align="left", style="dim")
    if document.ids is not None:
        for sequence in document.ids:
            console.print(" ".join(map(str, sequence)), markup=False, highlight=False)
    if document.text is not None:
        console.print(document.text, markup=False, highlight=False)


def _print(console: Console, inspection: Inspection) -> None:
    console.rule(f"[bold]{escape(inspection.prefix)}", align="left")
    if inspection.report is not None:
        console.print(_summary(inspection.report))
        if inspection.report.histogram.counts:
            console.print("document lengths (tokens):")
            console.print(_histogram(inspection.report))
    for document in inspection.documents or []:
        _print_document(console, document)
    if inspection.problems is not None:
        if not inspection.problems:
            console.print("[green]check: no problems[/]")
        for problem in inspection.problems:
            console.print(f"[red]problem[/] {escape(str(problem))}")


@click.command("inspect")
@click.argument("datasets", nargs=-1, required=True)
@click.option("--check", is_flag=True, help="Validate everything (sizes, pointers, document index, ids < vocab, "
              "EOD, sidecar); exit 1 naming each problem.")
@click.option("--max-problems", type=click.IntRange(min=1), default=10, show_default=True,
              help="With --check: list at most N problems of each kind per file (the rest are counted).")
@click.option("--show", metavar="A:B|N", help="Print documents A to B-1 (or document N), decoded.")
@click.option("--ids", is_flag=True, help="With --show: print the raw token ids too.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE.png",
              help="Write histograms of document lengths and token-id frequency (needs matplotlib).")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: one object for one named pair, a list for several (or a glob/directory).")
@friendly_errors
def inspect_command(datasets: tuple[str, ...], check: bool, max_problems: int, show: str | None, ids: bool,
                    plot: Path | None, as_json: bool) -> None:
    """Look inside .bin/.idx pairs: header, counts, length statistics, sidecar, documents, problems.

    DATASETS are prefixes, .idx/.bin paths, globs or directories.
    """
    config = InspectConfig(datasets=datasets, check=check, max_problems=max_problems,
                           show=DocumentRange.parse(show) if show is not None else None, ids=ids, plot=plot)
    inspections = inspect(config)
    if as_json:
        payload = [inspection.to_dict() for inspection in inspections]
        # NOTE: the shape follows what was typed, not what a glob happened to match.
        single = len(datasets) == 1 and len(inspections) == 1 and inspections[0].prefix == strip_suffix(datasets[0])
        click.echo(json.dumps(payload[0] if single else payload, indent=2, sort_keys=True))
    else:
        console = Console(soft_wrap=True)
        for inspection in inspections:
            _print(console, inspection)
    failed = [i for i in inspections if i.problems]
    if failed:
        total = sum(problem.count for i in failed for problem in i.problems)
        raise click.ClickException(f"check failed: {total} problem(s) in {len(failed)} of {len(inspections)} file(s)")

