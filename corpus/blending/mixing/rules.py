"""The rules of online mixing: how the train weights move, given each source's loss over the last update window.

A rule is one class in :data:`RULES`, looked up by the blend's ``mixing.rule``: its ``Options`` dataclass (the
blend's ``mixing.options``, one field per option), :meth:`MixingRule.start` (its state before any update) and
:meth:`MixingRule.propose` (the next distribution and state). The state is plain lists and numbers, so a checkpoint
holds it as it is. A rule sees only rounded losses (:class:`~corpus.blending.mixing.mixer.OnlineMixer` rounds
them) and computes in float64 in a fixed order, so every rank and every parallel layout gets the same weights; the
mixer then lays the floor under them. Adding a rule (ADO's scaling-law forecast, say) is one more class here and
one more entry in :data:`RULES`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from corpus.core.errors import ConfigError


class MixingRule:
    """A rule over the sources ``names`` whose weights start at ``prior`` (normalised, float64)."""

    Options: type = type(None)
    """The dataclass of the rule's ``mixing.options``."""

    def __init__(self, options: object, names: tuple[str, ...], prior: np.ndarray) -> None:
        self.options, self.names, self.prior = options, names, prior

    @classmethod
    def check(cls, options: object, names: tuple[str, ...]) -> None:
        """Refuse options that do not fit the train sources ``names`` (a :class:`ConfigError` keyed inside
        ``options``)."""

    def start(self) -> dict:
        """The state before the first update."""
        raise NotImplementedError

    def propose(self, state: dict, losses: np.ndarray, weights: np.ndarray, update: int) -> tuple[np.ndarray, dict]:
        """(the next weights, the next state) after update number ``update`` (from 1): ``losses`` are each source's
        mean token loss over the window (NaN for a source with no token in it), ``weights`` those in force while it
        was trained."""
        raise NotImplementedError


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - np.max(logits))
    return shifted / np.sum(shifted)


@dataclass(frozen=True)
class OnlineDataMixingOptions:
    """Online Data Mixing's settings (Albalak et al. 2023)."""

    smoothing: float = 0.9
    """α: each update keeps this share of a source's estimated reward and takes the rest from its new loss."""
    importance_weighting: bool = True
    """Divide a loss by the weight that drew it (EXP3's estimate for a bandit that sees only what it drew, as
    ODM does); false takes each loss as it is, since every source with tokens in the window is seen."""

    def __post_init__(self) -> None:
        if not 0 <= self.smoothing < 1:
            raise ConfigError(f"smoothing {self.smoothing} must be in [0, 1) (the share of the reward kept at each "
                              "update; ODM uses 0.9)", "smoothing")


class OnlineDataMixing(MixingRule):
    """ODM: an EXP3 bandit whose arms are the sources and whose reward is a source's training loss (a source still
    far from learnt pays more), with exploration decaying as ``ε_n = min(1/S, sqrt(ln S / (S·n)))``.

    After update ``u`` the rewards are ``R_d ← α·R_d + (1 − α)·L_d / w_d`` for each source seen (``L_d`` its loss,
    ``w_d`` its weight while it was trained) and the weights
    ``(1 − S·ε_{u+1})·softmax(ln prior_d + ε_u·R_d) + S·ε_{u+1}·prior_d``: ODM's policy for its step ``u + 1``
    with the blend's weights where ODM has the uniform distribution (its start, and what it explores), so that a
    uniform prior is ODM exactly. The first updates stay at the prior (``S·ε = 1`` until ``n > S·ln S``) and the
    weights move as the exploration decays."""

    Options = OnlineDataMixingOptions

    def exploration(self, number: int) -> float:
        """ODM's ``ε_n``."""
        count = len(self.names)
        return min(1.0 / count, math.sqrt(math.log(count) / (count * number))) if count > 1 else 0.0

    def start(self) -> dict:
        return {"rewards": [0.0] * len(self.names)}

    def propose(self, state: dict, losses: np.ndarray, weights: np.ndarray, update: int) -> tuple[np.ndarray, dict]:
        rewards = np.array(state["rewards"], dtype=np.float64)
        seen = ~np.isnan(losses)
        estimate = losses / weights if self.options.importance_weighting else losses
        alpha = self.options.smoothing
        rewards[seen] = alpha * rewards[seen] + (1.0 - alpha) * estimate[seen]
        explore = len(self.names) * self.exploration(update + 1)
        policy = _softmax(np.log(self.prior) + self.exploration(update) * rewards)
        return (1.0 - explore) * policy + explore * self.prior, {"rewards": rewards.tolist()}


@dataclass(frozen=True)
class ExcessLossOptions:
    """DoReMi-style settings: the reference losses and the step."""

    reference: dict[str, float]
    """Each train source's loss in a reference run (DoReMi's reference model; e.g. the last ``loss`` of each
    source in a fixed-weight run's ``--metrics-jsonl``)."""
    step_size: float = 1.0
    """η: how far one update moves the log-weights per unit of excess loss."""

    def __post_init__(self) -> None:
        if not self.step_size > 0:
            raise ConfigError(f"step_size {self.step_size} must be > 0", "step_size")


class ExcessLoss(MixingRule):
    """DoReMi's online update against a reference run: a source's log-weight grows by ``η·max(L_d − ref_d, 0)`` at
    each update (its excess loss: what a model of this size can still learn from it), from the blend's weights."""

    Options = ExcessLossOptions

    @classmethod
    def check(cls, options: ExcessLossOptions, names: tuple[str, ...]) -> None:
        missing = [name for name in names if name not in options.reference]
        if missing:
            raise ConfigError(f"no reference loss for {', '.join(missing)}; give every train source one",
                              "reference")
        unknown = [name for name in options.reference if name not in names]
        if unknown:
            raise ConfigError(f"no train source is named {unknown[0]!r}; the sources are {', '.join(names)}",
                              f"reference.{unknown[0]}")

    def start(self) -> dict:
        return {"log_weights": np.log(self.prior).tolist()}

    def propose(self, state: dict, losses: np.ndarray, weights: np.ndarray, update: int) -> tuple[np.ndarray, dict]:
        reference = np.array([self.options.reference[name] for name in self.names], dtype=np.float64)
        excess = np.where(np.isnan(losses), 0.0, np.maximum(losses - reference, 0.0))
        logits = np.array(state["log_weights"], dtype=np.float64) + self.options.step_size * excess
        return _softmax(logits), {"log_weights": logits.tolist()}


#: The rules ``mixing.rule`` names, and what each is.
RULES: dict[str, type[MixingRule]] = {
    "odm": OnlineDataMixing,
    "excess_loss": ExcessLoss,
}
