"""Turn a :class:`~corpus.blending.plan.SplitPlan` into index maps, through the content-addressed cache.

One cache entry per source split (``gpt-…``: document, sample and shuffle index; ``packed-…`` with
``packing: best_fit``, see :mod:`corpus.blending.packing`) and one per
blended split (``blend-…``: source and sample-within-source of every blended sample; a weight schedule's
phases, as laid over the split, are in its key). Keys hold
everything that changes the arrays, including what megatron-core forgets to hash
(``add_extra_token_to_sequence``, the surplus, the drop-last rule) and the content digest of
every ``.idx`` (so a copied dataset hits the cache and a rewritten one misses it).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from corpus.blending import index_maps as maps
from corpus.blending import packing
from corpus.blending.map_cache import Entry, cache_key
from corpus.blending.plan import MemberPlan, SplitPlan
from corpus.blending.resolve import ResolvedBlend
from corpus.core.cores import available_cores
from corpus.core.disk import format_bytes, free_bytes

log = logging.getLogger(__name__)

MAPS_VERSION = 1


@dataclass
class SplitMaps:
    """The loaded (memory-mapped, verified) maps of one split."""

    plan: SplitPlan
    members: list[dict[str, np.ndarray]]
    dataset_index: np.ndarray | None
    dataset_sample_index: np.ndarray | None
    built: int
    """How many cache entries this call built (0 = all warm)."""


def gpt_key(resolved: ResolvedBlend, member: MemberPlan) -> str:
    """The cache key of one source split's maps."""
    config = resolved.config
    return cache_key({"kind": "gpt", "version": MAPS_VERSION, "source": member.source.digest,
                      "begin": member.begin, "end": member.end, "num_samples": member.num_samples,
                      "seq_length": config.seq_length, "seed": config.seed,
                      "extra_token": config.samples.extra_token, "drop_last": True})


def member_key(resolved: ResolvedBlend, member: MemberPlan) -> str:
    """The cache key of a member's maps: concatenating (``gpt``) or packed."""
    if resolved.config.packing == "best_fit":
        return packing.packed_key(resolved.config, member.source, member.begin, member.end, member.num_samples)
    return gpt_key(resolved, member)


def member_entry(resolved: ResolvedBlend, member: MemberPlan, split: str) -> Entry:
    """A member's maps, loaded or built."""
    config = resolved.config
    if config.packing == "best_fit":
        return packing.packed_entry(resolved.cache, config, member.source, member.begin, member.end,
                                    member.num_samples, split)

    def build() -> tuple[dict[str, np.ndarray], dict]:
        log.info("building %s maps of %s: %s samples, %d epoch(s)", split, member.name,
                 member.num_samples if member.num_samples is not None else "one epoch of", member.epochs.num_epochs)
        built = maps.build_gpt_maps(member.source.lengths, member.begin, member.end, member.num_samples,
                                    config.seq_length, config.seed, config.samples.extra_token)
        return built.arrays(), {"epochs": member.epochs.num_epochs}

    description = {"source": member.name, "spec": member.source.spec, "split": split,
                   "sequences": [member.begin, member.end], "num_samples": member.num_samples}
    return resolved.cache.get_or_build("gpt", gpt_key(resolved, member), build, description)


def blend_key(plan: SplitPlan, member_keys: list[str]) -> str:
    """The cache key of a blended split's maps: its members' keys (in order), how they are blended (a schedule's
    phases included) and its size."""
    material = {"kind": "blend", "version": MAPS_VERSION, "members": member_keys, "mode": plan.mode,
                "weights": plan.blend_weights, "size": plan.size}
    if plan.schedule is not None:
        material["schedule"] = plan.schedule.describe()
    return cache_key(material)


def _blend_entry(resolved: ResolvedBlend, plan: SplitPlan, lengths: list[int]) -> Entry:
    schedule = plan.schedule
    member_keys = [member_key(resolved, member) for member in plan.members]

    def build() -> tuple[dict[str, np.ndarray], dict]:
        if schedule is not None:
            index, sample, counts = maps.scheduled_blending_indices(schedule.start, schedule.end, schedule.bounds)
        elif plan.blend_weights is None:
            index, sample, counts = maps.exhaustive_blending_indices(lengths)
        else:
            index, sample, counts = maps.blending_indices(list(plan.blend_weights), plan.size)
        for member, count, length in zip(plan.members, counts, lengths):
            if count > length:
                raise resolved.config.error(
                    f"the {plan.split} blend takes {count} samples from {member.name} but its maps hold {length}; "
                    "this should not happen with megatron's 0.5% surplus: please report it", member.key)
        return {"dataset_index": index, "dataset_sample_index": sample}, {"counts": counts.tolist()}

    description = {"split": plan.split, "members": [m.name for m in plan.members], "size": plan.size}
    return resolved.cache.get_or_build("blend", blend_key(plan, member_keys), build, description)


def missing_map_bytes(resolved: ResolvedBlend, plans: Iterable[SplitPlan | None]) -> int:
    """Bytes of the maps ``plans`` need that the cache lacks (estimated from the plans, nothing built). ``best_fit``
    members count nothing: planning has packed them already."""
    needed, cache = 0, resolved.cache
    for plan in filter(None, plans):
        if resolved.config.packing != "best_fit":
            needed += sum(maps.gpt_map_bytes(member.end - member.begin, member.epochs.num_epochs, member.length,
                                             int(member.source.lengths[member.begin:member.end].max(initial=0)))
                          for member in plan.members if not cache.has("gpt", gpt_key(resolved, member)))
        if plan.mode not in ("single", "online") and not cache.has(
                "blend", blend_key(plan, [member_key(resolved, member) for member in plan.members])):
            needed += plan.size * maps.BLEND_BYTES_PER_SAMPLE
    return needed


def check_maps_fit(resolved: ResolvedBlend, plans: Iterable[SplitPlan | None]) -> None:
    """Refuse, before anything is built, maps the cache's disk has no room for (a ConfigError with the estimate)."""
    needed = missing_map_bytes(resolved, plans)
    free = free_bytes(resolved.cache.root)
    if needed and free is not None and needed > free:
        raise resolved.config.error(
            f"the index maps of this request need about {format_bytes(needed)} in the cache "
            f"{resolved.cache.root} but its disk has {format_bytes(free)} free; ask for fewer samples, free space, or "
            "point the blend's cache_dir at a larger disk", "cache_dir")


def build_split_maps(resolved: ResolvedBlend, plan: SplitPlan) -> SplitMaps:
    """Load every map ``plan`` needs, building (once, under a lock) whatever the cache lacks.
    Sources build in parallel threads (numpy's shuffles and the compiled loops release the GIL)."""
    kind = "packed" if resolved.config.packing == "best_fit" else "gpt"
    if not all(resolved.cache.has(kind, member_key(resolved, member)) for member in plan.members):
        maps.prepare_kernels()
    workers = min(len(plan.members), available_cores())
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="maps") as pool:
        entries = list(pool.map(lambda member: member_entry(resolved, member, plan.split), plan.members))
    built = sum(entry.built for entry in entries) + sum(member.maps_built for member in plan.members)
    members = [entry.arrays for entry in entries]
    if plan.mode in ("single", "online"):  # an online blend is drawn as the run reads it
        return SplitMaps(plan, members, None, None, built)
    lengths = [m["sample_index"].shape[0] - 1 for m in members]
    blend = _blend_entry(resolved, plan, lengths)
    return SplitMaps(plan, members, blend.arrays["dataset_index"], blend.arrays["dataset_sample_index"],
                     built + blend.built)
