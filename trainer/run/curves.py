"""``trainer plot``: a run's per-source curves, read back from its ``--metrics-jsonl`` file (no torch).

The picture: each source's training loss against the tokens trained so far, beside it each source's own
validation loss (and the blend's) at every evaluation, and last the mix: each source's weight in force (a weight
schedule's phases and ramps show as its steps and slopes) with the share of the tokens it has realised. The x axis
counts every source's loss-bearing tokens (the sum of a record's ``tokens_total``); an evaluation sits at the
tokens of its step. The summary: where each
source ended (last training and validation loss, its tokens, the share achieved next to the weight asked).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from corpus.core.errors import InputError
from corpus.core.figures import THREE_PANELS, new_figure, save_figure


@dataclass
class Curves:
    """The per-source series of one metrics file."""

    path: Path
    names: list[str]
    steps: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    """Every source's tokens up to each training record."""
    train: dict[str, list[float | None]] = field(default_factory=dict)
    weights: dict[str, list[float | None]] = field(default_factory=dict)
    """Each source's weight in force at each training record."""
    shares: dict[str, list[float | None]] = field(default_factory=dict)
    """Each source's realised share of the tokens at each training record."""
    evals: list[dict] = field(default_factory=list)
    """The validation records, in order."""
    last: dict = field(default_factory=dict)
    """The last training record's ``sources``."""


def metrics_file(path: str | os.PathLike) -> Path:
    """The metrics file ``path`` names: the file itself, or the one ``*.jsonl`` file in a folder (its
    ``metrics.jsonl`` when it holds several)."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise InputError(f"{path}: no such file or folder; give the run's --metrics-jsonl file or its folder")
    found = sorted(path.glob("*.jsonl"))
    if path / "metrics.jsonl" in found:
        return path / "metrics.jsonl"
    if len(found) == 1:
        return found[0]
    which = f"it holds {', '.join(p.name for p in found)}" if found else "it holds no *.jsonl file"
    raise InputError(f"{path}: {which}; give the run's --metrics-jsonl file itself")


def read_curves(path: str | os.PathLike) -> Curves:
    """The per-source series of the ``--metrics-jsonl`` file ``path`` (a line torn by a kill is skipped)."""
    path = Path(path)
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    train = [r for r in records if "loss" in r and r.get("sources")]
    if not train:
        raise InputError(f"{path}: no per-source training records; is it a --metrics-jsonl file of a run "
                         "trained without --log-per-source off?")
    curves = Curves(path, list(train[-1]["sources"]))
    for record in train:
        curves.steps.append(record["step"])
        curves.tokens.append(sum(numbers["tokens_total"] for numbers in record["sources"].values()))
        for name in curves.names:
            numbers = record["sources"].get(name) or {}
            for series, key in ((curves.train, "loss"), (curves.weights, "weight"), (curves.shares, "share")):
                series.setdefault(name, []).append(numbers.get(key))
    curves.evals = [r for r in records if r.get("split") == "valid" and "eval_loss" in r]
    curves.last = train[-1]["sources"]
    return curves


def _last_valid(curves: Curves, name: str) -> float | None:
    for record in reversed(curves.evals):
        if name in (record.get("sources") or {}):
            return record["sources"][name]["loss"]
    return None


def summary(curves: Curves) -> dict:
    """Where each source ended: last training loss (of the last record that had its tokens), last validation
    loss on its own samples, cumulative tokens, the share achieved and the weight asked."""
    sources = {}
    for name in curves.names:
        losses = [loss for loss in curves.train[name] if loss is not None]
        numbers = curves.last[name]
        sources[name] = {"loss": losses[-1] if losses else None, "valid_loss": _last_valid(curves, name),
                         "tokens": numbers["tokens_total"], "share": numbers["share"], "weight": numbers["weight"]}
    return {"metrics": str(curves.path), "step": curves.steps[-1], "tokens": curves.tokens[-1],
            "valid_loss": curves.evals[-1]["eval_loss"] if curves.evals else None, "sources": sources}


def format_summary(result: dict) -> str:
    """:func:`summary` as a text table (what ``trainer plot`` prints without ``--json``)."""
    def fmt(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    width = max(6, *(len(name) for name in result["sources"]))
    lines = [f"{result['metrics']}: step {result['step']}, {result['tokens']:,} tokens",
             f"{'source':<{width}} {'loss':>8} {'valid':>8} {'tokens':>14} {'share':>6} {'weight':>6}"]
    for name, numbers in result["sources"].items():
        lines.append(f"{name:<{width}} {fmt(numbers['loss'], '.4f'):>8} {fmt(numbers['valid_loss'], '.4f'):>8} "
                     f"{numbers['tokens']:>14,} {fmt(numbers['share'], '.3f'):>6} {fmt(numbers['weight'], '.3f'):>6}")
    return "\n".join(lines)


def write_curves(curves: Curves, out: str | os.PathLike) -> None:
    """Draw the training and validation loss of each source against the tokens trained into the image ``out``
    (type from its suffix)."""
    figure = new_figure(out, "trainer plot --out", THREE_PANELS)
    train_axes, valid_axes, mix_axes = figure.subplots(1, 3)
    for name in curves.names:
        points = [(x, y) for x, y in zip(curves.tokens, curves.train[name]) if y is not None]
        train_axes.plot(*zip(*points), label=name)
    _draw_mix(mix_axes, curves)
    at = [float(np.interp(r["step"], curves.steps, curves.tokens)) for r in curves.evals]
    for name in curves.names:
        points = [(x, r["sources"][name]["loss"]) for x, r in zip(at, curves.evals) if name in r.get("sources", {})]
        if points:
            valid_axes.plot(*zip(*points), marker="o", label=name)
    if curves.evals:
        valid_axes.plot(at, [r["eval_loss"] for r in curves.evals], "k--", marker=".", label="blend")
    else:
        valid_axes.text(0.5, 0.5, "no evaluations in this run", ha="center", transform=valid_axes.transAxes)
    for axes, title in ((train_axes, "training loss per source"), (valid_axes, "validation loss per source")):
        axes.set(xlabel="tokens trained (all sources)", ylabel="loss", title=title)
        if axes.lines:
            axes.legend(fontsize="small", loc="best")
    save_figure(figure, out, "trainer plot --out")


def _draw_mix(axes, curves: Curves) -> None:
    """Each source's weight in force (solid, drawn as steps between records) and its realised share of the tokens
    (dashed, same colour) against the tokens trained."""
    for name in curves.names:
        weights = [(x, y) for x, y in zip(curves.tokens, curves.weights[name]) if y is not None]
        line = axes.step(*zip(*weights), where="post", label=f"{name} weight")[0] if weights else None
        shares = [(x, y) for x, y in zip(curves.tokens, curves.shares[name]) if y is not None]
        if shares:
            axes.plot(*zip(*shares), "--", color=line.get_color() if line else None, label=f"{name} share")
    if not axes.lines:
        axes.text(0.5, 0.5, "no weights in this run (an unweighted blend)", ha="center", transform=axes.transAxes)
    axes.set(xlabel="tokens trained (all sources)", ylabel="weight / share", title="mix per source", ylim=(0, 1))
    if axes.lines:
        axes.legend(fontsize="small", loc="best")
