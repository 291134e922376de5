"""The rules and the mixer: ODM's bandit takes weight from a source whose loss is low, explores less as updates
go on, never goes under the floor, starts from the blend's weights; a DoReMi-style rule is one more entry of the
registry, and so is any rule a test adds; the rounding makes sums that differ in their last bits give the same
weights; a saved state continues exactly."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest

from corpus.blending.mixing import rules
from corpus.blending.mixing.config import MixingConfig
from corpus.blending.mixing.mixer import OnlineMixer

NAMES = ("web", "code", "python")


def mixer(**settings) -> OnlineMixer:
    return OnlineMixer(MixingConfig(kind="online", **settings), NAMES, [0.5, 0.3, 0.2])


def feed(mix: OnlineMixer, losses: tuple[float, ...], steps: int, tokens: float = 1000.0) -> list[np.ndarray]:
    """``steps`` steps of these mean losses per source; the weights after each update."""
    updates = []
    for step in range(1, steps + 1):
        new = mix.after_step(step, [loss * tokens for loss in losses], [tokens] * len(losses))
        if new is not None:
            updates.append(new.copy())
    return updates


def test_odm_takes_weight_from_the_easy_source_and_explores_less_over_time():
    updates = feed(mixer(update_interval=5, floor=0.0), (4.0, 0.2, 4.0), 200)
    assert len(updates) == 40
    assert updates[0].tolist() == [0.5, 0.3, 0.2]  # S·ε = 1 at the first updates: ODM explores, here the prior
    assert updates[-1][1] < 0.25 < updates[-1][0] and updates[-1][1] < updates[10][1] < updates[3][1]
    assert all(update.sum() == pytest.approx(1.0) for update in updates)
    odm = rules.OnlineDataMixing(rules.OnlineDataMixingOptions(), NAMES, np.full(3, 1 / 3))
    assert odm.exploration(1) == 1 / 3 and odm.exploration(100) == pytest.approx(math.sqrt(math.log(3) / 300))


def test_the_blend_weights_are_the_prior_and_the_floor_holds():
    mix = mixer(update_interval=1, floor=0.3)
    assert mix.weights.tolist() == [0.5, 0.3, 0.2]  # in force until the first update
    updates = feed(mix, (9.0, 0.01, 9.0), 300)
    assert min(update.min() for update in updates) >= 0.3 - 1e-15
    assert updates[-1][1] < 0.33  # pushed down onto the floor, not below


def test_a_source_absent_from_a_window_keeps_its_reward():
    mix = mixer(update_interval=1, floor=0.0)
    feed(mix, (3.0, 1.0, 3.0), 10)
    before = list(mix.state["rewards"])
    mix.after_step(11, [3000.0, 0.0, 3000.0], [1000.0, 0.0, 1000.0])
    assert mix.state["rewards"][1] == before[1] and mix.state["rewards"][0] != before[0]


def test_the_excess_loss_rule_moves_weight_to_what_is_left_to_learn():
    reference = {"web": 3.0, "code": 1.0, "python": 2.0}
    mix = mixer(rule="excess_loss", update_interval=2, floor=0.01, options={"reference": reference,
                                                                           "step_size": 0.5})
    updates = feed(mix, (3.0, 1.0, 3.5), 20)  # only python is above its reference
    assert updates[-1][2] > 0.9 and updates[0][2] > 0.2


@dataclass(frozen=True)
class UniformOptions:
    pass


class Uniform(rules.MixingRule):
    """A rule a test adds: always every source alike."""

    Options = UniformOptions

    def start(self) -> dict:
        return {}

    def propose(self, state, losses, weights, update):
        return np.full(len(self.names), 1.0 / len(self.names)), state


def test_a_rule_is_one_more_entry(monkeypatch):
    monkeypatch.setitem(rules.RULES, "uniform", Uniform)
    updates = feed(mixer(rule="uniform", update_interval=3, floor=0.0), (5.0, 1.0, 2.0), 3)
    assert updates[0].tolist() == [1 / 3] * 3
    with pytest.raises(Exception, match="unknown key.*known keys: $"):
        MixingConfig(kind="online", rule="uniform", options={"alpha": 1}).rule_options()


def test_sums_that_differ_in_their_last_bits_give_the_same_weights():
    """What another parallel layout changes: the order the losses are summed in, hence their last bits."""
    rng = np.random.default_rng(0)
    exact, shifted = mixer(update_interval=4), mixer(update_interval=4)
    for step in range(1, 41):
        sums, tokens = rng.uniform(1000, 5000, 3), rng.integers(500, 1000, 3).astype(float)
        exact.after_step(step, sums, tokens)
        shifted.after_step(step, sums * (1 + 1e-9), tokens)
    assert exact.weights.tolist() == shifted.weights.tolist()
    unrounded = mixer(update_interval=4, loss_decimals=12)
    jittered = mixer(update_interval=4, loss_decimals=12)
    rng = np.random.default_rng(0)
    for step in range(1, 41):
        sums, tokens = rng.uniform(1000, 5000, 3), rng.integers(500, 1000, 3).astype(float)
        unrounded.after_step(step, sums, tokens)
        jittered.after_step(step, sums * (1 + 1e-9), tokens)
    assert unrounded.weights.tolist() != jittered.weights.tolist()  # without the rounding they would part


def test_a_saved_state_continues_exactly_through_json():
    whole, first = mixer(update_interval=3), mixer(update_interval=3)
    losses = [(4.0 - 0.1 * step, 1.0 + 0.01 * step, 2.5) for step in range(1, 31)]
    for step, loss in enumerate(losses, 1):
        whole.after_step(step, [value * 700 for value in loss], [700.0] * 3)
    for step, loss in enumerate(losses[:14], 1):  # 14: mid-window
        first.after_step(step, [value * 700 for value in loss], [700.0] * 3)
    second = mixer(update_interval=3)
    second.load_state_dict(json.loads(json.dumps(first.state_dict())))
    for step, loss in enumerate(losses[14:], 15):
        second.after_step(step, [value * 700 for value in loss], [700.0] * 3)
    assert second.weights.tolist() == whole.weights.tolist() and second.state == whole.state


def test_a_state_of_other_settings_starts_again_from_the_prior(caplog):
    saved = mixer(update_interval=3)
    feed(saved, (4.0, 1.0, 2.0), 9)
    other = mixer(update_interval=3, floor=0.1)
    other.load_state_dict(saved.state_dict())
    assert other.weights.tolist() == [0.5, 0.3, 0.2] and "start again from the blend's" in caplog.text
