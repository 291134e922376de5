"""What ``corpus blend`` does, callable from Python: dry runs, offline prebuilds, sample dumps.

- :func:`dry_run`: per split and source, sequences, tokens, weight asked vs share achieved,
  epochs and samples, without writing any concatenating index map (``best_fit``: padding share and
  documents cut too, from the packed maps); with a weight schedule, the same per phase;
- :func:`prebuild`: build (or verify) every map a request needs, no torch, no GPU;
- :func:`show_samples`: the token ids of samples ``[start, stop)`` of a split, exactly as a trainer asking
  for the same number of samples sees them, and their text.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Iterator

import numpy as np

from corpus.blending import index_maps as maps
from corpus.blending import packing
from corpus.blending.build import build_split_maps, check_maps_fit, member_entry
from corpus.blending.datasets import SampleCounts, SplitDataset, plan_all
from corpus.blending.plan import SplitPlan, plan_split
from corpus.blending.resolve import ResolvedBlend, blend_tokenizer, resolve_blend
from corpus.blending.schema import BlendConfig
from corpus.core.errors import UserError
from corpus.tokenizers import TextTokenizer
from corpus.tokenizers.decode import cached_tokenizer, decode_or_none

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceRow:
    """One source in one split. ``sequences`` are the unit megatron-core splits by (one per non-empty
    document unless the data was sentence-split; an empty document has none)."""

    name: str
    sequences: int
    tokens: int
    per_epoch: int
    """Samples one pass over this share gives."""
    weight: float | None
    share: float | None
    epochs: int | None
    samples: int | None
    """Samples the split takes from this source."""
    built: int | None
    """Samples its maps hold (the 0.5% surplus and the rest of the last epoch included)."""
    padding: float | None = None
    """``packing: best_fit``: share of the taken samples' tokens that is padding."""
    documents_cut: int | None = None
    """``packing: best_fit``: documents split across samples (only ones longer than S + 1)."""
    short_documents_cut: int | None = None
    """``packing: best_fit``: documents of at most S + 1 tokens split across samples (always 0)."""


@dataclass(frozen=True)
class PhaseRow:
    """One source in one phase of a weight schedule."""

    name: str
    weight: float
    """Its normalised weight at the phase's start."""
    weight_end: float
    """At the phase's end (differs from ``weight`` on a linear ramp)."""
    samples: int
    """Samples the phase draws from it."""
    tokens: int
    """Their tokens (``samples`` × ``seq_length``)."""
    share: float
    """``samples`` over the phase's samples."""
    epochs: float
    """Passes over its split share drawn by the end of the phase, this phase and the ones before."""


@dataclass(frozen=True)
class PhaseReport:
    """One phase of a scheduled split: blended samples ``[first, stop)``."""

    phase: int
    first: int
    stop: int
    ramp: str
    rows: list[PhaseRow]


@dataclass(frozen=True)
class SplitReport:
    """One split of a dry run."""

    split: str
    requested: int | None
    mode: str
    size: int | None
    rows: list[SourceRow]
    excluded: list[str]
    phases: list[PhaseReport] = field(default_factory=list)
    """A scheduled split's phases (empty otherwise)."""


def _achieved(plan: SplitPlan) -> list[int]:
    """How many samples the split takes from each member (runs the blending loop, writes nothing)."""
    if plan.mode == "single":
        return [plan.size if plan.requested is None else plan.requested]
    if plan.blend_weights is None:
        return [m.length for m in plan.members]
    return maps.blending_indices(list(plan.blend_weights), plan.size).counts.tolist()


def _per_epoch(tokens: int, seq_length: int, extra_token: int) -> int:
    return max(0, maps.samples_in(tokens, seq_length, extra_token))


def _phase_reports(config: BlendConfig, plan: SplitPlan, blending: maps.Blending, per_epoch: list[int]
                   ) -> list[PhaseReport]:
    """Each phase's draws per source, from the split's blend."""
    schedule, drawn = plan.schedule, np.zeros(len(plan.members), dtype=np.int64)
    reports = []
    for phase in range(schedule.num_phases):
        first, stop = schedule.bounds[phase], schedule.bounds[phase + 1]
        counts = np.bincount(blending.dataset_index[first:stop], minlength=len(plan.members))
        drawn += counts
        rows = [PhaseRow(member.name, float(schedule.start[phase][d]), float(schedule.end[phase][d]), int(counts[d]),
                         int(counts[d]) * config.seq_length, float(counts[d]) / (stop - first),
                         float(drawn[d]) / per_epoch[d] if per_epoch[d] else 0.0)
                for d, member in enumerate(plan.members)]
        reports.append(PhaseReport(phase + 1, first, stop, config.schedule[phase].ramp, rows))
    return reports


def _split_report(resolved: ResolvedBlend, plan: SplitPlan) -> SplitReport:
    config = resolved.config
    schedule = plan.schedule
    blending = (maps.scheduled_blending_indices(schedule.start, schedule.end, schedule.bounds)
                if schedule is not None else None)
    taken = blending.counts.tolist() if blending is not None else _achieved(plan)
    total = sum(taken)
    rows = []
    for member, count in zip(plan.members, taken):
        stats, per_epoch = {}, _per_epoch(member.tokens, config.seq_length, config.samples.extra_token)
        if config.packing == "best_fit":
            entry = member_entry(resolved, member, plan.split)
            found = packing.packing_stats(entry.arrays, member.source.lengths, packing.capacity_of(config), count)
            stats = {"padding": found.padding, "documents_cut": found.documents_cut,
                     "short_documents_cut": found.short_documents_cut}
            per_epoch = entry.meta["epoch_samples"][0]
        rows.append(SourceRow(member.name, member.end - member.begin, member.tokens, per_epoch, member.weight,
                              count / total if total else None, member.epochs.num_epochs, count, member.length,
                              **stats))
    phases = _phase_reports(config, plan, blending, [row.per_epoch for row in rows]) if blending is not None else []
    return SplitReport(plan.split, plan.requested, plan.mode, plan.size, rows, list(plan.excluded), phases)


def _inventory(resolved: ResolvedBlend, split: str) -> SplitReport | None:
    """One epoch's facts of each source of ``split`` (a weighted blend with no sample count)."""
    config = resolved.config
    configs = config.split_sources(split)
    if not configs:
        return None
    per_split = isinstance(config.sources, dict)
    bookend = (0.0, 1.0) if per_split else maps.split_matrix(config.effective_split)[maps.SPLIT_NAMES.index(split)]
    if bookend is None:
        return None
    weights = maps.normalize(list(config.weights_of(split)))
    rows = []
    for source, source_config, weight in zip(resolved.sources[split], configs, weights):
        begin, end = maps.split_range(bookend, source.info.num_sequences)
        tokens = int(np.sum(source.lengths[begin:end], dtype=np.int64))
        per_epoch = _per_epoch(tokens, config.seq_length, config.samples.extra_token)
        if config.packing == "best_fit" and tokens:
            per_epoch = packing.packed_entry(resolved.cache, config, source, begin, end, None,
                                             split).meta["epoch_samples"][0]
        rows.append(SourceRow(source_config.name, end - begin, tokens, per_epoch, weight, None, None, None, None))
    return SplitReport(split, None, "inventory", None, rows, [])


def dry_run(config: BlendConfig, counts: SampleCounts | None, required: tuple[str, ...] = ("train",)
            ) -> list[SplitReport]:
    """Validate everything and describe each split; ``counts=None`` means one epoch (or, for a
    weighted blend, only the per-source inventory). ``required``: see ``plan_split``. A ``best_fit`` blend's
    documents are packed to know its samples (the packed maps are kept in the cache)."""
    resolved = resolve_blend(config)
    reports, plans = [], []
    for split in maps.SPLIT_NAMES:
        if counts is None and config.weights_of(split) is not None:
            report = _inventory(resolved, split)
        else:
            plan = plan_split(resolved, split, counts.of(split) if counts else None, split in required)
            plans.append(plan)
            report = _split_report(resolved, plan) if plan else None
        if report is not None:
            reports.append(report)
    check_maps_fit(resolved, plans)
    return reports


def prebuild(config: BlendConfig, counts: SampleCounts, required: tuple[str, ...] = ("train",)) -> dict[str, dict]:
    """Build every map ``counts`` needs (or load and verify it); per split: entries built, seconds."""
    resolved = resolve_blend(config)
    plans = plan_all(resolved, counts, required)
    check_maps_fit(resolved, plans.values())
    result = {}
    for split, plan in plans.items():
        if plan is not None:
            start = time.perf_counter()
            built = build_split_maps(resolved, plan).built
            result[split] = {"samples": plan.size, "entries_built": built,
                             "seconds": round(time.perf_counter() - start, 3)}
    return result


def _sample_tokenizer(resolved: ResolvedBlend) -> TextTokenizer | None:
    """The tokenizer samples are decoded with (:func:`blend_tokenizer`); None, with a warning saying why,
    when there is none or it cannot be built: the raw ids are shown then."""
    try:
        config = blend_tokenizer(resolved)
        if config is not None:
            return cached_tokenizer(config)
        reason = "no source's .meta.json records a tokenizer and the blend names none (add tokenizer: {kind, path})"
    except UserError as error:
        reason = str(error)
    log.warning("samples shown as raw ids: %s", reason)
    return None


def show_samples(config: BlendConfig, split: str, num_samples: int | None, start: int, stop: int,
                 decode: bool = True) -> Iterator[dict]:
    """``{"index", "source", "tokens", "documents", "padding"}`` (and ``"phase"``, from 1, in a scheduled split)
    for samples ``[start, stop)`` of ``split``
    when ``num_samples`` are asked (the maps are built if the cache lacks them). ``tokens`` are raw ids
    (padding as -1); ``documents`` lists ``[position in the sample, sequence id, offset in the document,
    tokens]`` for each document piece; ``padding`` counts the padded positions at the end. With ``decode`` and a
    known tokenizer, ``"text"`` is the sample's tokens (padding left out) decoded with the sources' tokenizer,
    as ``corpus inspect --show`` decodes."""
    resolved = resolve_blend(config)
    plan = plan_split(resolved, split, num_samples)
    if plan is None:
        raise resolved.config.error(f"the {split} split is empty for this request (0 samples asked or no share)",
                                    "split")
    check_maps_fit(resolved, [plan])
    dataset = SplitDataset(resolved, build_split_maps(resolved, plan))
    if not 0 <= start < stop <= len(dataset):
        raise resolved.config.error(f"--show-samples {start}:{stop} is outside the {split} split's "
                                    f"{len(dataset)} samples; pick a range inside 0:{len(dataset)}", "split")
    tokenizer = _sample_tokenizer(resolved) if decode else None
    for index in range(start, stop):
        tokens, placed = dataset.view(index)
        filled = sum(length for _, _, _, length in placed)
        sample = {"index": index, "source": dataset.source_name(index), "tokens": tokens.tolist(),
                  "documents": [list(piece) for piece in placed], "padding": len(tokens) - filled}
        if plan.schedule is not None:
            sample["phase"] = plan.schedule.phase_at(index) + 1
        text = (decode_or_none(tokenizer, sample["tokens"][:filled], f"{split} sample {index}")
                if tokenizer is not None else None)
        yield {**sample, "text": text} if text is not None else sample


def report_to_json(reports: list[SplitReport]) -> list[dict]:
    """The dry run as plain JSON-ready data."""
    return [asdict(report) for report in reports]


def notes(config: BlendConfig) -> list[str]:
    """What a dry run says about the blend itself: a split it did not set."""
    if config.split is None and config.effective_split is not None:
        return [f"split {config.effective_split} (Megatron's default: the blend sets no 'split')"]
    return []


def format_report(reports: list[SplitReport], config: BlendConfig | None = None) -> str:
    """The dry run as a text table (what ``corpus blend FILE`` prints), after the :func:`notes` on ``config``."""
    packed = any(row.padding is not None for report in reports for row in report.rows)
    header = (f"{'split':<6} {'source':<16} {'sequences':>10} {'tokens':>13} {'per epoch':>10} {'weight':>7} "
              f"{'share':>7} {'epochs':>6} {'samples':>11} {'in maps':>11}"
              + (f" {'padding':>8} {'cut':>9}" if packed else ""))
    lines = [*(notes(config) if config else []), header, "-" * len(header)]

    def fmt(value: object, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    for report in reports:
        for row in report.rows:
            lines.append(f"{report.split:<6} {row.name[:16]:<16} {row.sequences:>10,} {row.tokens:>13,} "
                         f"{row.per_epoch:>10,} {fmt(row.weight, '.3f'):>7} {fmt(row.share, '.3f'):>7} "
                         f"{fmt(row.epochs, 'd'):>6} {fmt(row.samples, ',d'):>11} {fmt(row.built, ',d'):>11}"
                         + (f" {fmt(row.padding, '.2%'):>8} {fmt(row.documents_cut, ',d'):>9}" if packed else ""))
        lines.append(f"{report.split:<6} {_summary(report)}")
        lines += _format_phases(report)
    return "\n".join(lines)


def _format_phases(report: SplitReport) -> list[str]:
    """A scheduled split's phases: per source, the weight (start -> end on a ramp), the share drawn, samples,
    tokens, and the passes over the source by the phase's end."""
    if not report.phases:
        return []
    header = (f"{'phase':<6} {'samples':<23} {'source':<16} {'weight':>13} {'share':>7} {'drawn':>11} "
              f"{'tokens':>15} {'epochs':>7}")
    lines = ["", header, "-" * len(header)]
    for phase in report.phases:
        span = f"{phase.first:,}-{phase.stop - 1:,}" + (" ramp" if phase.ramp == "linear" else "")
        for number, row in enumerate(phase.rows):
            weight = f"{row.weight:.3f}" + (f"->{row.weight_end:.3f}" if row.weight != row.weight_end else "")
            lines.append(f"{phase.phase if number == 0 else '':<6} {span if number == 0 else '':<23} "
                         f"{row.name[:16]:<16} {weight:>13} {row.share:>7.3f} {row.samples:>11,} {row.tokens:>15,} "
                         f"{row.epochs:>7.2f}")
    return lines


def _summary(report: SplitReport) -> str:
    if report.mode == "inventory":
        return "weighted: pass --num-samples or --train-iters/--global-batch-size for shares, epochs and samples"
    asked = format(report.requested, ",d") if report.requested is not None else "one epoch"
    excluded = f"; left out (empty share): {', '.join(report.excluded)}" if report.excluded else ""
    short_cut = sum(row.short_documents_cut or 0 for row in report.rows)
    packed = (f"; best-fit packed, documents of at most S + 1 tokens cut: {short_cut}"
              if any(row.padding is not None for row in report.rows) else "")
    online = ("; the weights above hold until the first online-mixing update, each source's maps hold what the "
              "most its weight can reach would draw" if report.mode == "online" else "")
    return f"{report.mode} blend: {asked} samples asked, dataset length {report.size:,}{excluded}{packed}{online}"
