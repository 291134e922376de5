"""Flat batches: the ids of many texts in one integer array plus each text's count.

This is the form the pipeline writes (no Python int per token). At a hundred MB/s of input every pass over
the ids costs a measurable share of the run, so ids are put around texts in one copy (the cast to the output
dtype, with its range check, is :func:`corpus.indexed.cast_tokens`).
"""

from __future__ import annotations

import numpy as np


def around_texts(flat: np.ndarray, lengths: np.ndarray, before: list[int], after: list[int],
                 chosen: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Put the ids ``before`` ahead of and ``after`` behind the ids of each text (of each text where the boolean
    mask ``chosen`` is set, else of all), in one copy of ``flat``; returns the new flat ids and counts."""
    count = len(before) + len(after)
    if not count:
        return flat, lengths
    which = np.arange(len(lengths)) if chosen is None else np.flatnonzero(chosen)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    # One row per text: its ``before`` positions, then its ``after`` positions. np.insert puts values given for
    # one position in the order given, so a text's ``after`` stays ahead of the next text's ``before``.
    positions = np.concatenate((np.repeat(starts[which, None], len(before), axis=1),
                                np.repeat(ends[which, None], len(after), axis=1)), axis=1).ravel()
    values = np.tile(np.asarray([*before, *after], dtype=flat.dtype), len(which))
    new_lengths = lengths.copy()
    new_lengths[which] += count
    return np.insert(flat, positions, values), new_lengths

