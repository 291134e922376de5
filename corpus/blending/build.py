"""Turn a :class:`~corpus.blending.plan.SplitPlan` into index maps, through the content-addressed cache.

One cache entry per source split (``gpt-…``: document, sample and shuffle index; ``packed-…`` with
``packing: best_fit``, see :mod:`corpus.blending.packing`) and one per
blended split (``blend-…``: source and sample-within-source of every blended sample). Keys hold
everything that changes the arrays, including what megatron-core forgets to hash
(``add_extra_token_to_sequence``, the surplus, the drop-last rule) and the content digest of
every ``.idx`` (so a copied dataset hits the cache and a rewritten one misses it).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from corpus.blending import index_maps as maps
from corpus.blending import packing
from corpus.blending.map_cache import Entry, cache_key
from corpus.blending.plan import MemberPlan, SplitPlan
from corpus.blending.resolve import ResolvedBlend
from corpus.core.cores import available_cores

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
    """The cache key of a blended split's maps: its members' keys (in order), how they are blended and its size."""
    return cache_key({"kind": "blend", "version": MAPS_VERSION, "members": member_keys, "mode": plan.mode,
                      "weights": plan.blend_weights, "size": plan.size})


def _blend_entry(resolved: ResolvedBlend, plan: SplitPlan, member_keys: list[str], lengths: list[int]) -> Entry:

    def build() -> tuple[dict[str, np.ndarray], dict]:
        if plan.blend_weights is None:
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
    if plan.mode == "single":
        return SplitMaps(plan, members, None, None, built)
    lengths = [m["sample_index"].shape[0] - 1 for m in members]
    blend = _blend_entry(resolved, plan, [member_key(resolved, m) for m in plan.members], lengths)
    return SplitMaps(plan, members, blend.arrays["dataset_index"], blend.arrays["dataset_sample_index"],
                     built + blend.built)
