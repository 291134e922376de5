"""Learning-rate schedule: warmup, then linear/cosine/constant decay to --min-lr."""

from __future__ import annotations

import math
import typing

import pytest

from corpus.core.errors import ConfigError
from trainer.config.schema import DecayStyle, OptimConfig
from trainer.optim.schedule import DECAY_STYLES, LRSchedule


def schedule(style: str, **values) -> LRSchedule:
    return LRSchedule(OptimConfig(lr=1.0, min_lr=0.1, lr_warmup_iters=10, lr_decay_style=style, **values), 110)


def test_warmup_is_linear_from_init_and_reaches_peak():
    lr = schedule("cosine")
    assert [lr(s) for s in (1, 5, 10)] == [0.1, 0.5, 1.0]
    assert schedule("linear", lr_warmup_init=0.5)(5) == 0.75


@pytest.mark.parametrize("style, middle", [("linear", 0.55), ("cosine", 0.55), ("constant", 1.0)])
def test_decay_styles(style, middle):
    lr = schedule(style)
    assert math.isclose(lr(60), middle)
    assert math.isclose(lr(110), 0.1 if style != "constant" else 1.0)
    assert lr(500) == lr(110)  # held at the floor after the decay


def test_cosine_quarter_point():
    assert math.isclose(schedule("cosine")(35), 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4)))


def test_decay_iters_override_and_errors():
    assert math.isclose(schedule("linear", lr_decay_iters=20)(20), 0.1)
    with pytest.raises(ConfigError, match="--lr-decay-style"):
        schedule("wsd")
    with pytest.raises(ConfigError, match="--lr-warmup-iters 10 exceeds"):
        schedule("linear", lr_decay_iters=5)


def test_every_decay_style_the_config_accepts_has_a_curve():
    assert list(DECAY_STYLES) == list(typing.get_args(DecayStyle))
