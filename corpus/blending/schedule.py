"""Weight schedules: a blend whose mix changes over the run, in phases.

::

    schedule:
      - {until: 0.8, weights: {web: 0.7, code: 0.3}}       # the first 80% of the run's train samples
      - {weights: {web: 0.2, code: 0.8}, ramp: linear}       # then a linear ramp to this mix, to the end

A phase ends at a share of the run's train samples (``until``), or at an absolute count of samples
(``until_samples``) or tokens (``until_tokens``: a sample is ``seq_length`` tokens, so the phase ends at the
first sample that starts at or past that many tokens); the last phase may leave its end out (the end of the
run). Its weights hold from its start (``ramp: step``), or move linearly from the previous phase's weights at
its start to its own at its end (``ramp: linear``). A weight of 0 leaves a source out of a phase.

:class:`PhaseConfig` is the YAML's shape, checked by :func:`check_schedule`; :class:`WeightSchedule` is a
schedule laid over a run of ``n`` samples (phase boundaries in samples, normalised weights), what the blending
loop, the dry run and the trainer's telemetry read.

The blending rule: within each phase, sample ``j`` of the phase (``j`` counted from 0) goes to the source whose
expected draws exceed its actual draws in the phase the most, ``argmax_d(C_d(s) - count_d)``, ties to the lower
index, where ``C_d(s) = a_d·s + (b_d − a_d)·s²/(2L)`` integrates the weight of source d over the phase's first
``s`` samples (``a``/``b``: its weights at the phase's start and end; ``L``: the phase's length). A step phase
takes Megatron's ``s = max(j, 1)`` (``C_d(s) = w_d·s``: Megatron's greedy rule exactly, so a one-phase schedule
gives Megatron's blend bit for bit); a ramp takes ``s = j + 1``, the draws expected once this one is made (with
``max(j, 1)`` a source ramping up from 0 would win the second sample on a tie). A source weighted 0 at both ends
of a phase is never drawn in it. Each phase's draws stay within one sample of its expected draws per source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Literal

import numpy as np

from corpus.core.errors import ConfigError

#: How a phase reaches its weights: at once (``step``) or linearly from the previous phase's (``linear``).
RAMPS = ("step", "linear")


@dataclass(frozen=True)
class PhaseConfig:
    """One phase of a weight schedule: where it ends and the weight of each train source in it."""

    weights: dict[str, float]
    """Every train source's weight in this phase, by name (>= 0, normalised within the phase)."""
    until: float | None = None
    """The phase ends at this share of the run's train samples (0 < share <= 1)."""
    until_samples: int | None = None
    """The phase ends after this many train samples."""
    until_tokens: int | None = None
    """The phase ends at this many train tokens (samples of ``seq_length`` tokens; rounded up to a sample)."""
    ramp: Literal["step", "linear"] = "step"
    """``step``: the weights hold from the phase's start; ``linear``: they move from the previous phase's
    weights to these over the phase."""

    def __post_init__(self) -> None:
        ends = [name for name in ("until", "until_samples", "until_tokens") if getattr(self, name) is not None]
        if len(ends) > 1:
            raise ConfigError(f"{' and '.join(ends)} both end this phase; keep one", ends[1])
        if self.until is not None and not (0 < self.until <= 1):
            raise ConfigError(f"until {self.until} is not a share of the run; give a number in (0, 1] (or "
                              "until_samples / until_tokens for an absolute point)", "until")
        for name in ("until_samples", "until_tokens"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"{name} {getattr(self, name)} must be at least 1", name)
        for name, weight in self.weights.items():
            if not (weight >= 0 and math.isfinite(weight)):
                raise ConfigError(f"weight {weight} of {name} is negative or not a number; give a weight >= 0 (0 "
                                  "leaves the source out of this phase)", f"weights.{name}")
        if not sum(self.weights.values()) > 0:
            raise ConfigError("every weight of this phase is 0; give at least one source a weight > 0", "weights")

    @property
    def end_kind(self) -> str | None:
        """Which key ends the phase (None: the last phase, running to the end)."""
        return next((name for name in ("until", "until_samples", "until_tokens") if getattr(self, name) is not None),
                    None)


def check_schedule(phases: tuple[PhaseConfig, ...], names: tuple[str, ...]) -> None:
    """The schedule's shape against the train sources ``names``: a weight for every source in every phase and
    for nothing else, no ramp without a previous phase, ends in increasing order (where two ends are in the same
    unit; shares against counts are compared when the run's length is known), only the last phase open-ended."""
    if not phases:
        raise ConfigError("an empty schedule; list at least one phase {until, weights}", "schedule")
    for index, phase in enumerate(phases):
        key = f"schedule[{index}]"
        unknown = [name for name in phase.weights if name not in names]
        if unknown:
            raise ConfigError(f"no train source is named {unknown[0]!r}; the sources are {', '.join(names)}",
                              f"{key}.weights.{unknown[0]}")
        missing = [name for name in names if name not in phase.weights]
        if missing:
            raise ConfigError(f"no weight for {', '.join(missing)}; give every source a weight in every phase (0 "
                              "leaves it out of the phase)", f"{key}.weights")
        if phase.ramp == "linear" and index == 0:
            raise ConfigError("the first phase cannot ramp: there is no previous phase to ramp from; use ramp: "
                              "step, or put a phase before it", f"{key}.ramp")
        if phase.end_kind is None and index != len(phases) - 1:
            raise ConfigError("only the last phase may leave its end out; give this one until, until_samples or "
                              "until_tokens", key)
        earlier = [(i, p) for i, p in enumerate(phases[:index]) if p.end_kind == phase.end_kind is not None]
        if earlier and getattr(earlier[-1][1], phase.end_kind) >= getattr(phase, phase.end_kind):
            raise ConfigError(f"{phase.end_kind} {getattr(phase, phase.end_kind)} is not after schedule"
                              f"[{earlier[-1][0]}]'s {getattr(earlier[-1][1], phase.end_kind)}: phases are listed in "
                              "the order they run; sort them by their end", f"{key}.{phase.end_kind}")


def phase_end(phase: PhaseConfig, num_samples: int, seq_length: int) -> int:
    """The sample a phase ends at (exclusive) in a run of ``num_samples`` train samples."""
    if phase.until is not None:
        return int(round(phase.until * num_samples))
    if phase.until_samples is not None:
        return phase.until_samples
    if phase.until_tokens is not None:
        return -(-phase.until_tokens // seq_length)
    return num_samples


def _cumulative(start: np.ndarray, end: np.ndarray, length: int, taken: float) -> np.ndarray:
    """Expected draws of each source over a phase's first ``taken`` samples (the kernel's ``C_d``, same
    operations in the same order)."""
    return start * taken + (end - start) * taken * taken / (2.0 * length)


@dataclass(frozen=True)
class WeightSchedule:
    """A schedule laid over a run: phase ``p`` covers samples ``[bounds[p], bounds[p + 1])``; its weights move
    from ``start[p]`` to ``end[p]`` (equal rows for a step phase). Rows are normalised; columns are ``names``."""

    names: tuple[str, ...]
    bounds: tuple[int, ...]
    start: np.ndarray = field(compare=False)
    end: np.ndarray = field(compare=False)

    @property
    def num_phases(self) -> int:
        """How many phases the run has."""
        return len(self.bounds) - 1

    @property
    def size(self) -> int:
        """Samples in the run."""
        return self.bounds[-1]

    def phase_at(self, sample: int) -> int:
        """The phase (from 0) blended sample ``sample`` belongs to; past the run, the last."""
        return min(int(np.searchsorted(self.bounds, sample, side="right")) - 1, self.num_phases - 1)

    def weights_at(self, sample: int) -> np.ndarray:
        """The weights in force at sample ``sample`` (a ramp's, interpolated at that sample)."""
        phase = self.phase_at(sample)
        length = self.bounds[phase + 1] - self.bounds[phase]
        along = min(max(sample - self.bounds[phase], 0), length) / length
        return self.start[phase] + (self.end[phase] - self.start[phase]) * along

    def expected_counts(self, samples: int) -> np.ndarray:
        """Each source's expected draws over the run's first ``samples`` samples (float64)."""
        total = np.zeros(len(self.names))
        for phase in range(self.num_phases):
            first, last = self.bounds[phase], self.bounds[phase + 1]
            if samples <= first:
                break
            total += _cumulative(self.start[phase], self.end[phase], last - first, min(samples, last) - first)
        return total

    def describe(self) -> dict:
        """What decides the blended index (for cache keys and fingerprints)."""
        return {"names": list(self.names), "bounds": list(self.bounds), "start": self.start.tolist(),
                "end": self.end.tolist()}


def lay_out(phases: tuple[PhaseConfig, ...], names: tuple[str, ...], num_samples: int, seq_length: int,
            error: Callable[[str, str], ConfigError]) -> WeightSchedule:
    """The schedule ``phases`` over a run of ``num_samples`` train samples, for the sources ``names`` (a subset of
    the phases' names: sources the split leaves out are dropped and the rest renormalised). ``error(problem, key)``
    makes the error located in the blend file: a phase ending past the run, out of order, or empty after
    rounding; a phase left with no weight."""
    bounds = [0]
    for index, phase in enumerate(phases):
        end = phase_end(phase, num_samples, seq_length)
        key = f"schedule[{index}]" + (f".{phase.end_kind}" if phase.end_kind else "")
        if end > num_samples:
            raise error(f"this phase ends at sample {end:,} but the run has {num_samples:,} train samples; end it "
                        "inside the run, or ask for more samples (--train-iters)", key)
        if index == len(phases) - 1 and end < num_samples:
            raise error(f"the last phase ends at sample {end:,} but the run has {num_samples:,} train samples; "
                        "leave its end out (it then runs to the end) or end it with until: 1.0", key)
        if end <= bounds[-1]:
            raise error(f"this phase ends at sample {end:,}, not after the previous phase's end ({bounds[-1]:,}): "
                        "it would be empty; order the phases by their end and space them apart", key)
        bounds.append(end)
    rows = []
    for index, phase in enumerate(phases):
        row = np.array([phase.weights[name] for name in names], dtype=np.float64)
        if not row.sum() > 0:
            raise error(f"every source weighted in this phase is left out of the train split (its share of the "
                        f"split is empty): nothing to draw from; weight one of {', '.join(names)}",
                        f"schedule[{index}].weights")
        rows.append(row / np.sum(row))
    end = np.array(rows)
    start = np.array([end[index - 1] if phase.ramp == "linear" else end[index] for index, phase in enumerate(phases)])
    return WeightSchedule(tuple(names), tuple(bounds), start, end)
