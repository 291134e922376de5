"""What a split of a blend will be made of, decided before any concatenating map is built.

megatron-core's ``BlendedMegatronDatasetBuilder`` rules, case by case:

- one source without a weight (list form), or one source in a per-split list: a plain
  GPTDataset of ``n`` samples (``mode="single"``);
- weights: each source builds ``ceil(ceil(n * w) * 1.005)`` samples, the blend takes
  ``sum(ceil(n * w))`` of them with the greedy interleave (``mode="weighted"``);
- no weights, several sources: one epoch of each, blended in proportion to their sizes, capped
  at ``n`` (``mode="unweighted"``; exhaustive when no ``n`` is given);
- a weight schedule (ours, the train split only): the phases laid over the ``n`` samples, each source building
  ``ceil(ceil(E) * 1.005) + P - 1`` samples for ``E`` expected draws over ``P`` phases (each phase may draw up to
  one sample more than it expects), blended phase by phase (``mode="scheduled"``; one phase is Megatron's
  ``weighted``, sample for sample);
- online mixing (ours, the train split only): the weights are decided during the run, so each source builds
  what the most its weight can reach would draw, ``ceil(ceil(n * (1 - (S - 1) * floor)) * 1.005)`` samples,
  and the run draws the blend as it reads it (``mode="online"``, :mod:`corpus.blending.mixing.draw`; until the
  first update, Megatron's ``weighted`` choice of sources with the sources' weights).

With ``packing: best_fit`` a member's epochs and sample count are those of its packed maps, so planning
packs (or loads from the cache) each source split's documents first (:mod:`corpus.blending.packing`).

Where megatron-core hangs (a source whose share of a split has no tokens: its epoch loop never
ends) or asserts, we leave that source out of that split, as if it were not listed, with a
warning. Impossible requests (a requested split with no share, more samples than the sources
give without weights, more epochs than ``max_epochs``) are ConfigErrors naming the key and fix.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from corpus.blending import index_maps as maps
from corpus.blending import packing
from corpus.blending.resolve import ResolvedBlend
from corpus.blending.schedule import WeightSchedule, lay_out
from corpus.blending.sources import Source

log = logging.getLogger(__name__)

#: Refuse plans whose document index would exceed this many entries (memory, not semantics).
MAX_DOCUMENT_INDEX = 4_000_000_000


@dataclass(frozen=True)
class MemberPlan:
    """One source's part in a split."""

    name: str
    key: str
    source: Source
    begin: int
    end: int
    """Sequence ids ``[begin, end)`` of the source in this split."""
    tokens: int
    weight: float | None
    """Normalised weight asked (None without weights)."""
    num_samples: int | None
    """Samples asked of this source's GPTDataset (the 1.005 buffer when blended; None = one epoch)."""
    epochs: maps.EpochPlan
    length: int
    """Samples its maps hold (all epochs)."""
    target: int
    """Samples the split means to take from it."""
    maps_built: int = 0
    """Cache entries planning built for it (``best_fit`` packs while planning)."""


@dataclass(frozen=True)
class SplitPlan:
    """A split of the blend: members, how they are blended, and the dataset's length."""

    split: str
    requested: int | None
    mode: str
    members: tuple[MemberPlan, ...]
    excluded: tuple[str, ...]
    blend_weights: tuple[float, ...] | None
    """Weights of the greedy interleave (None for ``single``, exhaustive and scheduled blends; an online blend's
    weights until its first update)."""
    size: int
    schedule: WeightSchedule | None = None
    """The phases of a ``scheduled`` split, laid over its samples."""


def _ranges(resolved: ResolvedBlend, split: str, requested: int | None, required: bool) -> list[tuple[int, int]] | None:
    """Each source's sequence range for ``split``; None when the split is not built."""
    config = resolved.config
    if not config.split_sources(split):
        if requested and required:
            raise config.error(f"no sources for the {split} split but {requested} {split} samples were asked; add a "
                               f"'{split}' list or ask for 0", "sources")
        return None
    sources = resolved.sources[split]
    if isinstance(config.sources, dict):
        return [(0, s.info.num_sequences) for s in sources]
    bookend = maps.split_matrix(config.effective_split)[maps.SPLIT_NAMES.index(split)]
    if bookend is None:
        if requested and required:
            raise config.error(f"{config.effective_split!r} gives the {split} split no share but {requested} {split} "
                               f"samples were asked; give it a share (e.g. \"98,1,1\") or ask for 0", "split")
        return None
    return [maps.split_range(bookend, s.info.num_sequences) for s in sources]


def _usable(resolved: ResolvedBlend, split: str, ranges: list[tuple[int, int]], unweighted: bool) -> list[int]:
    """Indices of the sources that can contribute to ``split``; the others are warned about."""
    config = resolved.config
    keep, empty = [], []
    for index, (source, (begin, end)) in enumerate(zip(resolved.sources[split], ranges)):
        tokens = int(np.sum(source.lengths[begin:end], dtype=np.int64))
        too_small = unweighted and maps.samples_in(tokens, config.seq_length, config.samples.extra_token) <= 0
        if tokens == 0 or too_small:
            what = "no tokens" if tokens == 0 else f"{tokens} tokens, less than one sample"
            empty.append(f"{config.source_key(split, index)} ({source.name}: sequences {begin}-{end}, {what})")
        else:
            keep.append(index)
    if empty:
        shown = "; ".join(empty[:5]) + (f"; and {len(empty) - 5} more" if len(empty) > 5 else "")
        log.warning("%d source(s) contribute nothing to %s, their share of it being empty: %s", len(empty), split,
                    shown)
    if not keep:
        raise config.error(f"every source's {split} share is empty; give {split} a larger share in 'split', or use "
                           "per-split source lists", "split" if config.effective_split else f"sources.{split}")
    return keep


def plan_split(resolved: ResolvedBlend, split: str, requested: int | None, required: bool = True) -> SplitPlan | None:
    """The plan of ``split`` for ``requested`` samples (None: one epoch, unweighted blends only).

    Returns None when nothing is to be built: 0 samples asked, or a split the blend gives no
    share (an error when ``required``; otherwise logged, as megatron-core skips such a split).
    Asking an unweighted blend for more than one epoch is an error when ``required``; otherwise
    the split is capped at one epoch, as megatron-core caps it."""
    if requested == 0:
        return None
    _check_seq_length(resolved, split)
    ranges = _ranges(resolved, split, requested, required)
    if ranges is None:
        if requested:
            log.info("the blend gives the %s split no share: %d %s samples asked, none built", split, requested, split)
        return None
    config = resolved.config
    configs = config.split_sources(split)
    weights = config.weights_of(split)
    keep = _usable(resolved, split, ranges, unweighted=weights is None)
    excluded = tuple(configs[i].name for i in range(len(configs)) if i not in keep)
    single = len(keep) == 1 and (isinstance(config.sources, dict) or weights is None)
    if single:
        return _single(resolved, split, requested, keep[0], ranges[keep[0]], excluded)
    if weights is not None:
        if requested is None:
            where = "schedule" if config.schedule is not None else f"{config.source_key(split, keep[0])}.weight"
            raise config.error("weighted sources need a sample count; pass --num-samples (or drop every weight for "
                               "one epoch of each source)", where)
        if config.scheduled(split):
            return _scheduled(resolved, split, requested, keep, ranges, excluded)
        if config.mixed_online(split):
            return _online(resolved, split, requested, [weights[i] for i in keep], keep, ranges, excluded)
        return _weighted(resolved, split, requested, [weights[i] for i in keep], keep, ranges, excluded)
    return _unweighted(resolved, split, requested, keep, ranges, excluded, required)


def _check_seq_length(resolved: ResolvedBlend, split: str) -> None:
    """Refuse a sequence length no source of ``split`` can fill with its whole data: each sample would repeat a
    source many times over (and its document index grow with the length), which no run means."""
    config = resolved.config
    sources = resolved.sources.get(split, [])
    needed = config.seq_length + config.samples.extra_token
    largest = max(sources, key=lambda source: source.info.num_tokens, default=None)
    if largest is not None and largest.info.num_tokens < needed:
        raise config.error(
            f"{config.seq_length:,} tokens per sample ({needed:,} with the label token) is more than any {split} "
            f"source holds (the largest, {largest.name}, has {largest.info.num_tokens:,} tokens in all); lower "
            "seq_length (or --seq-length)", "seq_length")


def _member(resolved: ResolvedBlend, split: str, index: int, bounds: tuple[int, int], weight: float | None,
            num_samples: int | None, target: int | None) -> MemberPlan:
    config = resolved.config
    source = resolved.sources[split][index]
    tokens = int(np.sum(source.lengths[bounds[0]:bounds[1]], dtype=np.int64))
    if config.packing == "best_fit":
        _check_epochs(resolved, split, index, tokens, num_samples,
                      packing.min_epochs(tokens, num_samples, packing.capacity_of(config)), bounds)
        entry = packing.packed_entry(resolved.cache, config, source, *bounds, num_samples, split)
        epochs = packing.epoch_plan(tokens, tuple(entry.meta["epoch_samples"]), num_samples)
        length, built = sum(entry.meta["epoch_samples"]), int(entry.built)
    else:
        built = 0
        epochs = maps.plan_epochs(tokens, num_samples, config.seq_length, config.samples.extra_token)
        length = maps.samples_in(epochs.num_epochs * tokens, config.seq_length, config.samples.extra_token)
    _check_epochs(resolved, split, index, tokens, num_samples, epochs.num_epochs, bounds)
    # NOTE: the blend's name for this entry, not the Source's: two entries listing one prefix share one Source
    name = config.split_sources(split)[index].name
    return MemberPlan(name, config.source_key(split, index), source, bounds[0], bounds[1], tokens, weight,
                      num_samples, epochs, length, target if target is not None else length, built)


def _check_epochs(resolved: ResolvedBlend, split: str, index: int, tokens: int, num_samples: int | None,
                  epochs: int, bounds: tuple[int, int]) -> None:
    """Refuse ``epochs`` passes over a source beyond its ``max_epochs`` or the document-index limit."""
    config = resolved.config
    name, key = config.split_sources(split)[index].name, config.source_key(split, index)
    cap = config.split_sources(split)[index].max_epochs or config.max_epochs
    if cap is not None and epochs > cap:
        where = f"{key}.max_epochs" if config.split_sources(split)[index].max_epochs else "max_epochs"
        raise config.error(f"{name} would be read {epochs} times over to give {num_samples} {split} "
                           f"samples ({tokens} tokens per pass) but max_epochs is {cap}; ask for fewer samples, "
                           f"lower its weight, or raise max_epochs", where)
    if epochs * (bounds[1] - bounds[0]) > MAX_DOCUMENT_INDEX:
        raise config.error(f"{name} has {tokens} {split} tokens; {num_samples} samples would need "
                           f"{epochs} epochs; give it a larger share or a smaller weight", f"{key}.prefix")


def _single(resolved: ResolvedBlend, split: str, requested: int | None, index: int, bounds: tuple[int, int],
            excluded: tuple[str, ...]) -> SplitPlan:
    member = _member(resolved, split, index, bounds, None, requested, requested)
    return SplitPlan(split, requested, "single", (member,), excluded, None, member.length)


def _weighted(resolved: ResolvedBlend, split: str, requested: int, asked: list[float], keep: list[int],
              ranges: list[tuple[int, int]], excluded: tuple[str, ...]) -> SplitPlan:
    weights = maps.normalize(asked)
    targets = maps.blend_counts(weights, requested)
    buffers = maps.blend_counts(weights, requested, maps.SURPLUS)
    members = tuple(_member(resolved, split, i, ranges[i], w, b, t)
                    for i, w, b, t in zip(keep, weights, buffers, targets))
    return SplitPlan(split, requested, "weighted", members, excluded, tuple(maps.normalize(weights)), sum(targets))


def _scheduled(resolved: ResolvedBlend, split: str, requested: int, keep: list[int], ranges: list[tuple[int, int]],
               excluded: tuple[str, ...]) -> SplitPlan:
    config = resolved.config
    names = tuple(config.split_sources(split)[i].name for i in keep)
    schedule = lay_out(config.schedule, names, requested, config.seq_length, config.error)
    expected = schedule.expected_counts(requested).tolist()
    targets = [int(math.ceil(count)) for count in expected]
    buffers = [int(math.ceil(target * (1 + maps.SURPLUS))) + schedule.num_phases - 1 for target in targets]
    members = tuple(_member(resolved, split, i, ranges[i], count / requested, b, t)
                    for i, count, b, t in zip(keep, expected, buffers, targets))
    return SplitPlan(split, requested, "scheduled", members, excluded, None, requested, schedule)


def _online(resolved: ResolvedBlend, split: str, requested: int, asked: list[float], keep: list[int],
            ranges: list[tuple[int, int]], excluded: tuple[str, ...]) -> SplitPlan:
    weights = maps.normalize(asked)
    most = 1.0 - (len(keep) - 1) * resolved.config.mixing.floor
    buffers = maps.blend_counts([most] * len(keep), requested, maps.SURPLUS)
    targets = maps.blend_counts(weights, requested)
    members = tuple(_member(resolved, split, i, ranges[i], w, b, t)
                    for i, w, b, t in zip(keep, weights, buffers, targets))
    return SplitPlan(split, requested, "online", members, excluded, tuple(maps.normalize(weights)), requested)


def _unweighted(resolved: ResolvedBlend, split: str, requested: int | None, keep: list[int],
                ranges: list[tuple[int, int]], excluded: tuple[str, ...], required: bool) -> SplitPlan:
    members = tuple(_member(resolved, split, i, ranges[i], None, None, None) for i in keep)
    lengths = [m.length for m in members]
    total = sum(lengths)
    if requested is None:
        return SplitPlan(split, None, "unweighted", members, excluded, None, total)
    if requested > total and required:
        raise resolved.config.error(
            f"sources without weights give one epoch each: {total} {split} samples at most, {requested} asked; "
            "give every source a weight to repeat data, or ask for fewer samples", "sources")
    if requested > total:
        log.info("sources without weights give one epoch each: %d %s samples of the %d asked", total, split, requested)
        requested = total
    shares = maps.normalize(lengths)
    return SplitPlan(split, requested, "unweighted", members, excluded, tuple(shares), requested)
