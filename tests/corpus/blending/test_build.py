"""The cache keys of the index maps: every field a source split's or a blended split's maps are built from changes
its key, so an entry is never served for other inputs (a hit with the same key is tested in test_map_cache.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from corpus.blending.build import blend_key, gpt_key, member_key
from corpus.blending.plan import plan_split
from corpus.blending.resolve import ResolvedBlend, resolve_blend
from corpus.blending.schema import blend_from_dict
from tests.cache_keys import assert_each_field_changes_the_key
from tests.corpus.blending.blend_data import web_and_code, weighted_blend

BLEND = weighted_blend(0.6, 0.4, seq_length=32, seed=3, split="90,10,0")


@pytest.fixture
def resolved(tmp_path: Path) -> ResolvedBlend:
    return resolve_blend(blend_from_dict(BLEND, base_dir=web_and_code(tmp_path, 200)))


def test_every_field_of_a_source_splits_maps_changes_its_key(resolved: ResolvedBlend) -> None:
    web_member = plan_split(resolved, "train", 500).members[0]
    web, code = (source for _, source in resolved.all_sources()[:2])

    def key_of(source, begin, end, num_samples, seq_length, seed, extra_token) -> str:
        config = blend_from_dict({**BLEND, "seq_length": seq_length, "seed": seed,
                                  "samples": {"add_extra_token_to_sequence": extra_token}},
                                 base_dir=resolved.config.base_dir)
        member = replace(web_member, source=source, begin=begin, end=end, num_samples=num_samples)
        return gpt_key(replace(resolved, config=config), member)

    base = {"source": web, "begin": web_member.begin, "end": web_member.end, "num_samples": web_member.num_samples,
            "seq_length": 32, "seed": 3, "extra_token": True}
    assert_each_field_changes_the_key(key_of, base, {
        "source": code, "begin": web_member.begin + 1, "end": web_member.end - 1,
        "num_samples": web_member.num_samples + 1, "seq_length": 31, "seed": 4, "extra_token": False})


def test_best_fit_members_take_the_packed_key_of_their_own_sequences(resolved: ResolvedBlend) -> None:
    member = plan_split(resolved, "train", 500).members[0]
    packed = replace(resolved, config=replace(resolved.config, packing="best_fit"))
    assert member_key(resolved, member) == gpt_key(resolved, member)
    assert member_key(packed, member) not in (gpt_key(resolved, member), gpt_key(packed, member))
    code = resolved.all_sources()[1][1]

    def key_of(source, begin, end, num_samples) -> str:
        return member_key(packed, replace(member, source=source, begin=begin, end=end, num_samples=num_samples))

    assert_each_field_changes_the_key(key_of, {"source": member.source, "begin": member.begin, "end": member.end,
                                               "num_samples": member.num_samples},
                                      {"source": code, "begin": member.begin + 1, "end": member.end - 1,
                                       "num_samples": member.num_samples + 1})


def test_every_field_of_a_blended_splits_maps_changes_its_key(resolved: ResolvedBlend) -> None:
    plan = plan_split(resolved, "train", 500)
    keys = [member_key(resolved, member) for member in plan.members]

    def key_of(members, mode, weights, size) -> str:
        return blend_key(replace(plan, mode=mode, blend_weights=weights, size=size), members)

    base = {"members": keys, "mode": plan.mode, "weights": plan.blend_weights, "size": plan.size}
    assert plan.mode == "weighted" and len(keys) == 2
    assert_each_field_changes_the_key(key_of, base, {
        "members": keys[::-1], "mode": "unweighted", "weights": (0.5, 0.5), "size": plan.size + 1})
