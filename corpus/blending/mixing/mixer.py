"""The online mixer: per-source losses in, train weights out every ``update_interval`` steps.

Each step hands :meth:`OnlineMixer.observe` the loss sum and loss-bearing tokens of every source in the global
batch (the trainer's per-source telemetry, already reduced over every rank). At an update the mixer divides the
window's sums into mean losses, rounds them to ``loss_decimals`` decimals, asks the rule
(:mod:`corpus.blending.mixing.rules`) for a distribution and lays the floor under it.

NOTE: why the weights are the same on every rank and at every layout: the sums every rank reads come from one
all-reduce, so they are equal on all ranks; a different layout adds the same numbers in another order, which moves
their last bits only, and the rounding removes that; everything after is float64 arithmetic in a fixed order on
values every rank holds. (A mean lying within a rounding error of a rounding boundary could still round two ways;
at three decimals that is a chance of about 1e-4 per update and source.)
"""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np

from corpus.blending.mixing.config import MixingConfig

log = logging.getLogger(__name__)


class OnlineMixer:
    """The weights of the train sources ``names``, moved by ``config``'s rule from ``prior``.

    ``columns`` names what the arrays handed to :meth:`observe` index (the blend's sources in file order, as a
    batch's ``source_ids`` do); by default ``names``."""

    def __init__(self, config: MixingConfig, names: tuple[str, ...], prior: Sequence[float],
                 columns: tuple[str, ...] | None = None) -> None:
        self.config, self.names = config, tuple(names)
        self.prior = np.asarray(prior, dtype=np.float64)
        self.rule = config.rule_class(config.rule_options(), self.names, self.prior)
        columns = tuple(columns) if columns is not None else self.names
        self._columns = np.array([columns.index(name) for name in self.names], dtype=np.int64)
        self.weights = self.prior.copy()
        """The weights in force (float64, normalised, in the order of ``names``)."""
        self.updates = 0
        self.state = self.rule.start()
        self.last_losses = np.full(len(self.names), np.nan)
        """The rounded window losses the last update read (NaN before any)."""
        self._start_window()

    def _start_window(self) -> None:
        self._loss_sums = np.zeros(len(self.names), dtype=np.float64)
        self._tokens = np.zeros(len(self.names), dtype=np.float64)

    def observe(self, loss_sums: Sequence[float], tokens: Sequence[float]) -> None:
        """Add one step's loss sum and loss-bearing tokens of each source (indexed by ``columns``)."""
        self._loss_sums += np.asarray(loss_sums, dtype=np.float64)[self._columns]
        self._tokens += np.asarray(tokens, dtype=np.float64)[self._columns]

    def due(self, step: int) -> bool:
        """Whether the weights are updated after step ``step`` (counted from 1)."""
        return step % self.config.update_interval == 0

    def window_losses(self) -> np.ndarray:
        """Each source's mean loss over the window, rounded (NaN where it had no token)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            means = np.where(self._tokens > 0, self._loss_sums / np.maximum(self._tokens, 1.0), np.nan)
        return np.round(means, self.config.loss_decimals)

    def update(self) -> np.ndarray:
        """Move the weights from the window's losses, start a new window, and return the new weights."""
        self.updates += 1
        self.last_losses = self.window_losses()
        proposal, self.state = self.rule.propose(self.state, self.last_losses, self.weights, self.updates)
        floor = self.config.floor
        self.weights = floor + (1.0 - len(self.names) * floor) * proposal
        self._start_window()
        return self.weights

    def after_step(self, step: int, loss_sums: Sequence[float], tokens: Sequence[float]) -> np.ndarray | None:
        """:meth:`observe` step ``step``'s sums, and :meth:`update` when it is due: the new weights, else None.
        What a training loop calls after each optimizer step (see docs/blends.md)."""
        self.observe(loss_sums, tokens)
        return self.update() if self.due(step) else None

    def describe(self) -> dict:
        """What must agree for a saved state to continue here."""
        return {"names": list(self.names), "prior": self.prior.tolist(), "rule": self.config.rule,
                "options": self.config.options, "floor": self.config.floor,
                "update_interval": self.config.update_interval, "loss_decimals": self.config.loss_decimals}

    def state_dict(self) -> dict:
        """Everything an exact resume needs (plain lists and numbers; float64 values survive JSON exactly)."""
        return {"describe": self.describe(), "weights": self.weights.tolist(), "updates": self.updates,
                "rule_state": self.state, "loss_sums": self._loss_sums.tolist(), "tokens": self._tokens.tolist()}

    def load_state_dict(self, state: dict | None) -> None:
        """Continue a saved :meth:`state_dict`. One saved under other settings or sources cannot continue: the
        mixer then starts again from the prior, with a warning (a resume told to accept another blend)."""
        if state is None:
            log.warning("the checkpoint holds no online-mixing state: the weights start again from the blend's")
            return
        if state["describe"] != self.describe():
            log.warning("the checkpoint's online mixing had other settings or sources (%s; now %s): the weights start "
                        "again from the blend's", state["describe"], self.describe())
            return
        self.weights = np.array(state["weights"], dtype=np.float64)
        self.updates, self.state = int(state["updates"]), state["rule_state"]
        self._loss_sums = np.array(state["loss_sums"], dtype=np.float64)
        self._tokens = np.array(state["tokens"], dtype=np.float64)
