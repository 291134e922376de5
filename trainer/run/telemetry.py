"""Per-source telemetry: what each source of the blend does to the loss, and how many of its tokens went in.

Every step hands over each source's loss sum and loss-bearing tokens in the global batch (reduced over the
ranks by the step engine and read with the step's loss, so no extra wait for the device). This keeps the
cumulative tokens of each source, by name (a checkpoint carries them, and a resume at any layout continues
them), and the sums since the last logged step, and turns them into the ``sources`` object of a metrics
record: ``{name: {loss, tokens, tokens_total, share, weight, scheduled_share}}``: ``share`` is the realised
share of the tokens so far, ``scheduled_share`` the share the blend's weights (or its schedule, or the weights
online mixing set) give the samples drawn so far, ``weight`` the weight in force at the record's step (under online
mixing, the one drawing the next step's samples: an update made at this step is in it).
"""

from __future__ import annotations

import logging

from corpus.blending.mixing.draw import OnlineDraw
from corpus.blending.schedule import WeightSchedule

log = logging.getLogger(__name__)


class SourceTelemetry:
    """Cumulative tokens per source, and each source's loss and tokens since the last logged step."""

    def __init__(self, names: tuple[str, ...], weights: tuple[float | None, ...],
                 schedule: WeightSchedule | None = None, online: OnlineDraw | None = None) -> None:
        """``weights``: each source's fixed normalised weight (None: none asked); ``schedule``: the train split's
        weight schedule, or ``online``: the draw of an online-mixed train split, which then gives the weights in
        force and the scheduled shares."""
        self.names, self.weights, self.schedule, self.online = names, weights, schedule, online
        self.totals = [0] * len(names)
        self._start_window()

    def _asked(self, consumed_samples: int) -> tuple[list[float | None], list[float | None]]:
        """Each source's weight in force at the last of ``consumed_samples`` samples, and its scheduled share of
        them."""
        if self.online is not None:
            names, weights = self.online.names, self.online.weights
            drawn = self.online.expected.sum()
            shares = self.online.expected / drawn if drawn else weights
        elif self.schedule is None or consumed_samples <= 0:
            return list(self.weights), list(self.weights)
        else:
            names = self.schedule.names
            weights = self.schedule.weights_at(consumed_samples - 1)
            shares = self.schedule.expected_counts(consumed_samples) / consumed_samples
        column = {name: index for index, name in enumerate(names)}
        return ([float(weights[column[name]]) if name in column else None for name in self.names],
                [float(shares[column[name]]) if name in column else None for name in self.names])

    def _start_window(self) -> None:
        self._loss_sums = [0.0] * len(self.names)
        self._tokens = [0] * len(self.names)

    def add(self, loss_sums: list[float], tokens: list[float]) -> None:
        """One step's loss sum and loss-bearing tokens of each source (the whole global batch)."""
        for index, (loss_sum, count) in enumerate(zip(loss_sums, tokens)):
            self._loss_sums[index] += loss_sum
            self._tokens[index] += int(count)
            self.totals[index] += int(count)

    def record(self, consumed_samples: int = 0) -> dict[str, dict]:
        """Each source's token-weighted mean loss over its tokens since the last record (None without any) and
        those tokens, its cumulative tokens, their share of all sources', the weight in force and the share
        scheduled after ``consumed_samples`` train samples; starts a new window."""
        everything = sum(self.totals)
        weights, scheduled = self._asked(consumed_samples)
        record = {name: {"loss": self._loss_sums[index] / self._tokens[index] if self._tokens[index] else None,
                         "tokens": self._tokens[index], "tokens_total": self.totals[index],
                         "share": self.totals[index] / everything if everything else None,
                         "weight": weights[index], "scheduled_share": scheduled[index]}
                  for index, name in enumerate(self.names)}
        self._start_window()
        return record

    def state_dict(self) -> dict:
        """What a checkpoint keeps: the cumulative tokens by source name."""
        return {"tokens": dict(zip(self.names, self.totals))}

    def load_state_dict(self, state: dict | None) -> None:
        """Continue the counts of a checkpoint's :meth:`state_dict` (None: it has none, they start from zero); a
        source it does not know starts from zero."""
        if state is None:
            log.warning("the checkpoint holds no per-source token counts (saved with --log-per-source off): they "
                        "start from zero")
            return
        saved = state["tokens"]
        gone = sorted(set(saved) - set(self.names))
        if gone:
            log.warning("the checkpoint counted tokens of sources this blend lacks (%s): left out", ", ".join(gone))
        self.totals = [int(saved.get(name, 0)) for name in self.names]


def evaluation_record(results: dict[str, tuple[float, float]]) -> dict[str, dict]:
    """The ``sources`` object of an evaluation record from each source's (loss sum, tokens)."""
    return {name: {"loss": total / max(tokens, 1.0), "tokens": int(tokens)} for name, (total, tokens) in
            results.items()}
