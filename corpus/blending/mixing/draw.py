"""The blended index of an online-mixed split, drawn as the run reads it.

Where a fixed or scheduled blend computes its whole index ahead, an online one cannot: its weights are decided
during the run. :class:`OnlineDraw` decides each blended sample's source when it is first asked for, with the
weights in force then, by Megatron's rule: within a *segment* (samples drawn under one set of weights, counted
from its first sample) sample ``j`` goes to ``argmax_d(w_d·max(j, 1) − count_d)``, ties to the lower index, the
same double-precision terms in the same order as megatron-core's ``build_blending_indices`` — so a run whose
weights never change draws Megatron's blend. New weights start a new segment (the schedule's phases restart their
counts the same way). A source's ``k``-th draw is its ``k``-th sample in its own shuffled order, whatever the
weights.

The state (samples drawn, each source's draws, the segment) is small, so a checkpoint holds it and a resume
continues it exactly, without drawing the past again; under another blend (a resume told to accept one) each
source continues after the samples it already gave.
"""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np

from corpus.blending.errors import DrawError

log = logging.getLogger(__name__)


class OnlineDraw:
    """The source of every blended sample, drawn with the weights in force. ``limits``: samples each source's maps
    hold (a source drawn past them starts them again, with a warning; planning sizes them so that it does not)."""

    def __init__(self, names: tuple[str, ...], weights: Sequence[float], limits: Sequence[int]) -> None:
        self.names = tuple(names)
        self.weights = np.asarray(weights, dtype=np.float64)
        self.limits = np.asarray(limits, dtype=np.int64)
        self.drawn = 0
        """Blended samples decided so far."""
        self.totals = np.zeros(len(names), dtype=np.int64)
        """Each source's draws so far (the next draw of source d is its sample ``totals[d]``)."""
        self.expected = np.zeros(len(names), dtype=np.float64)
        """Each source's draws the weights in force asked so far (the sum of its weight over the samples drawn)."""
        self.segment_start = 0
        self.segment_counts = np.zeros(len(names), dtype=np.int64)
        self._restart_at(0)

    def _restart_at(self, first: int) -> None:
        """Hold samples from ``first`` (= ``drawn``) on; the ones before are forgotten."""
        self.first = first
        self._sources = np.empty(1024, dtype=np.int16)
        self._samples = np.empty(1024, dtype=np.int64)

    def _grow(self, size: int) -> None:
        if size > len(self._sources):
            capacity = max(size, 2 * len(self._sources))
            self._sources = np.resize(self._sources, capacity)
            self._samples = np.resize(self._samples, capacity)

    def draw_to(self, stop: int) -> None:
        """Decide every sample up to ``stop`` (exclusive) with the weights in force."""
        if stop <= self.drawn:
            return
        self._grow(stop - self.first)
        weights, counts, totals = self.weights, self.segment_counts, self.totals
        for sample in range(self.drawn, stop):
            scale = max(float(sample - self.segment_start), 1.0)
            source = int(np.argmax(weights * scale - counts))  # NOTE: Megatron's error terms; argmax ties low
            if totals[source] == self.limits[source]:
                log.warning("online mixing has drawn all %d samples the maps of %s hold (a resume under another "
                            "blend, or weights kept at their most): its first samples come again", self.limits[source],
                            self.names[source])
            self._sources[sample - self.first] = source
            self._samples[sample - self.first] = totals[source] % self.limits[source]
            totals[source] += 1
            counts[source] += 1
        self.expected += weights * (stop - self.drawn)
        self.drawn = stop

    def _held(self, indices: np.ndarray) -> np.ndarray:
        if indices.size and indices.min() < self.first:
            raise DrawError(f"blended sample {int(indices.min())} was drawn before this run resumed at sample "
                            f"{self.first}; an online-mixed split is read forward only")
        if indices.size:
            self.draw_to(int(indices.max()) + 1)
        return indices - self.first

    def locate(self, index: int) -> tuple[int, int]:
        """(source, sample within that source's maps) of blended sample ``index``, drawn if it is not yet."""
        at = int(self._held(np.array([index]))[0])
        return int(self._sources[at]), int(self._samples[at])

    def sources_of(self, indices: np.ndarray) -> np.ndarray:
        """The source of each of ``indices`` (drawn if they are not yet)."""
        held = self._held(np.asarray(indices, dtype=np.int64))  # NOTE: first: drawing may grow the arrays
        return self._sources[held].astype(np.int64)

    def set_weights(self, weights: Sequence[float], at: int) -> None:
        """Draw with ``weights`` from blended sample ``at`` on; ``at`` must be the next sample to draw (the trainer
        changes weights between steps, before the next step's samples are read). Unchanged weights change nothing."""
        weights = np.asarray(weights, dtype=np.float64)
        if np.array_equal(weights, self.weights):
            return
        if at != self.drawn:
            raise DrawError(f"new weights at sample {at}, but samples up to {self.drawn - 1} are drawn: set weights "
                            "between steps, before the loader reads the next step's samples")
        self.weights = weights
        self.segment_start = at
        self.segment_counts = np.zeros(len(self.names), dtype=np.int64)

    def state_dict(self) -> dict:
        """Where the draw stands: enough to continue it exactly."""
        return {"names": list(self.names), "drawn": self.drawn, "weights": self.weights.tolist(),
                "totals": self.totals.tolist(), "expected": self.expected.tolist(),
                "segment_start": self.segment_start, "segment_counts": self.segment_counts.tolist()}

    def load_state_dict(self, state: dict, at: int) -> None:
        """Continue a draw saved by this blend at blended sample ``at`` (the loader's position), exactly."""
        if state["names"] != list(self.names) or state["drawn"] != at:
            raise DrawError(f"the saved draw is of sources {state['names']} at sample {state['drawn']}, not of "
                            f"{list(self.names)} at {at}: it was saved by another blend")
        self.weights = np.array(state["weights"], dtype=np.float64)
        self.totals = np.array(state["totals"], dtype=np.int64)
        self.expected = np.array(state["expected"], dtype=np.float64)
        self.segment_start = int(state["segment_start"])
        self.segment_counts = np.array(state["segment_counts"], dtype=np.int64)
        self.drawn = at
        self._restart_at(at)

    def continue_sources(self, taken: dict[str, int], at: int) -> None:
        """Go on at blended sample ``at`` with each source's next sample after the ``taken`` it already gave (by
        name; a source not named starts at its first), in a new segment: a changed blend repeats and skips
        nothing."""
        gone = sorted(set(taken) - set(self.names))
        if gone:
            log.warning("the checkpoint drew from sources this blend lacks (%s): left out", ", ".join(gone))
        self.totals = np.array([int(taken.get(name, 0)) for name in self.names], dtype=np.int64)
        self.expected = self.totals.astype(np.float64)
        self.drawn = self.segment_start = at
        self.segment_counts = np.zeros(len(self.names), dtype=np.int64)
        self._restart_at(at)
