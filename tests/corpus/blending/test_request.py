"""``BlendRequest``: corpus blend's config, usable from Python with the command line's spellings."""

from __future__ import annotations

import pytest

from corpus.blending.counts import SampleCounts, megatron_sample_counts
from corpus.blending.request import BlendRequest
from corpus.core.errors import ConfigError


def test_counts_follow_the_trainer_and_a_range_is_read_as_typed() -> None:
    request = BlendRequest("blend.yaml", train_iters=1000, global_batch_size=4, sample_range="3:9")
    assert request.sample_range == (3, 9) and request.required == ("train",)
    assert request.counts() == megatron_sample_counts(1000, 4, 1000, 100)
    valid = BlendRequest("blend.yaml", split="valid", num_samples=12)
    assert valid.counts() == SampleCounts(valid=12) and valid.required == ("valid",)
    assert BlendRequest("blend.yaml").counts() is None


@pytest.mark.parametrize("fields, message", [
    ({"build": True}, "--build needs --num-samples"),
    ({"build": True, "dry_run": True, "num_samples": 4}, "choose one of"),
    ({"train_iters": 10}, "go together"),
    ({"num_samples": 4, "train_iters": 1, "global_batch_size": 1}, "not both"),
    ({"ids": True}, "add --show-samples"),
    ({"sample_range": "8:2"}, "need 0 <= START < STOP"),
    ({"sample_range": "a:b"}, "write START:STOP"),
    ({"seq_length": 1}, "--seq-length 1: must be at least 2"),
    ({"split": "dev"}, "--split 'dev' is not one of train, valid, test"),
])
def test_requests_that_cannot_run_name_the_flag(fields: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BlendRequest("blend.yaml", **fields)
